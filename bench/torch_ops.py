#!/usr/bin/python3
"""PyTorch reference for bench_ops: the same ops, ids, shapes and thread count, printed as JSON.

Run with Debian's /usr/bin/python3 (python3-torch 1.13). Each op is timed like Google Benchmark
times ours: an untimed warm-up call (quick ops only, as in bench_ops.cpp), then calls until
--min-time seconds have passed (at least one); the mean time per call is one repetition, and the
best of --repetitions is reported.
Outputs are preallocated (out= / in-place variants) wherever torch has them, so neither side pays
page faults for fresh outputs. Attention goes through autograd, as a PyTorch model would, in two forms: the materialised
composition softmax(Q·Kᵀ)·V (`*_mat`, how HuggingFace's Perceiver computes it) and, on torch 2.0
and later, the fused F.scaled_dot_product_attention (`*_sdpa`, its flash-attention CPU kernel).
ops_table.py compares our attention rows with the faster of the two (torch 1.13 has only the
first).

Work models (FLOP or bytes per call) are the ones in bench_ops.cpp, so ours/PyTorch is a ratio
of times; bench/README.md lists them.

--precision bf16 (as bench_ops --precision bf16): the products only, under CPU autocast to
bfloat16, as a model trained with autocast runs them: the operands are cast to bf16 on every call
and the product is bf16 (a GEMM with beta = 1 adds its bf16 result into the float32 C, as autograd
accumulates a weight's gradient); the softmax inside attention is whatever autocast makes it.

  /usr/bin/python3 bench/torch_ops.py --threads 2 > torch.json
"""
import argparse
import contextlib
import json
import math
import os
import re
import sys
import time

# Model sizes (perceiver-spec.md §1); the shape legend is the one in bench_ops.cpp.
M, C, N, D, O, E = 52097, 704, 784, 512, 1025, 1026
LATENT_HEADS = 8
KV_ROW_CHUNK = 2048  # rows per chunk of the encoder's LN_kv/K/V path (perceiver_net.cpp)
CEILING = 2048


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", type=int, default=os.cpu_count(),
                   help="torch intra-op threads and OpenBLAS threads (default: all CPUs)")
    p.add_argument("--min-time", type=float, default=0.3, help="seconds per repetition")
    p.add_argument("--repetitions", type=int, default=1, help="report the best of this many")
    p.add_argument("--filter", default="", help="regex over ids (as --benchmark_filter)")
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                   help="time by the wall clock, or by this process's CPU time (one thread only)")
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                   help="bf16: the products only, under autocast to bfloat16")
    args = p.parse_args()
    if args.threads < 1:
        p.error("--threads must be >= 1")
    return args


def set_thread_env(threads):
    # Must happen before torch (and its OpenBLAS) is loaded. Debian's torch calls the pthreads
    # OpenBLAS, whose pool would otherwise fight torch's spinning OpenMP threads (DESIGN.md #6).
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    os.environ["OMP_NUM_THREADS"] = str(threads)
    os.environ["OPENBLAS_NUM_THREADS"] = str(threads)


def openblas_core():
    """The kernel set OpenBLAS picked (torch's BLAS on Debian), or "?"."""
    import ctypes
    try:
        lib = ctypes.CDLL("libopenblas.so.0")
        lib.openblas_get_corename.restype = ctypes.c_char_p
        return lib.openblas_get_corename().decode()
    except (OSError, AttributeError):
        return "?"


