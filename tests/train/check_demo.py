#!/usr/bin/env python3
"""The demo's promise (issue 10 item 7), read from a finished `make demo` run directory:
video PSNR >= 25 dB on its validation clips after under 5 minutes of training.

usage: check_demo.py LOGDIR [--min-psnr 25] [--max-train-s 300]
Training time: from the first to the last metrics.jsonl record, scaled to all steps (it includes
the evaluations in between, so it overstates the training alone)."""
import argparse
import json
import os
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("logdir")
    ap.add_argument("--min-psnr", type=float, default=25.0)
    ap.add_argument("--max-train-s", type=float, default=300.0)
    a = ap.parse_args()
    with open(os.path.join(a.logdir, "eval.json")) as f:
        report = json.load(f)
    with open(os.path.join(a.logdir, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f if line.strip()]
    first, last = records[0], records[-1]
    train_s = (last["wall_time"] - first["wall_time"]) * last["step"] / max(1, last["step"] - first["step"])
    psnr = report["video_psnr_db"]
    print(f"demo: step {report['step']}, video PSNR {psnr:.2f} dB over {report['recon_clips']} clips "
          f"(needs >= {a.min_psnr}), top-1 {report['top1']:.4f}, training about {train_s:.0f} s "
          f"(needs < {a.max_train_s:.0f})")
    ok = psnr >= a.min_psnr and train_s < a.max_train_s
    print("demo-check: " + ("passed" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
