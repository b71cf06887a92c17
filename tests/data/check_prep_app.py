#!/usr/bin/python3
"""perceiver-prep end to end: synth makes a set, prep makes 2 shards of it, a second prep reuses
both, prep of a folder that does not exist fails naming it, and so does an --output_dir that is
(or lies under) a file. Every step's exit status and output is checked (a pass regex alone would
ignore the last, negative steps).
Usage: check_prep_app.py PERCEIVER_PREP WORK_DIR"""
import os
import shutil
import subprocess
import sys

PREP, WORK = sys.argv[1:3]
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def prep(*args):
    return subprocess.run([PREP, *args], capture_output=True, text=True)


def main():
    shutil.rmtree(WORK, ignore_errors=True)
    synth, out = os.path.join(WORK, "synth"), os.path.join(WORK, "out")
    r = prep("synth", "--out", synth, "--classes", "2", "--clips-per-class", "2", "--seed", "3")
    check(r.returncode == 0, f"synth exits 0 ({r.returncode}) {r.stderr[-300:]}")
    shard_args = ["--dataset_dir", synth, "--output_dir", out, "--num_frames", "4", "--image_dim", "32",
                  "--clips_per_shard", "2"]
    r = prep(*shard_args, "--num_workers", "2")
    check(r.returncode == 0 and "Successfully built the dataset: 4 clips in 2 shards (0 reused)" in r.stdout,
          f"first prep builds 2 shards (exit {r.returncode}) {r.stdout[-200:]} {r.stderr[-300:]}")
    r = prep(*shard_args)
    check(r.returncode == 0 and "Successfully built the dataset: 4 clips in 2 shards (2 reused)" in r.stdout,
          f"second prep reuses both (exit {r.returncode}) {r.stdout[-200:]}")
    nowhere = os.path.join(WORK, "nowhere")
    r = prep("--dataset_dir", nowhere, "--output_dir", out)
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    check(r.returncode != 0 and lines and nowhere in lines[0],
          f"a missing dataset folder fails, naming it first (exit {r.returncode}): {r.stderr.strip()}")
    a_file = os.path.join(WORK, "a_file")
    open(a_file, "w").close()
    for target in (a_file, os.path.join(a_file, "sub")):
        r = prep("--dataset_dir", synth, "--output_dir", target)
        want = (f"--output_dir '{target}' is a file" if target == a_file
                else f"--output_dir '{target}': '{a_file}' is a file, not a folder")
        check(r.returncode != 0 and want in r.stderr, f"an --output_dir under a file fails naming it: {r.stderr.strip()}")
    print(f"check_prep_app: {len(failures)} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