def main():
    args = parse_args()
    set_thread_env(args.threads)
    import torch  # noqa: E402  (after the thread environment)

    torch.set_num_threads(args.threads)
    torch.set_grad_enabled(False)
    gen = torch.Generator().manual_seed(0)
    buffers = {}

    def buf(role, *shape):
        """A preallocated tensor shared by role and shape, uniform in [-1, 1) (as bench_ops)."""
        key = (role,) + shape
        if key not in buffers:
            buffers[key] = torch.rand(*shape, generator=gen) * 2 - 1
        return buffers[key]

    ops = []  # (id, shape, unit, work, make) where make() returns (timed_fn, untimed_setup or None)
    bf16 = args.precision == "bf16"

    def autocast():
        """bf16 autocast around the products (--precision bf16), else nothing."""
        if bf16:
            return torch.autocast("cpu", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def dims(*e):
        return "x".join(str(v) for v in e)

    # ---- GEMM ------------------------------------------------------------------------------
    def gemm(op_id, ta, tb, m, n, k, beta=0.0):
        def make():
            a = buf("gemm.a", k, m).t() if ta == "T" else buf("gemm.a", m, k)
            b = buf("gemm.b", n, k).t() if tb == "T" else buf("gemm.b", k, n)
            c = buf("gemm.c", m, n)
            if bf16:
                def product():
                    with autocast():
                        r = torch.mm(a, b)
                    return r if beta == 0.0 else c.add_(r)
                return product, None
            if beta == 0.0:
                return (lambda: torch.mm(a, b, out=c)), None
            return (lambda: c.addmm_(a, b)), None
        ops.append((op_id, f"{ta}{tb}:{dims(m, n, k)}", "GFLOP", 2.0 * m * n * k, make))

    def stream_ceiling(rows, cols):
        def make():
            a, b, y = buf("ln.x", rows, cols), buf("ln.dy", rows, cols), buf("ln.y", rows, cols)
            return (lambda: torch.add(a, b, out=y)), None
        ops.append(("ceiling_stream_add", dims(rows, cols), "GB", 12.0 * rows * cols, make))

    # ---- layer norm, softmax, GELU --------------------------------------------------------
    def layer_norm(suffix, rows, cols):
        def tensors():
            return (buf("ln.x", rows, cols), buf("ln.gamma", cols), buf("ln.beta", cols),
                    buf("ln.y", rows, cols), buf("ln.mean", rows, 1), buf("ln.rstd", rows, 1))

        def make_fwd():
            x, g, b, y, mean, rstd = tensors()
            return (lambda: torch.ops.aten.native_layer_norm.out(
                x, [cols], g, b, 1e-5, out0=y, out1=mean, out2=rstd)), None

        def make_bwd():
            x, g, b, y, mean, rstd = tensors()
            torch.ops.aten.native_layer_norm.out(x, [cols], g, b, 1e-5, out0=y, out1=mean, out2=rstd)
            dy, dx = buf("ln.dy", rows, cols), buf("ln.dx", rows, cols)
            dg, db = buf("ln.dgamma", cols), buf("ln.dbeta", cols)
            return (lambda: torch.ops.aten.native_layer_norm_backward.out(
                dy, x, [cols], mean, rstd, g, b, [True, True, True], out0=dx, out1=dg, out2=db)), None
        ops.append(("layer_norm_fwd" + suffix, dims(rows, cols), "GB", 8.0 * rows * cols, make_fwd))
        ops.append(("layer_norm_bwd" + suffix, dims(rows, cols), "GB", 16.0 * rows * cols, make_bwd))

    def softmax(suffix, rows, cols):
        def make_fwd():
            x, y = buf("sm.x", rows, cols), buf("sm.y", rows, cols)
            return (lambda: torch._softmax(x, -1, False, out=y)), None

        def make_bwd():
            x, y = buf("sm.x", rows, cols), buf("sm.y", rows, cols)
            dy, dx = buf("sm.dy", rows, cols), buf("sm.dx", rows, cols)
            torch._softmax(x, -1, False, out=y)
            return (lambda: torch.ops.aten._softmax_backward_data.out(
                dy, y, -1, torch.float32, grad_input=dx)), None
        ops.append(("softmax_fwd" + suffix, dims(rows, cols), "GB", 8.0 * rows * cols, make_fwd))
        ops.append(("softmax_bwd" + suffix, dims(rows, cols), "GB", 16.0 * rows * cols, make_bwd))

    def softmax_peaked(rows, cols):  # as bench_ops: scores spread over [-100, 100]
        def make_fwd():
            x, y = buf("sm.x", rows, cols) * 100, buf("sm.y", rows, cols)
            return (lambda: torch._softmax(x, -1, False, out=y)), None
        ops.append(("softmax_fwd_peaked", dims(rows, cols), "GB", 8.0 * rows * cols, make_fwd))

    def gelu(suffix, approximate, rows, cols):
        flavour = "erf" if approximate == "none" else "tanh"

        def make_fwd():
            x, y = buf("gelu.x", rows, cols), buf("gelu.y", rows, cols)
            return (lambda: torch._C._nn.gelu(x, approximate=approximate, out=y)), None

        def make_bwd():
            x, dy, dx = buf("gelu.x", rows, cols), buf("gelu.dy", rows, cols), buf("gelu.dx", rows, cols)
            return (lambda: torch.ops.aten.gelu_backward.grad_input(
                dy, x, approximate=approximate, grad_input=dx)), None
        ops.append((f"gelu_{flavour}_fwd{suffix}", dims(rows, cols), "GB", 8.0 * rows * cols, make_fwd))
        ops.append((f"gelu_{flavour}_bwd{suffix}", dims(rows, cols), "GB", 16.0 * rows * cols, make_bwd))

    # ---- attention (autograd; the materialised composition and the fused kernel) ---------
    def attention(op_id, heads, nq, nk, dh):
        width, scale = heads * dh, 1.0 / math.sqrt(dh)

        def leaves():
            return [buf("attn." + r, n_, width).clone().requires_grad_(True)
                    for r, n_ in (("q", nq), ("k", nk), ("v", nk))]

        def forward(q, k, v):
            with torch.enable_grad(), autocast():
                if heads == 1:
                    p = torch.softmax(torch.mm(q * scale, k.t()), dim=-1)
                    return torch.mm(p, v)
                split = lambda t, n_: t.view(n_, heads, dh).transpose(0, 1)  # [H, n, dh]
                p = torch.softmax(torch.bmm(split(q * scale, nq), split(k, nk).transpose(1, 2)), dim=-1)
                return torch.bmm(p, split(v, nk)).transpose(0, 1).reshape(nq, width)

        def fused(q, k, v):
            split = lambda t, n_: t.view(n_, heads, dh).transpose(0, 1).unsqueeze(0)  # [1, H, n, dh]
            with torch.enable_grad(), autocast():
                o = torch.nn.functional.scaled_dot_product_attention(split(q, nq), split(k, nk), split(v, nk))
                return o.squeeze(0).transpose(0, 1).reshape(nq, width)

        def make(run, backward):
            def make_row():
                q, k, v = leaves()
                if not backward:
                    return (lambda: run(q, k, v)), None
                dout, state = buf("attn.do", nq, width), {}

                def setup():
                    for t in (q, k, v):
                        t.grad = None
                    state["o"] = run(q, k, v)
                return (lambda: state["o"].backward(dout)), setup
            return make_row
        shape = f"Nq{nq},Nk{nk},d{dh},h{heads}"
        fwd_flop = 2.0 * heads * nq * nk * 2 * dh
        ops.append((op_id + "_fwd_mat", shape, "GFLOP", fwd_flop, make(forward, False)))
        ops.append((op_id + "_bwd_mat", shape, "GFLOP", 2.0 * fwd_flop, make(forward, True)))
        if hasattr(torch.nn.functional, "scaled_dot_product_attention"):  # torch >= 2.0: its fused kernels
            ops.append((op_id + "_fwd_sdpa", shape, "GFLOP", fwd_flop, make(fused, False)))
            ops.append((op_id + "_bwd_sdpa", shape, "GFLOP", 2.0 * fwd_flop, make(fused, True)))

    # Same order as bench_ops.cpp's register_all().
    if bf16:
        gemm("ceiling_gemm_bf16", "N", "N", CEILING, CEILING, CEILING)
    else:
        gemm("ceiling_sgemm", "N", "N", CEILING, CEILING, CEILING)
        gemm("ceiling_sgemm_blas", "N", "N", CEILING, CEILING, CEILING)  # torch's mm is one BLAS call
        stream_ceiling(M, C)
    gemm("gemm_kv_proj", "N", "T", M, C, C)
    gemm("gemm_kv_proj_dx", "N", "N", M, C, C)
    gemm("gemm_kv_proj_dw", "T", "N", C, C, M, beta=1.0)
    gemm("gemm_kv_proj_chunk", "N", "T", KV_ROW_CHUNK, C, C)
    gemm("gemm_kv_proj_dx_chunk", "N", "N", KV_ROW_CHUNK, C, C)
    gemm("gemm_kv_proj_dw_chunk", "T", "N", C, C, KV_ROW_CHUNK, beta=1.0)
    gemm("gemm_q_proj", "N", "T", N, C, D)
    gemm("gemm_latent_proj", "N", "T", N, D, D)
    gemm("gemm_qk", "N", "T", N, M, C)
    gemm("gemm_pv", "N", "N", N, C, M)
    gemm("gemm_dk", "T", "N", M, C, N)
    if not bf16:  # float32 in both precisions
        layer_norm("", M, C)
        layer_norm("_latent", N, D)
        softmax("", N, M)
        softmax("_latent", LATENT_HEADS * N, N)
        softmax_peaked(N, M)
        gelu("", "none", N, D)
        gelu("", "tanh", N, D)
        gelu("_dec", "none", O, E)
    attention("attn_enc", 1, N, M, C)
    attention("attn_enc_range", 1, N, KV_ROW_CHUNK, C)  # ours: one folded call over a range of the keys
    attention("attn_latent", LATENT_HEADS, N, N, D // LATENT_HEADS)

    pattern = re.compile(args.filter) if args.filter else None
    results = []
    for op_id, shape, unit, work, make in ops:
        if pattern and not pattern.search(f"{op_id}/{shape}"):
            continue
        fn, setup = make()
        # One warm-up call for every op: the first call at a shape costs far more (a backward of
        # the 784 x 2048 attention 0.34 s, then 0.034), and an op over 0.3 s is timed once.
        if setup:
            setup()
        fn()
        best = math.inf
        clock = time.perf_counter if args.clock == "wall" else time.process_time
        for _ in range(args.repetitions):
            calls, timed = 0, 0.0
            while calls == 0 or timed < args.min_time:
                if setup:
                    setup()
                t0 = clock()
                fn()
                timed += clock() - t0
                calls += 1
            best = min(best, timed / calls)
        rate = work * 1e-9 / best
        print(f"torch {op_id:<24} {shape:<26} {best * 1e3:10.3f} ms  {rate:9.2f} {unit}/s",
              file=sys.stderr, flush=True)
        results.append({"id": op_id, "shape": shape, "seconds": best, "unit": unit,
                        "work": work, "rate": rate})

    context = {"torch": torch.__version__, "threads": torch.get_num_threads(), "precision": args.precision,
               "openblas_core": openblas_core(),
               "env": {k: os.environ[k] for k in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS",
                                                  "OPENBLAS_NUM_THREADS")},
               "min_time": args.min_time, "repetitions": args.repetitions, "clock": args.clock}
    json.dump({"context": context, "benchmarks": results}, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
