#!/usr/bin/python3
"""Data-parallel perceiver-train under mpirun (issue 6's tests) on a tiny synthetic set:
  equivalence  2 ranks × batch b end with the same parameters as 1 rank × batch 2b (also with
               2 micro-batches per step), and log the same losses;
  adapted      the same with the `tiny` preset on shards of other sizes than the model's: 2×16²
               frames cropped from 4×24² and 32 audio samples resampled from 4×1920 (every clip
               must get the same input on any rank and at any place in its batch);
  resume       a checkpoint written by 2 ranks resumes on 1 rank and ends where the 2-rank
               run (and the 1-rank run) ends;
  kill         SIGKILL of one of 2 ranks ends the job non-zero within 60 s;
  hang         SIGSTOP of one rank: the other aborts naming it (PERCEIVER_DIST_TIMEOUT=5);
  sigterm      SIGTERM to one rank: all ranks stop after the same step, rank 0 saves, exit 0.
Tolerance of the equivalence: |p2 - p1| <= 1e-5 (absolute; parameters are O(1)). Both runs
see the same clips, masks and output points, but 2 ranks sum each rank's mean over b clips and
halve, while 1 rank reduces over 2b clips at once: the float sums are associated differently,
so gradients differ by a few ulp per step (measured: 2e-7 after 6 SGD steps). SGD-momentum is
used because it is linear in the gradient; Adam divides by sqrt(v) and turns ulp-level noise in
gradients that are exactly zero in theory (attention key biases) into full-size updates of
random sign, which no elementwise tolerance can bound.
Usage: check_dist.py BIN_DIR SOURCE_DIR WORK_DIR [case...]"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import h5py

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from compare import max_abs_diff  # noqa: E402
from synthetic_data import has_media, make_set, make_shards  # noqa: E402

BIN, SRC, WORK = sys.argv[1:4]
ONLY = set(sys.argv[4:])
MODEL = os.path.join(SRC, "tests", "train", "tiny_video.yaml")
DATA = os.path.join(WORK, "kinetics")
MPIRUN = ["mpirun", "--oversubscribe", "--allow-run-as-root"]
ATOL = 1e-5
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def args(logdir, **extra):
    a = {"model": MODEL, "dataset_dir": DATA, "logdir": logdir, "num_epochs": 50, "optimizer": "sgd", "lr": 0.1,
         "momentum": 0.9, "log_steps": 2, "save_steps": 3, "keep_checkpoints": 50, "num_workers": 1,
         "label_mask_prob": 0.5, "init": "deepmind", "resume": "auto", "seed": 7}
    a.update(extra)
    cmd = [os.path.join(BIN, "perceiver-train")]
    for k, v in a.items():
        cmd += [f"--{k}", str(v)]
    return cmd


def mpi(n, cmd, env=()):
    out = list(MPIRUN) + ["-np", str(n)]
    for e in env:
        out += ["-x", e]
    return out + cmd


def run(cmd, timeout=300):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def params_of(ckpt):
    with h5py.File(ckpt) as f:
        return {k: f["params"][k][()] for k in f["params"]}


def ckpt(logdir, step):
    return os.path.join(logdir, "checkpoints", f"ckpt-{step:08d}.h5")


def losses(out):
    return re.findall(r"Step=(\d+) \S+ Loss=(\S+)", out)


def fresh(name):
    d = os.path.join(WORK, name)
    shutil.rmtree(d, ignore_errors=True)
    return d


def make_data():
    make_set(BIN, DATA, classes=3, clips_per_class=4, num_frames=2, image_dim=16)


def case_equivalence():
    for accum in (1, 2):
        one, two = fresh(f"eq1-{accum}"), fresh(f"eq2-{accum}")
        r1 = run(args(one, batch_size=4, threads=1, max_steps=6, grad_accum_usteps=accum))
        r2 = run(mpi(2, args(two, batch_size=2, max_steps=6, grad_accum_usteps=accum)))
        check(r1.returncode == 0 and r2.returncode == 0,
              f"accum {accum}: 1 rank × 4 and 2 ranks × 2 train (rc {r1.returncode}, {r2.returncode}) {r2.stderr[-500:]}")
        if r1.returncode or r2.returncode:
            continue
        d = max_abs_diff(params_of(ckpt(one, 6)), params_of(ckpt(two, 6)))
        check(d <= ATOL, f"accum {accum}: parameters after 6 steps agree: max |diff| {d:.3g} <= {ATOL}")
        check(losses(r1.stdout) == losses(r2.stdout) and losses(r1.stdout),
              f"accum {accum}: the same logged losses {losses(r1.stdout)} vs {losses(r2.stdout)}")
        info = json.load(open(os.path.join(two, "rank0.json")))
        check(info["world_size"] == 2 and info["pid"] and info["host"] and info["start_time"],
              "rank0.json names host, pid, start time and world size")
        check(r2.stdout.count("| Training") == 3 and r2.stdout.count("saved checkpoint") == 3,
              "rank 0 alone logs and saves (3 log lines, 3 saves)")
        check(all(f"rank {i} of 2" in r2.stdout for i in (0, 1)) and "-> core L#" in r2.stdout,
              "every rank reports its thread binding")
        with h5py.File(ckpt(two, 6)) as f:
            check(int(f.attrs["world_size"]) == 2, "the checkpoint records world_size 2")


def case_adapted():
    shards = os.path.join(WORK, "prepared-4x24")
    if not has_media(BIN):  # no videos to prepare: shards of that size written directly
        make_shards(BIN, shards, classes=3, clips_per_class=4, num_frames=4, image_dim=24)
    elif not os.path.exists(os.path.join(shards, "skipped_train.tsv")):
        subprocess.run([os.path.join(BIN, "perceiver-prep"), "--dataset_dir", DATA, "--output_dir", shards,
                        "--num_frames", "4", "--image_dim", "24", "--num_workers", "2"], check=True,
                       capture_output=True)
    one, two = fresh("adapted1"), fresh("adapted2")
    common = dict(model="tiny", dataset_dir=shards, max_steps=6)
    r1 = run(args(one, batch_size=4, threads=1, **common))
    r2 = run(mpi(2, args(two, batch_size=2, **common)))
    check(r1.returncode == 0 and r2.returncode == 0,
          f"tiny on 4x24 shards: 1 rank × 4 and 2 ranks × 2 train (rc {r1.returncode}, {r2.returncode}) "
          f"{r1.stderr[-300:]} {r2.stderr[-300:]}")
    if r1.returncode or r2.returncode:
        return
    d = max_abs_diff(params_of(ckpt(one, 6)), params_of(ckpt(two, 6)))
    check(d <= ATOL, f"tiny on 4x24 shards: parameters after 6 steps agree: max |diff| {d:.3g} <= {ATOL}")
    check(losses(r1.stdout) == losses(r2.stdout) and losses(r1.stdout),
          f"tiny on 4x24 shards: the same logged losses {losses(r1.stdout)} vs {losses(r2.stdout)}")


def case_resume():
    full1, two, resumed = fresh("rs-full1"), fresh("rs-two"), fresh("rs-resumed")
    r = run(args(full1, batch_size=4, threads=1, max_steps=6))
    r2 = run(mpi(2, args(two, batch_size=2, max_steps=6)))
    check(r.returncode == 0 and r2.returncode == 0, "reference runs")
    os.makedirs(os.path.join(resumed, "checkpoints"))
    shutil.copy(ckpt(two, 3), ckpt(resumed, 3))
    r3 = run(args(resumed, batch_size=4, threads=1, max_steps=6))
    check(r3.returncode == 0 and "resumed from" in r3.stdout and "written by 2 rank(s)" in r3.stdout,
          f"a 2-rank checkpoint resumes on 1 rank: {r3.stdout[-300:]} {r3.stderr[-300:]}")
    if r3.returncode == 0:
        p = params_of(ckpt(resumed, 6))
        check(max_abs_diff(p, params_of(ckpt(two, 6))) <= ATOL and max_abs_diff(p, params_of(ckpt(full1, 6))) <= ATOL,
              "resumed on 1 rank, it ends where the 2-rank and the 1-rank runs end")
    # A different global batch: the position is converted through the clips seen.
    conv = fresh("rs-convert")
    os.makedirs(os.path.join(conv, "checkpoints"))
    shutil.copy(ckpt(two, 3), ckpt(conv, 3))
    r4 = run(mpi(2, args(conv, batch_size=1, max_steps=5)))
    check(r4.returncode == 0 and "continuing at batch" in r4.stdout,
          f"resume with another global batch converts the sampler position: {r4.stdout[-200:]} {r4.stderr[-300:]}")


def start_long(logdir, env=()):
    cmd = mpi(2, args(logdir, batch_size=2, max_steps=10**7, num_epochs=10**6, log_steps=50, save_steps=0), env)
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    info = os.path.join(logdir, "rank0.json")
    while time.time() < deadline and not (os.path.exists(info) and os.path.getsize(info) > 0):
        time.sleep(0.2)
    time.sleep(2)  # into the training loop
    pids = [int(re.search(r"pid (\d+)", s).group(1)) for s in json.load(open(info))["ranks"]]
    return p, pids


def finish(p, limit):
    t = time.time()
    try:
        out, err = p.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        return None, time.time() - t, out, err
    return p.returncode, time.time() - t, out, err


def case_kill():
    p, pids = start_long(fresh("kill"))
    os.kill(pids[1], signal.SIGKILL)
    rc, dt, out, err = finish(p, 90)
    check(rc not in (None, 0) and dt < 60, f"SIGKILL of rank 1 ends the job non-zero (rc {rc}) in {dt:.1f} s < 60 s")


def case_hang():
    p, pids = start_long(fresh("hang"), env=["PERCEIVER_DIST_TIMEOUT=5"])
    os.kill(pids[1], signal.SIGSTOP)
    rc, dt, out, err = finish(p, 90)
    try:
        os.kill(pids[1], signal.SIGKILL)
    except ProcessLookupError:
        pass
    check(rc not in (None, 0) and dt < 60 and "rank 1 (pid" in err and ("did not arrive" in err or "stopped responding" in err),
          f"a hung rank 1 ends the job non-zero (rc {rc}) in {dt:.1f} s naming it: "
          f"{[l for l in err.splitlines() if 'did not' in l][:1]}")


def case_sigterm():
    logdir = fresh("sigterm")
    p, pids = start_long(logdir)
    os.kill(pids[1], signal.SIGTERM)
    rc, dt, out, err = finish(p, 90)
    saved = os.listdir(os.path.join(logdir, "checkpoints"))
    check(rc == 0 and "stopped at step" in out and len(saved) == 1,
          f"SIGTERM to rank 1 stops both ranks, rank 0 saves, exit 0 (rc {rc}, {saved}) {err[-300:]}")


def main():
    os.makedirs(WORK, exist_ok=True)
    make_data()
    for name in ["equivalence", "adapted", "resume", "kill", "hang", "sigterm"]:
        if not ONLY or name in ONLY:
            print(f"--- {name}", flush=True)
            globals()["case_" + name]()
    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)
    print("all checks passed")


main()
