#!/usr/bin/python3
"""perceiver-train on the guarded backend (issue 11): its memory is PROT_NONE outside its own ops
and copies, so any stray host access in the trainer, loader, optimizer, evaluation, checkpoint or
MPI code is a segfault here. Every case must also give results bitwise identical to --device cpu:
  - sgd, adamw and lamb with gradient accumulation and clipping, with evaluation (every checkpoint,
    every logged loss and the evaluation report compared);
  - a run stopped at step 3 and resumed to step 6 equals an uninterrupted cpu run;
  - 2 MPI ranks on the guarded backend equal 2 ranks on the cpu backend.
Usage: check_guarded_trainer.py BIN_DIR SOURCE_DIR WORK_DIR"""
import glob
import json
import os
import shutil
import subprocess
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from synthetic_data import make_set  # noqa: E402

BIN, SRC, WORK = sys.argv[1:4]
MODEL = os.path.join(SRC, "tests", "train", "tiny_video.yaml")
DATA = os.path.join(WORK, "kinetics")
MPIRUN = ["mpirun", "--oversubscribe", "--allow-run-as-root"]
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def train(logdir, device, launcher=(), **extra):
    args = {"model": MODEL, "dataset_dir": DATA, "logdir": logdir, "device": device, "batch_size": 2,
            "max_steps": 6, "optimizer": "adamw", "lr": 3e-3, "lr_schedule": "constant", "log_steps": 1,
            "save_steps": 3, "keep_checkpoints": 10, "num_workers": 1, "threads": 1, "label_mask_prob": 0.5,
            "grad_accum_usteps": 2, "max_grad_norm": 0.01, "resume": "auto", "num_epochs": 50,
            "config_file_path": os.path.join(WORK, "none.yaml")}
    args.update(extra)
    cmd = list(launcher) + [os.path.join(BIN, "perceiver-train")]
    for k, v in args.items():
        cmd += [f"--{k}", str(v)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    check(r.returncode == 0, f"{logdir}: perceiver-train --device {device} exits 0 (got {r.returncode})")
    if r.returncode != 0:
        print(r.stdout[-2000:], r.stderr[-2000:])
    return r


def checkpoints(logdir):
    return sorted(glob.glob(os.path.join(logdir, "checkpoints", "ckpt-*.h5")))


def datasets(path):
    out = {}
    with h5py.File(path) as f:
        f.visititems(lambda name, obj: out.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) else None)
    return out


def same_checkpoint(a, b):
    da, db = datasets(a), datasets(b)
    if sorted(da) != sorted(db) or not da:
        return False
    return all(da[k].dtype == db[k].dtype and np.array_equal(da[k].view(np.uint8), db[k].view(np.uint8)) for k in da)


def losses(logdir):
    path = os.path.join(logdir, "metrics.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        rows = [json.loads(line) for line in f]
    return [(r["step"], r["loss"], r["loss/video"], r["loss/audio"], r["loss/label"], r["grad_norm"]) for r in rows]


def eval_report(logdir):
    path = os.path.join(logdir, "eval.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        j = json.load(f)
    return {k: j[k] for k in ("clips", "top1", "top5", "loss", "video_psnr_db", "audio_psnr_db")}


def compare_runs(a, b, what):
    ca, cb = checkpoints(a), checkpoints(b)
    check(len(ca) >= 2 and [os.path.basename(p) for p in ca] == [os.path.basename(p) for p in cb],
          f"{what}: the same checkpoints ({len(ca)})")
    for pa, pb in zip(ca, cb):
        check(same_checkpoint(pa, pb), f"{what}: {os.path.basename(pa)} bitwise equal (params and optimizer)")


def case_optimizers():
    for opt in ("sgd", "adamw", "lamb"):
        runs = {}
        for device in ("cpu", "guarded"):
            logdir = os.path.join(WORK, f"{opt}-{device}")
            train(logdir, device, optimizer=opt, do_eval="true", eval_steps=3, eval_recon_clips=2,
                  eval_media_clips=0)
            runs[device] = logdir
        compare_runs(runs["cpu"], runs["guarded"], opt)
        lc, lg = losses(runs["cpu"]), losses(runs["guarded"])
        check(len(lc) == 6 and lc == lg, f"{opt}: the 6 logged losses and gradient norms are identical")
        check(all(row[5] > 0.01 for row in lc), f"{opt}: every step's gradient was clipped (norm > max_grad_norm)")
        report = eval_report(runs["cpu"])
        check(report is not None and report == eval_report(runs["guarded"]), f"{opt}: evaluation reports identical")


def case_resume():
    cpu = os.path.join(WORK, "resume-cpu")
    guarded = os.path.join(WORK, "resume-guarded")
    train(cpu, "cpu")
    train(guarded, "guarded", max_steps=3)
    train(guarded, "guarded", max_steps=6)
    a, b = checkpoints(cpu)[-1], checkpoints(guarded)[-1]
    check(os.path.basename(a) == os.path.basename(b) == "ckpt-00000006.h5" and same_checkpoint(a, b),
          "guarded: stopped at 3 and resumed to 6 equals an uninterrupted cpu run")


def case_mpi():
    if shutil.which("mpirun") is None:
        print("skip mpi: mpirun not found")
        return
    runs = {}
    for device in ("cpu", "guarded"):
        logdir = os.path.join(WORK, f"mpi-{device}")
        train(logdir, device, launcher=MPIRUN + ["-np", "2"], batch_size=1)
        runs[device] = logdir
    compare_runs(runs["cpu"], runs["guarded"], "2 MPI ranks")


def main():
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    open(os.path.join(WORK, "none.yaml"), "w").close()  # no config file: the defaults and the flags
    make_set(BIN, DATA, classes=3, clips_per_class=4, num_frames=2, image_dim=16)
    case_optimizers()
    case_resume()
    case_mpi()
    print(f"check_guarded_trainer: {len(failures)} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
