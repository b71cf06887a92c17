#!/usr/bin/python3
"""References for the optimizer tests (tests/optim): PyTorch's SGD and AdamW, DeepMind's LAMB, and
the learning-rate schedules, over a few steps of a fixed gradient sequence.

    /usr/bin/python3 tests/reference/optim_ref.py --out FILE.h5 [--seed S] [--steps K]

SGD and AdamW are torch.optim itself, with the usual two param groups: weight decay on weights
and embeddings, none on biases and layer-norm parameters (libperceiver's is_decayed(role)).
Torch has no LAMB, so `lamb_step` below follows DeepMind's optax chain (perceiver train/utils.py;
perceiver-spec.md §5) line by line in float32:
    clip_by_global_norm -> scale_by_adam -> add_decayed_weights(mask) -> scale_by_trust_ratio
    -> scale_by_schedule(lr) -> scale(-1) -> apply_updates
Gradient clipping, when a case has max_grad_norm > 0, is optax's clip_by_global_norm for every
optimizer (keep when norm < max, else g / norm * max), applied before the torch step.

HDF5 layout:
  meta/names, meta/roles        parameter names (registration order) and ParamRole names
  init/<name>                   initial parameters, float32
  grads/<name>                  [K, *shape] the gradient fed at each step
  cases/<case>/params/<name>    [K, *shape] parameters after each step
  cases/<case>/lr               [K] learning rate of each step
  cases/<case>/grad_norm        [K] global gradient norm before clipping
  cases/<case> attributes       optimizer, momentum, beta1, beta2, eps, weight_decay, max_grad_norm
  schedules/<name>/lr           [N] lr_at(0..N-1) (float64); attributes: the ScheduleOptions
The file is written to a temporary name and renamed.
"""
import argparse
import math
import os
import sys

try:
    import h5py
    import numpy as np
    import torch
except ImportError as e:
    sys.exit(f"optim_ref.py: {e}. The interpreter {sys.executable} needs PyTorch, numpy and h5py "
             "(Debian: apt install python3-torch python3-h5py).")

# name, shape, role. A bias, layer-norm gain and bias exercise the decay mask; "zero.weight"
# starts at 0 (LAMB's ‖p‖ = 0 → trust ratio 1); "unused.bias" never gets a gradient (‖u‖ = 0).
# The embedding is larger than one C++ chunk (16384 elements) so that it spans several.
TENSORS = [
    ("encoder.dense.weight", (24, 40), "kLinearWeight"),
    ("encoder.dense.bias", (24,), "kBias"),
    ("encoder.layernorm.weight", (40,), "kNormGain"),
    ("encoder.layernorm.bias", (40,), "kNormBias"),
    ("embeddings.latents", (130, 160), "kEmbedding"),
    ("zero.weight", (5, 3), "kLinearWeight"),
    ("unused.bias", (7,), "kBias"),
]
DECAYED_ROLES = {"kLinearWeight", "kHeadWeight", "kEmbedding"}

CASES = {
    # The seed's defaults: lr 1e-5, momentum 0.9.
    "sgd_seed": dict(optimizer="sgd", lr=1e-5, momentum=0.9, weight_decay=0.0),
    "sgd": dict(optimizer="sgd", lr=0.05, momentum=0.9, weight_decay=0.01),
    "sgd_clip": dict(optimizer="sgd", lr=0.05, momentum=0.5, weight_decay=0.0, max_grad_norm=300.0),
    "adamw": dict(optimizer="adamw", lr=1e-2, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.1),
    "adamw_clip": dict(optimizer="adamw", lr=3e-3, beta1=0.8, beta2=0.99, eps=1e-8, weight_decay=0.0,
                       max_grad_norm=400.0),
    "lamb": dict(optimizer="lamb", lr=2e-3, beta1=0.9, beta2=0.999, eps=1e-6, weight_decay=0.1,
                 max_grad_norm=300.0),
    # Learning rates from the cosine schedule, the first being 0 (optax's warm-up starts there).
    "lamb_schedule": dict(optimizer="lamb", schedule="cosine_lamb", beta1=0.9, beta2=0.999, eps=1e-6,
                          weight_decay=0.01, max_grad_norm=1e9),
}

