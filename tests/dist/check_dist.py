#!/usr/bin/python3
"""Data-parallel perceiver-train under mpirun (issue 6's tests) on a tiny synthetic set:
  equivalence  2 ranks × batch b end with the same parameters as 1 rank with the same global
               batch (also with 2 micro-batches per step), and log the same losses;
  adapted      the same with the `tiny` preset on shards of other sizes than the model's: 2×16²
               frames cropped from 4×24² and 32 audio samples resampled from 4×1920 (every clip
               must get the same input on any rank and at any place in its batch);
  resume       a checkpoint written by 2 ranks resumes on 1 rank (same micro-batches) and ends
               where the 2-rank run (and the 1-rank run) ends;
  kill         SIGKILL of one of 2 ranks ends the job non-zero within 60 s;
  hang         SIGSTOP of one rank: the other aborts naming it (PERCEIVER_DIST_TIMEOUT=5);
  sigterm      SIGTERM to one rank: all ranks stop after the same step, rank 0 saves, exit 0.
Each 2-rank run is compared with two 1-rank runs over the same global batch: "split" (batch b,
twice the micro-batches: the ranks' association of the float sums in one process) and "whole"
(batch 2b: every clip at another place in its batch). Against split the parameters agree to
ATOL = 1e-5 absolute (measured <= 6.3e-7 after 6 steps); against whole they may differ as much
as the 1-rank runs differ from each other: rounding noise, which training grows (on the shards
of the no-media build the latents reach 1.3e-5 after 6 steps with no MPI at all), so that
bound is max(ATOL, 2 x |whole - split|). A wrong reduction (a missed halving, a rank on other
clips) moves parameters by ~1e-2 from the first step and fails both. SGD-momentum is used
because it is linear in the gradient; Adam divides by sqrt(v) and turns ulp-level noise in
gradients that are exactly zero in theory (attention key biases) into full-size updates of
random sign, which no elementwise tolerance can bound. Logged losses (5 digits) agree within
one unit of the last digit.
Usage: check_dist.py BIN_DIR SOURCE_DIR WORK_DIR [case...]"""
import json
import math
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
    return [(int(step), float(loss)) for step, loss in re.findall(r"Step=(\d+) \S+ Loss=(\S+)", out)]


def same_losses(a, b):
    """The same steps logged with losses within one unit of the 5th digit printed."""
    return bool(a) and [s for s, _ in a] == [s for s, _ in b] and all(
        abs(x - y) <= 1.5e-5 for (_, x), (_, y) in zip(a, b))


def fresh(name):
    d = os.path.join(WORK, name)
    shutil.rmtree(d, ignore_errors=True)
    return d


def make_data():
    make_set(BIN, DATA, classes=3, clips_per_class=4, num_frames=2, image_dim=16)


def compare_ranks(what, name, b, accum=1, **common):
    """2 ranks × b against 1 rank × b with 2·accum micro-batches (split) and 1 rank × 2b (whole),
    6 steps each; returns the 2-rank run's logdir and its result, or None if a run failed."""
    whole, split, two = fresh(name + "-whole"), fresh(name + "-split"), fresh(name + "-two")
    rw = run(args(whole, batch_size=2 * b, threads=1, max_steps=6, grad_accum_usteps=accum, **common))
    rs = run(args(split, batch_size=b, threads=1, max_steps=6, grad_accum_usteps=2 * accum, **common))
    r2 = run(mpi(2, args(two, batch_size=b, max_steps=6, grad_accum_usteps=accum, **common)))
    rcs = (rw.returncode, rs.returncode, r2.returncode)
    check(rcs == (0, 0, 0), f"{what}: 1 rank × {2 * b}, 1 rank × {b} × {2 * accum} micro-batches and 2 ranks × {b} "
          f"train (rc {rcs}) {rw.stderr[-300:]} {rs.stderr[-300:]} {r2.stderr[-300:]}")
    if rcs != (0, 0, 0):
        return None
    p_whole, p_split, p_two = (params_of(ckpt(d, 6)) for d in (whole, split, two))
    d_split, noise = max_abs_diff(p_two, p_split), max_abs_diff(p_whole, p_split)
    check(d_split <= ATOL, f"{what}: after 6 steps 2 ranks agree with 1 rank on the same micro-batches: "
          f"max |diff| {d_split:.3g} <= {ATOL}")
    bound = max(ATOL, 2 * noise)  # a NaN in the whole run makes noise inf: failed below, not allowed
    d_whole = max_abs_diff(p_two, p_whole)
    check(math.isfinite(noise) and d_whole <= bound, f"{what}: ... and with 1 rank × {2 * b}: max |diff| {d_whole:.3g} <= {bound:.3g} "
          f"(1 rank × {2 * b} vs × {b}: {noise:.3g})")
    l2, ls, lw = losses(r2.stdout), losses(rs.stdout), losses(rw.stdout)
    check(same_losses(l2, ls) and same_losses(l2, lw), f"{what}: the same logged losses {l2} vs {ls} vs {lw}")
    return two, r2


def case_equivalence():
    for accum in (1, 2):
        ran = compare_ranks(f"accum {accum}", f"eq{accum}", b=2, accum=accum)
        if not ran:
            continue
        two, r2 = ran
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
    compare_ranks("tiny on 4x24 shards", "adapted", b=2, model="tiny", dataset_dir=shards)


def case_resume():
    # Every run here takes micro-batches of 2 (1 rank: 2 per step), so all share one association.
    full1, two, resumed = fresh("rs-full1"), fresh("rs-two"), fresh("rs-resumed")
    one_rank = dict(batch_size=2, grad_accum_usteps=2, threads=1, max_steps=6)
    r = run(args(full1, **one_rank))
    r2 = run(mpi(2, args(two, batch_size=2, max_steps=6)))
    check(r.returncode == 0 and r2.returncode == 0, "reference runs")
    os.makedirs(os.path.join(resumed, "checkpoints"))
    shutil.copy(ckpt(two, 3), ckpt(resumed, 3))
    r3 = run(args(resumed, **one_rank))
    check(r3.returncode == 0 and "resumed from" in r3.stdout and "written by 2 rank(s)" in r3.stdout,
          f"a 2-rank checkpoint resumes on 1 rank: {r3.stdout[-300:]} {r3.stderr[-300:]}")
    if r3.returncode == 0:
        p = params_of(ckpt(resumed, 6))
        d2, d1 = max_abs_diff(p, params_of(ckpt(two, 6))), max_abs_diff(p, params_of(ckpt(full1, 6)))
        check(d2 <= ATOL and d1 <= ATOL,
              f"resumed on 1 rank, it ends where the 2-rank and the 1-rank runs end: max |diff| {d2:.3g}, {d1:.3g}")
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
