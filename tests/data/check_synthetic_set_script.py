#!/usr/bin/python3
"""data/make-synthetic-kinetics.sh end to end: it makes a small set and its train and validate
shards, a second run keeps both, and it refuses a set made with another seed, a folder it did not
make, a bad option value and a missing perceiver-prep, each naming what is wrong. Every step's
exit status and output is checked.
Usage: check_synthetic_set_script.py SCRIPT BIN_DIR WORK_DIR"""
import glob
import os
import shutil
import subprocess
import sys

SCRIPT, BIN, WORK = sys.argv[1:4]
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def make(*args, bin_dir=BIN):
    return subprocess.run([SCRIPT, *args, "--bin", bin_dir], capture_output=True, text=True)


def main():
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    out = os.path.join(WORK, "set")
    small = ["--classes", "2", "--clips-per-class", "2", "--num_frames", "4", "--image_dim", "32", "--seed", "5"]
    r = make(out, *small)
    check(r.returncode == 0, f"a first run exits 0 ({r.returncode}) {r.stderr[-300:]}")
    for split, clips in (("train", 4), ("validate", 2)):
        shards = glob.glob(os.path.join(out, "prepared-4x32", split, "shard-*.h5"))
        check(len(shards) == 1, f"{split}: one shard under prepared-4x32 ({len(shards)})")
        check(f"Successfully built the dataset: {clips} clips in 1 shards (0 reused)" in r.stdout,
              f"{split}: {clips} clips prepared afresh: {r.stdout[-400:]}")
    with open(os.path.join(out, "synthetic-set-v2")) as f:
        recipe = f.read().strip()
    check(recipe == "classes=2 clips_per_class=2 seed=5", f"the recipe file says how the set was made: '{recipe}'")
    check(f"--dataset_dir {out} --model M" in r.stdout, "the last line says how to train on it")

    r = make(out, *small)
    check(r.returncode == 0 and f"kept {out} (classes=2 clips_per_class=2 seed=5)" in r.stdout
          and "4 clips in 1 shards (1 reused)" in r.stdout and "2 clips in 1 shards (1 reused)" in r.stdout,
          f"a second run keeps the set and its shards (exit {r.returncode}) {r.stdout[-400:]}")

    r = make(out, *small[:-1], "6")
    check(r.returncode != 0 and "seed=5, not classes=2 clips_per_class=2 seed=6" in r.stderr,
          f"another seed is refused, naming both (exit {r.returncode}): {r.stderr.strip()}")

    foreign = os.path.join(WORK, "foreign")
    os.makedirs(os.path.join(foreign, "annotations"))
    open(os.path.join(foreign, "annotations", "train.csv"), "w").write("label,youtube_id,time_start,time_end,split\n")
    r = make(foreign, *small)
    check(r.returncode != 0 and f"{foreign} holds a data set this script did not make" in r.stderr,
          f"a set it did not make is refused, naming the folder (exit {r.returncode}): {r.stderr.strip()}")

    r = make(out, "--classes", "two")
    check(r.returncode == 2 and "--classes 'two': expected a whole number" in r.stderr,
          f"a bad value is refused, naming the option (exit {r.returncode}): {r.stderr.strip()}")
    nowhere = os.path.join(WORK, "no-bin")
    r = make(out, *small, bin_dir=nowhere)
    check(r.returncode == 2 and f"{nowhere}/perceiver-prep not built" in r.stderr,
          f"a missing perceiver-prep is named (exit {r.returncode}): {r.stderr.strip()}")
    print(f"check_synthetic_set_script: {len(failures)} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