SCHEDULES = {
    "constant": dict(name="constant", lr=0.1, warmup_steps=0, total_steps=0, final_lr=0.0),
    "warmup": dict(name="warmup", lr=0.1, warmup_steps=5, total_steps=0, final_lr=0.0),
    "cosine": dict(name="cosine", lr=0.1, warmup_steps=3, total_steps=15, final_lr=0.01),
    "cosine_nowarmup": dict(name="cosine", lr=2e-3, warmup_steps=0, total_steps=12, final_lr=0.0),
    "cosine_lamb": dict(name="cosine", lr=4e-3, warmup_steps=2, total_steps=6, final_lr=1e-4),
}
SCHEDULE_POINTS = 20


# ---- schedules: optax.warmup_cosine_decay_schedule / linear_schedule ---------------------------
def schedule_lr(s, step):
    w, lr = s["warmup_steps"], s["lr"]
    if s["name"] == "constant":
        return lr
    if step < w:  # optax.linear_schedule(0, lr, w)
        return lr * step / w
    if s["name"] == "warmup":
        return lr
    d = s["total_steps"] - w  # optax.cosine_decay_schedule(lr, d, alpha=final/lr)
    t = min(step - w, d)
    alpha = s["final_lr"] / lr if lr else 0.0
    return lr * ((1 - alpha) * 0.5 * (1 + math.cos(math.pi * t / d)) + alpha)


def check_cosine_against_torch(s):
    """The cosine part must agree with torch's CosineAnnealingLR closed form."""
    w, d = s["warmup_steps"], s["total_steps"] - s["warmup_steps"]
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=s["lr"])
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=d, eta_min=s["final_lr"])
    for t in range(d + 1):
        sched.last_epoch = t
        ref = sched._get_closed_form_lr()[0]
        assert abs(ref - schedule_lr(s, w + t)) <= 1e-12 * s["lr"], (s, t)


# ---- optimizers --------------------------------------------------------------------------------
def optax_clip(grads, max_norm):
    """optax.clip_by_global_norm; returns the norm before clipping."""
    norm = torch.sqrt(sum((g.double() ** 2).sum() for g in grads))
    if max_norm > 0 and not bool(norm < max_norm):
        nf = norm.float()
        for g in grads:
            g.copy_((g / nf) * max_norm)
    return float(norm)


def torch_optimizer(case, params, decayed):
    groups = [{"params": [p for p, d in zip(params, decayed) if d], "weight_decay": case["weight_decay"]},
              {"params": [p for p, d in zip(params, decayed) if not d], "weight_decay": 0.0}]
    if case["optimizer"] == "sgd":
        return torch.optim.SGD(groups, lr=case["lr"], momentum=case["momentum"])
    return torch.optim.AdamW(groups, lr=case["lr"], betas=(case["beta1"], case["beta2"]), eps=case["eps"])


class Lamb:
    """DeepMind's LAMB, one optax transformation after another, in float32."""

    def __init__(self, case, params, decayed):
        self.c, self.params, self.decayed = case, params, decayed
        self.mu = [torch.zeros_like(p) for p in params]
        self.nu = [torch.zeros_like(p) for p in params]
        self.count = 0

    def step(self, grads, lr):
        c = self.c
        b1, b2 = c["beta1"], c["beta2"]
        # scale_by_adam(b1, b2, eps, eps_root=0)
        self.mu = [(1 - b1) * g + b1 * m for g, m in zip(grads, self.mu)]
        self.nu = [(1 - b2) * g * g + b2 * v for g, v in zip(grads, self.nu)]
        self.count += 1
        mu_hat = [m / (1 - b1 ** self.count) for m in self.mu]
        nu_hat = [v / (1 - b2 ** self.count) for v in self.nu]
        updates = [m / (torch.sqrt(v + 0.0) + c["eps"]) for m, v in zip(mu_hat, nu_hat)]
        # add_decayed_weights(weight_decay, mask): not on biases and layer norms
        updates = [u + c["weight_decay"] * p if d else u for u, p, d in zip(updates, self.params, self.decayed)]
        # scale_by_trust_ratio: ‖p‖/‖u‖ per tensor, 1 when either is 0
        scaled = []
        for u, p in zip(updates, self.params):
            pn, un = torch.linalg.norm(p), torch.linalg.norm(u)
            ratio = torch.where((pn == 0) | (un == 0), torch.ones_like(pn), pn / un)
            scaled.append(u * ratio)
        # scale_by_schedule(lr), scale(-1), apply_updates
        for p, u in zip(self.params, scaled):
            p.add_(-(u * lr))


