#!/usr/bin/python3
"""PyTorch side of bench/run_model.sh: the reference model (tests/reference/perceiver_ref.py, which
mirrors HF's PerceiverForMultimodalAutoencoding module by module) trained for N steps on random
inputs with the same config, batch, output points and threads as perceiver-bench. Ends with the
same line: examples_per_s=<x> peak_rss_mb=<y> gflops=<z> (gflops from perceiver-bench's formula,
passed in, so both sides count the same work). --precision bf16 runs the step under PyTorch's
CPU autocast (bfloat16); --compile wraps the model in torch.compile (PyTorch 2 and later).

Run with OMP_WAIT_POLICY=PASSIVE (run_model.sh sets it): with Debian's pthreads OpenBLAS, spinning
OpenMP threads cost PyTorch up to 2.4x here (DESIGN.md #6)."""
import argparse
import os
import resource
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "reference"))
import perceiver_config as pcfg  # noqa: E402
import perceiver_ref as ref  # noqa: E402
from torch_ops import openblas_core  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--config", default="small")
    p.add_argument("--batch_size", type=int, default=4)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--flops_per_step", type=float, default=0.0)
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--compile", action="store_true")
    a = p.parse_args()
    if a.compile and not hasattr(torch, "compile"):
        sys.exit(f"torch {torch.__version__} has no torch.compile")
    if a.compile:  # the first calls compile the forward and the backward graphs: not timed
        a.warmup = max(a.warmup, 2)
    torch.set_num_threads(a.threads)
    path = a.config if os.path.exists(a.config) else os.path.join(HERE, "..", "configs", a.config + ".yaml")
    cfg = pcfg.from_yaml(path)
    model = ref.PerceiverMMRef(cfg)
    ref.init_params(model, "hf", cfg.initializer_range, seed=0)
    gen = torch.Generator().manual_seed(0)
    B = a.batch_size
    video = torch.rand(B, cfg.num_frames, cfg.frame_height, cfg.frame_width, 3, generator=gen)
    audio = torch.randn(B, cfg.n_audio_samples, generator=gen) * 0.1
    label = torch.randint(0, cfg.num_labels, (B,), generator=gen)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    forward = torch.compile(model) if a.compile else model
    mode = ("compile" if a.compile else "eager") + (" autocast-bf16" if a.precision == "bf16" else "")
    print(f"config={a.config} batch={B} threads={torch.get_num_threads()} torch={torch.__version__} "
          f"mode={mode} openblas={openblas_core()}", flush=True)
    seconds = 0.0
    for step in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        points = {"image": torch.randperm(cfg.n_pixels, generator=gen)[:cfg.num_queries_image],
                  "audio": torch.randperm(cfg.n_audio_tokens, generator=gen)[:cfg.num_queries_audio]}
        masks = model.make_masks(B, generator=gen)
        opt.zero_grad(set_to_none=False)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            logits = forward(video, audio, label, points, masks=masks)
            total, _ = ref.multimodal_loss(cfg, logits, video, audio, label, points)
        total.backward()
        opt.step()
        dt = time.perf_counter() - t0
        if step >= a.warmup:
            seconds += dt
        print(f"step {step} loss={total.item():.5f} {dt:.3f} s{' (warm-up)' if step < a.warmup else ''}", flush=True)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(f"examples_per_s={B * a.steps / seconds:.4f} peak_rss_mb={peak_mb:.1f} "
          f"gflops={a.flops_per_step * a.steps / seconds / 1e9:.2f}")


if __name__ == "__main__":
    main()
