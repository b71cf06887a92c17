#!/usr/bin/python3
"""bench_fma_peak's line, which bench/run_model.sh reads: the float32 FMA peak and SGEMM ceiling
on every CPU, and the bf16 peaks only where the CPU has them (AVX512-BF16's dot product, always
then; AMX's tiles where Linux lends them to the process: 5.16+, and a sandbox may still refuse),
each a plausible multiple of the FMA peak; the bf16 GEMM ceiling only where bf16 products run
(always where the tiles were lent, unless PERCEIVER_CPU_BF16_GEMM=onednn rules out our kernel), a
plausible multiple of the SGEMM ceiling.
Usage: check_fma_peak.py BIN_DIR."""
import os
import platform
import re
import subprocess
import sys

BIN = sys.argv[1]
r = subprocess.run([os.path.join(BIN, "bench_fma_peak"), "--threads", "1", "--seconds", "0.3"],
                   capture_output=True, text=True, timeout=300)
line = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""
fields = dict(re.findall(r"(\w+)=([\w.]+)", line))
flags = set()
if os.path.exists("/proc/cpuinfo"):
    with open("/proc/cpuinfo") as f:
        flags = next((set(l.split(":", 1)[1].split()) for l in f if l.startswith("flags")), set())
kernel = tuple(int(x) for x in re.findall(r"\d+", platform.release())[:2])

problems = []
if r.returncode != 0:
    problems.append(f"exit {r.returncode}: {r.stderr[-500:]}")
fma, sgemm = float(fields.get("fma_peak_gflops", 0)), float(fields.get("sgemm_gflops", 0))
if not fma > 0 or not 0 < sgemm < 1.5 * fma:
    problems.append(f"fma_peak_gflops={fma} sgemm_gflops={sgemm}: want both positive, SGEMM below 1.5x the peak")
avx512 = {"avx512f", "avx512bw", "avx512dq", "avx512vl"} <= flags
want_dot = "avx512_bf16" in flags and "avx512f" in flags
has_amx = avx512 and {"amx_tile", "amx_bf16"} <= flags
if has_amx and kernel >= (5, 16) and "amx_peak_gflops" not in fields:
    print("note: the CPU has AMX but this process was not lent the tiles (no amx_peak_gflops)")
for key, may, must, low, high in (("bf16_dot_peak_gflops", want_dot, want_dot, 0.05, 8.0),
                                  ("amx_peak_gflops", has_amx, False, 1.0, 64.0)):
    if key in fields and not may:
        problems.append(f"{key} printed on a CPU without it")
    elif key not in fields and must:
        problems.append(f"{key} missing on a CPU with it")
    elif key in fields and not low * fma <= float(fields[key]) <= high * fma:
        problems.append(f"{key}={fields[key]}: want {low}-{high}x the FMA peak {fma}")
bf16_gemm = fields.get("bf16_gemm_gflops")
emulated = os.environ.get("PERCEIVER_CPU_BF16_GEMM") == "emulated"  # bf16 products on any CPU
if bf16_gemm is not None and not (want_dot or has_amx or emulated):
    problems.append("bf16_gemm_gflops printed on a CPU with neither AVX512-BF16 nor AMX")
elif bf16_gemm is None and emulated:
    problems.append("bf16_gemm_gflops missing where the bf16 products are emulated")
elif bf16_gemm is None and "amx_peak_gflops" in fields and os.environ.get("PERCEIVER_CPU_BF16_GEMM") != "onednn":
    problems.append("bf16_gemm_gflops missing where AMX's tiles run (our AMX kernel not ruled out)")
elif bf16_gemm is not None and not 0.1 * sgemm <= float(bf16_gemm) <= 40 * sgemm:
    problems.append(f"bf16_gemm_gflops={bf16_gemm}: want 0.1-40x the SGEMM ceiling {sgemm}")
print(("ok   " if not problems else "FAIL ") + line)
for p in problems:
    print("  " + p)
sys.exit(1 if problems else 0)