def run_case(case, init, grad_seq, decayed):
    params = [torch.nn.Parameter(t.clone()) for t in init]
    lrs = ([schedule_lr(SCHEDULES[case["schedule"]], k) for k in range(len(grad_seq))]
           if "schedule" in case else [case["lr"]] * len(grad_seq))
    opt = Lamb(case, params, decayed) if case["optimizer"] == "lamb" else torch_optimizer(case, params, decayed)
    history, norms = [[] for _ in params], []
    for k, grads in enumerate(grad_seq):
        g = [t.clone() for t in grads]
        norms.append(optax_clip(g, case.get("max_grad_norm", 0.0)))
        with torch.no_grad():
            if isinstance(opt, Lamb):
                opt.step(g, lrs[k])
            else:
                for group in opt.param_groups:
                    group["lr"] = lrs[k]
                for p, gi in zip(params, g):
                    p.grad = gi
                opt.step()
        for h, p in zip(history, params):
            h.append(p.detach().clone())
    return [torch.stack(h) for h in history], lrs, norms


def make_data(seed, steps):
    gen = torch.Generator().manual_seed(seed)
    init, grad_seq = [], [[] for _ in range(steps)]
    for name, shape, role in TENSORS:
        if name == "zero.weight":
            init.append(torch.zeros(shape))
        elif role == "kNormGain":
            init.append(1 + 0.1 * torch.randn(shape, generator=gen))
        else:
            init.append(0.3 * torch.randn(shape, generator=gen))
        for k in range(steps):
            # Growing gradients so the later steps of the *_clip cases are clipped.
            g = (0.5 + k) * torch.randn(shape, generator=gen)
            grad_seq[k].append(torch.zeros(shape) if name == "unused.bias" else g)
    return init, grad_seq


def write(path, seed, steps):
    init, grad_seq = make_data(seed, steps)
    decayed = [role in DECAYED_ROLES for _, _, role in TENSORS]
    tmp = path + f".tmp{os.getpid()}"
    with h5py.File(tmp, "w") as f:
        f.attrs.update(format="libperceiver-optim-fixture", version=1, seed=seed, steps=steps)
        f.create_dataset("meta/names", data=[n for n, _, _ in TENSORS], dtype=h5py.string_dtype())
        f.create_dataset("meta/roles", data=[r for _, _, r in TENSORS], dtype=h5py.string_dtype())
        for i, ((name, _, _), t) in enumerate(zip(TENSORS, init)):
            f[f"init/{name}"] = t.numpy()
            f[f"grads/{name}"] = torch.stack([g[i] for g in grad_seq]).numpy()
        for cname, case in CASES.items():
            hist, lrs, norms = run_case(case, init, grad_seq, decayed)
            grp = f.create_group(f"cases/{cname}")
            for (name, _, _), h in zip(TENSORS, hist):
                grp[f"params/{name}"] = h.numpy()
            grp["lr"] = np.array(lrs, dtype=np.float64)
            grp["grad_norm"] = np.array(norms, dtype=np.float64)
            attrs = dict(momentum=0.0, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0, max_grad_norm=0.0)
            attrs.update({k: v for k, v in case.items() if k not in ("schedule", "lr")})
            grp.attrs.update(attrs)
        for sname, s in SCHEDULES.items():
            if s["name"] == "cosine":
                check_cosine_against_torch(s)
            grp = f.create_group(f"schedules/{sname}")
            grp["lr"] = np.array([schedule_lr(s, k) for k in range(SCHEDULE_POINTS)], dtype=np.float64)
            grp.attrs.update(s)
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=6)
    args = ap.parse_args()
    torch.set_num_threads(1)
    write(args.out, args.seed, args.steps)


if __name__ == "__main__":
    main()
