#!/usr/bin/python3
"""Joins bench_ops' Google Benchmark JSON with torch_ops.py's JSON into one Markdown table.

  ops_table.py --ours OURS.json [...] --torch TORCH.json [...]

Several files per side (one per repetition round) are merged by taking each op's best time.

Columns: op id, shape, our rate (GFLOP/s or GB/s), that rate as % of our ceiling measured in the
same run (the faster SGEMM ceiling row for GFLOP/s rows, stream add for GB/s rows), the PyTorch rate, and
ours/PyTorch = t_torch / t_ours (both sides use the same work model). Rows below --flag
(default 0.7) are marked. Exits non-zero if the two files disagree on an op's shape.
"""
import argparse
import json
import re
import sys

UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}


def load_ours(paths, clock):
    """{id: {shape, seconds, rate, unit, label}}, the best repetition of each benchmark, timed by
    the wall clock or by CPU time (bench_ops' cpu_time: its main thread's, so one thread only)."""
    context, rows = {}, {}
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        context = context or data.get("context", {})
        for b in data["benchmarks"]:
            if b.get("run_type", "iteration") != "iteration" or b.get("error_occurred"):
                continue
            op_id, shape = b["run_name"].split("/")[:2]
            unit = "GFLOP" if "GFLOP" in b else "GB"
            seconds = b[f"{'real' if clock == 'wall' else 'cpu'}_time"] * UNIT_SECONDS[b["time_unit"]]
            rate = b[unit] * b["real_time"] * UNIT_SECONDS[b["time_unit"]] / seconds
            if op_id not in rows or seconds < rows[op_id]["seconds"]:
                rows[op_id] = {"shape": shape, "seconds": seconds, "rate": rate, "unit": unit,
                               "label": b.get("label", "")}
    return context, rows


def load_torch(paths):
    context, rows = {}, {}
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        context = context or data.get("context", {})
        for b in data["benchmarks"]:
            if b["id"] not in rows or b["seconds"] < rows[b["id"]]["seconds"]:
                rows[b["id"]] = b
    return context, rows


def torch_refs(op_id):
    """The torch rows an op of ours is compared with, the fastest present counting. Attention (ours
    materialised or streamed, any variant): torch's materialised composition and its fused
    scaled_dot_product_attention (torch >= 2.0)."""
    attention = re.match(r"attn_.*?_(?:fwd|bwd)", op_id)
    return [attention[0] + "_mat", attention[0] + "_sdpa"] if attention else [op_id]


def torch_best(ref, op_id):
    """The fastest torch row for op_id and how it ran ('mat', 'sdpa', or '' for a plain op)."""
    refs = torch_refs(op_id)
    rows = [(ref[i], i.rsplit("_", 1)[1] if len(refs) > 1 else "") for i in refs if i in ref]
    return min(rows, key=lambda r: r[0]["seconds"]) if rows else (None, "")


