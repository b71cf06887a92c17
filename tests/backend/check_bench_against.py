#!/usr/bin/python3
"""perceiver-bench --against on the tiny config: the two nets that take turns step by step give
each the losses it gives alone (they share no state), every step line names both, and the
result line's against_ratio is the main speed over the other's; --against the same precision
stops before any step. bf16 runs on the emulated products, which every CPU has.
Usage: check_bench_against.py BIN_DIR"""
import os
import re
import subprocess
import sys

BIN = sys.argv[1]
bench = os.path.join(BIN, "perceiver-bench")
env = dict(os.environ, PERCEIVER_CPU_BF16_GEMM="emulated", OMP_WAIT_POLICY="PASSIVE")
common = ["--config", "tiny", "--batch_size", "2", "--steps", "3", "--threads", "2"]
problems = []


def run(*args):
    r = subprocess.run([bench, *common, *args], capture_output=True, text=True, timeout=300, env=env)
    if r.returncode != 0:
        sys.exit(f"perceiver-bench {' '.join(args)}: exit {r.returncode}: {r.stderr[-800:]}")
    return r.stdout


def losses(out, precision=None):
    """Per step, the loss of `precision` (a plain run's only loss where None)."""
    pattern = r"loss=([\d.e+-]+)" if precision is None else rf" {precision} loss=([\d.e+-]+)"
    return [re.search(pattern, line).group(1) for line in out.splitlines() if line.startswith("step ")]


alone = {p: losses(run("--precision", p)) for p in ("fp32", "bf16")}
both = run("--precision", "bf16", "--against", "fp32")
print(both)
for p in ("fp32", "bf16"):
    if losses(both, p) != alone[p]:
        problems.append(f"{p} losses with --against {losses(both, p)}, alone {alone[p]}: want the same")
device = next((line for line in both.splitlines() if line.startswith("device:")), "")
if "bf16 products by emulation" not in device:
    problems.append(f"device line {device!r}: want the main net's (bf16, emulated products)")
result = both.strip().splitlines()[-1]
fields = dict(re.findall(r"(\w+)=([\w.]+)", result))
if fields.get("against") != "fp32" or "against_examples_per_s" not in fields or "against_ratio" not in fields:
    problems.append(f"result line {result!r}: want against=fp32 against_examples_per_s=... against_ratio=...")
else:
    want = float(fields["examples_per_s"]) / float(fields["against_examples_per_s"])
    if abs(float(fields["against_ratio"]) - want) > 0.01 * want + 0.002:
        problems.append(f"against_ratio {fields['against_ratio']}: want examples_per_s / against_examples_per_s = {want:.3f}")
# The turns: step 1 starts with fp32, step 2 with bf16.
order = [re.findall(r" (fp32|bf16) loss=", line) for line in both.splitlines() if line.startswith("step ")]
if order[1:3] != [["fp32", "bf16"], ["bf16", "fp32"]]:
    problems.append(f"precisions per step {order}: want them taking turns going first")

bad = subprocess.run([bench, *common, "--precision", "fp32", "--against", "fp32"], capture_output=True, text=True,
                     timeout=60, env=env)
if bad.returncode == 0 or "--against fp32" not in bad.stderr or "step " in bad.stdout:
    problems.append(f"--against fp32 with --precision fp32: exit {bad.returncode}, stderr {bad.stderr.strip()!r}: "
                    "want an error naming --against before any step")

if problems:
    sys.exit("\n".join(problems))
print("ok: --against trains both nets in turn, each as it trains alone")
