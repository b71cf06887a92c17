#!/usr/bin/python3
"""perceiver-train --device cpu --precision bf16 against fp32 (issue 14): 200 steps on the
synthetic set, the same seed and data, end within 2% of the fp32 loss (mean of the last 20 logged
steps); bf16 really runs (its losses are not bitwise fp32's, the log names the bf16 products);
and a second bf16 run, killed after its middle checkpoint and resumed, gives bitwise the first
one's losses (deterministic, and resumed as if it had never stopped). Skipped (exit 77) where
this build or CPU has no bf16 products, which the refusal test covers; CTest runs it once more
with PERCEIVER_CPU_BF16_GEMM=emulated, on any CPU.
Usage: check_cpu_bf16_training.py BIN_DIR SOURCE_DIR WORK_DIR"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from synthetic_data import make_set  # noqa: E402

BIN, SRC, WORK = sys.argv[1:4]
MODEL = os.path.join(SRC, "tests", "train", "tiny_video.yaml")
DATA = os.path.join(WORK, "kinetics")
STEPS, TAIL = 200, 20
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def train(name, precision, kill_after=0):
    """Losses (total, video) by step; with kill_after, the run is killed (SIGKILL) once its
    checkpoint of that step exists and then resumed (--resume auto, the default), and the steps it
    logs again replace the killed run's."""
    logdir = os.path.join(WORK, name)
    shutil.rmtree(logdir, ignore_errors=True)
    args = {"model": MODEL, "dataset_dir": DATA, "logdir": logdir, "device": "cpu", "precision": precision,
            "batch_size": 4, "max_steps": STEPS, "optimizer": "adamw", "lr": 3e-3, "lr_schedule": "constant",
            "warmup_steps": 0, "log_steps": 1, "save_steps": kill_after or STEPS, "num_workers": 1, "threads": 2,
            "num_epochs": 1000, "seed": 3, "config_file_path": os.path.join(WORK, "none.yaml")}
    cmd = [os.path.join(BIN, "perceiver-train")]
    for k, v in args.items():
        cmd += [f"--{k}", str(v)]
    if kill_after:
        marker = os.path.join(logdir, "checkpoints", f"ckpt-{kill_after:08d}.h5")
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 300
        while not os.path.exists(marker) and p.poll() is None and time.time() < deadline:
            time.sleep(0.001)
        p.send_signal(signal.SIGKILL)
        p.wait()
        check(p.returncode == -signal.SIGKILL and os.path.exists(marker),
              f"{name}: killed mid-training after its step-{kill_after} checkpoint (exit {p.returncode})")
    r = subprocess.run(cmd, capture_output=True, text=True)
    if kill_after:
        line = next((l for l in r.stdout.splitlines() if "resumed from " in l), "")
        check(os.path.join(logdir, "checkpoints", "ckpt-") in line, f"{name}: the second run resumes: {line}")
    if r.returncode != 0:
        if precision == "bf16" and "precision bf16 is not available" in r.stderr + r.stdout:
            print("skip: " + (r.stderr + r.stdout).strip().splitlines()[-1])
            sys.exit(77)
        print(r.stdout[-3000:], r.stderr[-3000:])
        sys.exit(f"{name}: perceiver-train exited {r.returncode}")
    by_step, rows = {}, 0
    with open(os.path.join(logdir, "metrics.jsonl")) as f:
        for line in f:
            try:
                row = json.loads(line)
            except ValueError:  # a killed run's partial last line, which readers skip
                continue
            if "loss" in row:
                by_step[row["step"]] = (row["loss"], row["loss/video"])
                rows += 1
    if not kill_after:
        check(rows == len(by_step), f"{name}: each step logged once ({rows} rows, {len(by_step)} steps)")
    return [by_step[k] for k in sorted(by_step)], r.stdout + r.stderr


os.makedirs(WORK, exist_ok=True)
open(os.path.join(WORK, "none.yaml"), "w").close()  # no config file: the defaults and the flags
make_set(BIN, DATA)
fp32, _ = train("fp32", "fp32")
bf16, log = train("bf16", "bf16")
bf16_again, _ = train("bf16_killed", "bf16", kill_after=STEPS // 2)
check(len(fp32) == STEPS and len(bf16) == STEPS, f"both runs log {STEPS} losses ({len(fp32)}, {len(bf16)})")
emulated = os.environ.get("PERCEIVER_CPU_BF16_GEMM") == "emulated"
kernels = ("emulation",) if emulated else ("our AMX kernel", "oneDNN")
check(any("bf16 products by " + k in log for k in kernels),
      f"the bf16 run's banner names the bf16 products ({' or '.join(kernels)})")
check(fp32 != bf16, "bf16 losses differ from fp32 (bf16 products did run)")
check(bf16 == bf16_again, "a bf16 run killed after its step-100 checkpoint and resumed gives bitwise the "
      "uninterrupted run's losses")

def tail_mean(run, i):
    return sum(row[i] for row in run[-TAIL:]) / TAIL


# The total is mostly the audio loss, which moves little on this set; the video loss shows learning.
check(tail_mean(fp32, 1) < 0.8 * fp32[0][1], f"fp32 learns the video: {fp32[0][1]:.5f} -> {tail_mean(fp32, 1):.5f}")
e32, e16 = tail_mean(fp32, 0), tail_mean(bf16, 0)
check(abs(e16 - e32) <= 0.02 * e32, f"bf16 loss ends within 2% of fp32 (mean of the last {TAIL} steps): "
      f"{e16:.6f} vs {e32:.6f} ({100 * (e16 - e32) / e32:+.3f}%)")
# For information: the video part alone drifts further (two trajectories of a tiny model part).
v32, v16 = tail_mean(fp32, 1), tail_mean(bf16, 1)
print(f"info: video loss bf16 {v16:.5f} vs fp32 {v32:.5f} ({100 * (v16 - v32) / v32:+.2f}%)")
sys.exit(1 if failures else 0)
