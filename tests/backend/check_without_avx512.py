#!/usr/bin/python3
"""The CPU backend on an x86-64 CPU without AVX-512: valgrind's CPU (AVX2 at most) stands in for
one. A training step must run with the x86-64-v3 kernels; before the fix, building the kernel
tables ran the AVX-512 level's code on any CPU and stopped the process with SIGILL.
Usage: check_without_avx512.py BIN_DIR SOURCE_DIR. Exit 77 (skipped) without valgrind or off x86-64."""
import os
import platform
import shutil
import subprocess
import sys

BIN, SRC = sys.argv[1:3]
if platform.machine() != "x86_64" or shutil.which("valgrind") is None:
    print("skipped: needs valgrind on x86-64")
    sys.exit(77)
env = dict(os.environ)
for key in ("PERCEIVER_CPU_ISA", "OPENBLAS_CORETYPE"):
    env.pop(key, None)  # the choice must come from the (emulated) CPU's features
cmd = ["valgrind", "-q", os.path.join(BIN, "perceiver-bench"), "--config", os.path.join(SRC, "configs", "tiny.yaml"),
       "--steps", "1", "--threads", "1"]
r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
out = r.stdout + r.stderr
device = next((l for l in out.splitlines() if l.startswith("device:")), "")
ok = r.returncode == 0 and "x86-64-v3" in device and "examples_per_s=" in out
print(("ok   " if ok else "FAIL ") + f"a training step on a CPU without AVX-512 (exit {r.returncode}): {device}")
if not ok:
    print(out[-2000:])
sys.exit(0 if ok else 1)