def ceiling_text(ceiling, precision):
    """The ceilings measured in this run, as the header prints them."""
    gemm = "square bf16 GEMM" if precision == "bf16" else "SGEMM"
    parts = [f"{gemm} {ceiling['GFLOP']:.1f} GFLOP/s" if ceiling["GFLOP"] else f"{gemm} not measured"]
    if ceiling["GB"]:
        parts.append(f"stream add {ceiling['GB']:.1f} GB/s")
    return ", ".join(parts)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ours", nargs="+", required=True, help="bench_ops JSON file(s)")
    p.add_argument("--torch", nargs="+", required=True, help="torch_ops.py JSON file(s)")
    p.add_argument("--flag", type=float, default=0.7, help="mark rows with ours/PyTorch below this")
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                   help="compare wall-clock times, or CPU times (one thread; torch_ops.py --clock cpu)")
    args = p.parse_args()
    ours_ctx, ours = load_ours(args.ours, args.clock)
    torch_ctx, ref = load_torch(args.torch)

    # The SGEMM ceiling is the faster of our dispatch and one multi-threaded OpenBLAS call; with
    # --precision bf16 the ceiling is the same square GEMM through our bf16 dispatch.
    sgemm = [ours[i]["rate"] for i in ("ceiling_sgemm", "ceiling_sgemm_blas", "ceiling_gemm_bf16") if i in ours]
    ceiling = {"GFLOP": max(sgemm) if sgemm else None,
               "GB": ours.get("ceiling_stream_add", {}).get("rate")}
    precision = ours_ctx.get("precision", "fp32")
    if precision != torch_ctx.get("precision", "fp32"):
        print(f"precision mismatch: ours {precision}, torch {torch_ctx.get('precision', 'fp32')}; "
              "HINT: give bench_ops and torch_ops.py the same --precision", file=sys.stderr)
        return 1
    products = "bf16 products (ours: bf16 operands, float32 accumulation; PyTorch: autocast to bfloat16)"
    lines = [
        f"precision: {products if precision == 'bf16' else 'float32'}",
        f"threads: ours {ours_ctx.get('perceiver_threads', '?')}, "
        f"torch {torch_ctx.get('threads', '?')} (torch {torch_ctx.get('torch', '?')}, "
        f"OMP_WAIT_POLICY={torch_ctx.get('env', {}).get('OMP_WAIT_POLICY', '?')}); "
        f"ceilings: {ceiling_text(ceiling, precision)}",
        f"OpenBLAS kernels: ours {ours_ctx.get('openblas_kernels', ours_ctx.get('openblas_core', '?'))}; "
        f"torch {torch_ctx.get('openblas_core', '?')}",
        f"our vector kernels: {ours_ctx.get('cpu_isa', '?')}",
        f"timed by: {'the wall clock' if args.clock == 'wall' else 'CPU time (time other processes held the core is not counted)'}",
        "",
        "| op | shape | ours | % ceiling | PyTorch | ours/PyTorch |",
        "|---|---|---:|---:|---:|---:|",
    ]
    flagged, mismatched, notes = [], [], set()
    for op_id, r in ours.items():
        unit = f"{r['unit']}/s"
        pct = f"{100 * r['rate'] / ceiling[r['unit']]:.0f}%" if ceiling[r["unit"]] else "–"
        t, form = torch_best(ref, op_id)
        name = op_id
        if torch_refs(op_id) != [op_id]:
            name += " †"
            notes.add("† vs the faster of PyTorch's materialised softmax(Q·Kᵀ)·V (mat, as HuggingFace's model runs "
                      "it) and its fused F.scaled_dot_product_attention (sdpa, torch >= 2.0), in the PyTorch column")
        if t is None:
            torch_col, ratio_col = "–", "–"
        else:
            if t["shape"] != r["shape"]:
                mismatched.append(f"{op_id}: ours {r['shape']}, torch {t['shape']}")
            ratio = t["seconds"] / r["seconds"]
            torch_col = f"{r['rate'] / ratio:.1f} {unit}" + (f" ({form})" if form else "")
            ratio_col = f"{ratio:.2f}"
            if ratio < args.flag:
                ratio_col = f"**{ratio:.2f}**"
                flagged.append(f"{op_id} ({ratio:.2f})")
        lines.append(f"| {name} | {r['shape']} | {r['rate']:.1f} {unit} | {pct} | {torch_col} | {ratio_col} |")
    lines.append("")
    lines.extend(sorted(notes))
    if "Prescott" in (ours_ctx.get("openblas_core"), torch_ctx.get("openblas_core")):
        lines.append("OpenBLAS fell back to its generic Prescott (SSE3) kernels on this CPU; every GEMM runs "
                     "several times below the hardware's speed. HINT: OPENBLAS_CORETYPE=SkylakeX (AVX-512) "
                     "or Haswell (AVX2) before the run (bench/README.md)")
    if flagged:
        lines.append(f"ours/PyTorch < {args.flag}: " + ", ".join(flagged))
    print("\n".join(lines))
    if mismatched:
        print("shape mismatch between bench_ops and torch_ops.py:\n  " + "\n  ".join(mismatched),
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
