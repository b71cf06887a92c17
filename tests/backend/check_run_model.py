#!/usr/bin/python3
"""bench/run_model.sh end to end on the tiny config: its table has our row and PyTorch's, ours
against itself at 1.00x; with --rounds 2 every row ran twice (two rounds on stderr, two result
lines per row) and shows the fastest of its runs beside their range; a bad --rounds stops it
before any run. Usage: check_run_model.py BIN_DIR SOURCE_DIR PYTHON (exits 77 where PYTHON has
no torch)."""
import re
import subprocess
import sys

BIN, SRC, PY = sys.argv[1:4]
if subprocess.run([PY, "-c", "import torch"], capture_output=True).returncode != 0:
    print(f"skipped: {PY} has no torch")
    sys.exit(77)
script = f"{SRC}/bench/run_model.sh"
common = ["--config", "tiny", "--batch_size", "1", "--steps", "1", "--threads", "2", "--bin", BIN, "--python", PY]
problems = []

bad = subprocess.run(["bash", script, *common, "--rounds", "0"], capture_output=True, text=True, timeout=60)
if bad.returncode != 2 or "--rounds '0'" not in bad.stderr or "examples_per_s=" in bad.stdout + bad.stderr:
    problems.append(f"--rounds 0: exit {bad.returncode}, stderr {bad.stderr.strip()!r}: want exit 2 before any run")

r = subprocess.run(["bash", script, *common, "--rounds", "2"], capture_output=True, text=True, timeout=600)
print(r.stdout)
if r.returncode != 0:
    problems.append(f"exit {r.returncode}: {r.stderr[-800:]}")
if r.stderr.count("== round ") != 2:
    problems.append("want '== round 1 of 2' and '== round 2 of 2' on stderr")
# Each run's result line goes to stderr: ours twice, and each PyTorch mode twice.
runs = re.findall(r"^examples_per_s=([\d.]+) peak_rss_mb=[\d.]+ gflops=[\d.]+( run_gflops)?", r.stderr, re.M)
ours_runs = [float(e) for e, ours in runs if ours]
torch_runs = [float(e) for e, ours in runs if not ours]
if len(ours_runs) != 2 or not torch_runs or len(torch_runs) % 2:
    problems.append(f"runs on stderr: ours {ours_runs}, PyTorch {torch_runs}: want two of ours, two per PyTorch mode")
rows = {}
for line in r.stdout.splitlines():
    m = re.match(r"^(libperceiver fp32|torch \S+ (?:eager|compile))\s+([\d.]+)\s.*\s([\d.]+)x\s+([\d.]+)-([\d.]+)$", line)
    if m:
        rows[m.group(1)] = tuple(float(v) for v in m.group(2, 3, 4, 5))
if "libperceiver fp32" not in rows or not any(k.startswith("torch ") for k in rows):
    problems.append(f"table rows {sorted(rows)}: want libperceiver fp32 and a torch row")
for name, (best, ratio, low, high) in rows.items():
    if not (low <= high and abs(best - high) <= 5e-4 * high):
        problems.append(f"{name}: examples/s {best}, range {low}-{high}: want the fastest run, low <= high")
if "libperceiver fp32" in rows:
    best, ratio, low, high = rows["libperceiver fp32"]
    if ratio != 1.0:
        problems.append(f"libperceiver fp32 against itself: {ratio}x")
    if len(ours_runs) == 2 and abs(best - max(ours_runs)) > 5e-4 * best:
        problems.append(f"libperceiver fp32: {best} examples/s, but its runs were {ours_runs}")
if "fastest of its 2 runs" not in r.stdout:
    problems.append("no note that each row is the fastest of its 2 runs")
print("ok" if not problems else "FAIL")
for p in problems:
    print("  " + p)
sys.exit(1 if problems else 0)
