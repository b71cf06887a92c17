#!/usr/bin/python3
"""End-to-end check of the parity entry point as a user runs it:
gen_model_fixture.py writes an HF config.json, model.safetensors and in.h5 from the PyTorch reference;
perceiver-eval reads them and dumps out.h5; every logit, loss term and gradient must match.
Usage: check_eval_app.py PERCEIVER_EVAL SOURCE_DIR WORK_DIR [generator args...]"""
import os
import subprocess
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from compare import outside  # noqa: E402

ATOL, RTOL = 1e-5, 1e-4


def main():
    exe, src, work = sys.argv[1:4]
    extra = sys.argv[4:]
    os.makedirs(work, exist_ok=True)
    fixture, cfg, weights, dump = (os.path.join(work, n) for n in ("in.h5", "config.json", "model.safetensors", "out.h5"))
    subprocess.run([sys.executable, os.path.join(src, "tests/reference/gen_model_fixture.py"), "--config",
                    os.path.join(src, "configs/tiny.yaml"), "--seed", "7", "--batch", "2", "--out", fixture,
                    "--hf-config-out", cfg, "--safetensors-out", weights] + extra, check=True, stdout=subprocess.DEVNULL)
    subprocess.run([exe, "--hf-config", cfg, "--weights", weights, "--inputs", fixture, "--dump", dump], check=True)
    bad = 0
    with h5py.File(fixture) as ref, h5py.File(dump) as got:
        names = ["logits/image", "logits/audio", "logits/label", "loss", "loss_terms/image", "loss_terms/audio",
                 "loss_terms/label"] + ["grads/" + n for n in ref["grads"]]
        for name in names:
            r, g = np.asarray(ref[name][()], np.float64), np.asarray(got[name][()], np.float64)
            if r.shape != g.shape:
                print(f"FAIL {name}: shape {g.shape} != {r.shape}")
                bad += 1
                continue
            allowed = ATOL * max(1.0, np.abs(r).max(initial=0)) + RTOL * np.abs(r)
            bad_elements = outside(g, r, allowed)
            if np.any(bad_elements):
                print(f"FAIL {name}: {int(bad_elements.sum())} elements off, max abs diff {np.abs(g - r).max():.3g}")
                bad += 1
        extra_grads = set(got["grads"]) - set(ref["grads"])
        if extra_grads:
            print(f"FAIL unexpected gradients: {sorted(extra_grads)[:5]}")
            bad += 1
    print(f"perceiver-eval parity: {len(names) - bad} of {len(names)} tensors match")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
