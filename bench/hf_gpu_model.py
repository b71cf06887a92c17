#!/usr/bin/env python3
"""HuggingFace side of bench/run_gpu.sh: transformers' PerceiverForMultimodalAutoencoding trained
N steps on random inputs, like perceiver-bench: the kinetics700 config (configs/
hf_kinetics700_config.json, attention dropout off as in configs/kinetics700.yaml), 512 image +
512 audio + 1 label output points per step (fresh random points each step), the label masked
half of the time, loss 0.03·L1(image) + L1(audio) + 1e-4·CE(label), plain SGD.

--precision fp32 turns TF32 off (float32 products, as the CUDA backend's fp32); bf16 runs the
forward under torch.autocast(bfloat16) with float32 weights (PyTorch's mixed precision, the
same arithmetic as the CUDA backend's bf16). --compile wraps the model in torch.compile (its
first two steps, which compile the forward and backward graphs, are warm-up and not timed).
Ends with one line like perceiver-bench's:
  examples_per_s=<x> peak_device_mb=<y>
peak_device_mb is torch.cuda.max_memory_allocated (the caching allocator's tensors; like our
backend's count, without the CUDA context).

--config tiny builds a small model so the script can be checked on a CPU (--device cpu); it is
not the benchmark. transformers is a benchmark dependency only, never the library's."""
import argparse
import json
import os
import sys
import time

import torch
from transformers import PerceiverConfig, PerceiverForMultimodalAutoencoding

HERE = os.path.dirname(os.path.abspath(__file__))

# A model HF can build on a CPU in a second: 2 frames of 16×16, 32 audio samples, 5 classes.
TINY = dict(num_latents=8, d_latents=16, num_blocks=1, num_self_attends_per_block=2, num_self_attention_heads=2,
            num_cross_attention_heads=1, num_labels=5, image_size=4, num_frames=2, audio_samples_per_frame=16,
            samples_per_patch=4, output_shape=[1, 2, 16, 16], output_num_channels=8,
            _label_trainable_num_channels=8)


def make_config(name):
    if name == "kinetics700":
        with open(os.path.join(HERE, "..", "configs", "hf_kinetics700_config.json")) as f:
            fields = json.load(f)
        cfg = PerceiverConfig(**fields)
        points = (512, 512)
    elif name == "tiny":
        cfg = PerceiverConfig(**TINY)
        points = (6, 3)
    else:
        sys.exit(f"hf_gpu_model.py: --config {name!r}: expected kinetics700 or tiny")
    cfg.attention_probs_dropout_prob = 0.0  # as configs/kinetics700.yaml and perceiver-bench
    return cfg, points


def batch(cfg, B, device, gen):
    T, H, W = cfg.output_shape[1:]
    S = cfg.num_frames * cfg.audio_samples_per_frame
    video = torch.rand(B, T, 3, H, W, generator=gen).to(device)  # HF takes frames channels-first
    audio = (torch.randn(B, S, 1, generator=gen) * 0.1).to(device)
    labels = torch.randint(0, cfg.num_labels, (B,), generator=gen).to(device)
    return video, audio, labels


def step_inputs(cfg, video, audio, labels, points, gen):
    T, H, W = cfg.output_shape[1:]
    B = video.shape[0]
    image_idx = torch.randperm(T * H * W, generator=gen)[: points[0]].to(video.device)
    audio_idx = torch.randperm(audio.shape[1] // cfg.samples_per_patch, generator=gen)[: points[1]].to(video.device)
    onehot = torch.nn.functional.one_hot(labels, cfg.num_labels).float()
    if torch.rand(1, generator=gen).item() < 0.5:  # the paper's label masking
        onehot = torch.zeros_like(onehot)
    inputs = dict(image=video, audio=audio, label=onehot)
    pts = dict(image=image_idx, audio=audio_idx, label=None)
    pixels = video.permute(0, 1, 3, 4, 2).reshape(B, T * H * W, 3)[:, image_idx]
    samples = audio.reshape(B, -1, cfg.samples_per_patch)[:, audio_idx].reshape(B, -1)
    return inputs, pts, pixels, samples


def loss_of(logits, pixels, samples, labels):
    image = (logits["image"].float().reshape(pixels.shape) - pixels).abs().mean()
    audio = (logits["audio"].float().reshape(samples.shape) - samples).abs().mean()
    label = torch.nn.functional.cross_entropy(logits["label"].float(), labels)
    return 0.03 * image + audio + 1e-4 * label


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default="kinetics700")
    p.add_argument("--batch_size", type=int, default=1)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--device", default="cuda")
    p.add_argument("--compile", action="store_true")
    a = p.parse_args()
    if a.compile:
        a.warmup = max(a.warmup, 2)
    device = torch.device(a.device)
    cuda = device.type == "cuda"
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    cfg, points = make_config(a.config)
    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    model = PerceiverForMultimodalAutoencoding(cfg).to(device).train()
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    forward = torch.compile(model) if a.compile else model
    video, audio, labels = batch(cfg, a.batch_size, device, gen)
    print(f"config={a.config} batch={a.batch_size} precision={a.precision} device={device} "
          f"params={sum(t.numel() for t in model.parameters())} queries={points[0]}+{points[1]}+1 "
          f"torch={torch.__version__} mode={'compile' if a.compile else 'eager'}", flush=True)
    if cuda:
        print(f"gpu: {torch.cuda.get_device_name(device)}", flush=True)
        torch.cuda.reset_peak_memory_stats(device)
    seconds = 0.0
    for step in range(a.warmup + a.steps):
        if cuda:
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        inputs, pts, pixels, samples = step_inputs(cfg, video, audio, labels, points, gen)
        opt.zero_grad(set_to_none=False)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            logits = forward(inputs=inputs, subsampled_output_points=pts).logits
        loss = loss_of(logits, pixels, samples, labels)
        loss.backward()
        opt.step()
        if cuda:
            torch.cuda.synchronize(device)
        dt = time.perf_counter() - t0
        if step >= a.warmup:
            seconds += dt
        print(f"step {step} loss={loss.item():.5f} {dt:.3f} s{' (warm-up)' if step < a.warmup else ''}", flush=True)
    peak = torch.cuda.max_memory_allocated(device) / 2**20 if cuda else 0.0
    print(f"examples_per_s={a.batch_size * a.steps / seconds:.4f} peak_device_mb={peak:.1f}")


if __name__ == "__main__":
    main()
