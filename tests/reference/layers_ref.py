#!/usr/bin/python3
"""PyTorch references for the layer parity tests: one HDF5 fixture per case.

    /usr/bin/python3 tests/reference/layers_ref.py --out DIR [--seed S] [--case NAME ...] [--list]
        [--reference-dtype float64|float32]

The modules below mirror HF's PerceiverLayer (modeling_perceiver.py) in structure and parameter
names, so `params/<name>` is the HF state_dict key relative to the layer. Parameters and inputs are
drawn in float32; the reference then runs in float64 (--reference-dtype) from those exact values
and every result is rounded once to float32, so a parity test measures the C++ error alone.

HDF5 layout of DIR/<case>.h5:
  inputs/<name>            forward inputs (xq [B,Nq,q_dim], xkv [B,Nk,kv_dim], x, pred, labels i64)
  params/<HF name>         torch layout (Linear weight [out,in])
  outputs/y | outputs/loss forward result (loss: the unweighted mean, as the C++ kernels return it)
  dy                       upstream gradient (shape of y; for losses the scalar weight)
  grads/<HF name>          d(sum(y*dy))/d param     grads/input_<name>  d(sum(y*dy))/d input
  root attributes          kind, case, seed and the config (dims, heads, residual, gelu, kv_chunk)

Parameters are deliberately not tiny (weights N(0, 0.3²), LN gains 1+0.1·N(0,1), biases
N(0, 0.1²)) so that every term of the backward pass contributes visibly.
Each file is written to a temporary name and renamed, so concurrent runs never see half a file.
"""
import argparse
import math
import os
import sys
import zlib

try:
    import h5py
    import torch
    from torch import nn
except ImportError as e:  # the C++ test forwards this message; make it actionable
    sys.exit(f"layers_ref.py: {e}. The interpreter {sys.executable} needs PyTorch and h5py "
             "(Debian: apt install python3-torch python3-h5py).")

WEIGHT_STD, BIAS_STD, GAIN_NOISE = 0.3, 0.1, 0.1
REF_DTYPE = torch.float64  # set by --reference-dtype


# ---- HF PerceiverLayer mirror ----------------------------------------------------------------
class PerceiverSelfAttention(nn.Module):
    """LN_q ("layernorm1"), LN_kv ("layernorm2", cross only) and the Q/K/V projections."""

    def __init__(self, is_cross, q_dim, kv_dim, qk, v, heads):
        super().__init__()
        self.heads = heads
        self.layernorm1 = nn.LayerNorm(q_dim, eps=1e-5)
        self.layernorm2 = nn.LayerNorm(kv_dim, eps=1e-5) if is_cross else nn.Identity()
        self.query = nn.Linear(q_dim, qk)
        self.key = nn.Linear(kv_dim, qk)
        self.value = nn.Linear(kv_dim, v)

    def split(self, x):
        # Channel c belongs to head c // (F/heads): a contiguous block per head (spec §2.1).
        b, n, f = x.shape
        return x.view(b, n, self.heads, f // self.heads).transpose(1, 2)

    def forward(self, hidden_states, inputs=None):
        q_in = self.layernorm1(hidden_states)
        # Self-attention: K and V read the same LN_q output as Q (HF passes no `inputs`).
        kv_in = q_in if inputs is None else self.layernorm2(inputs)
        q = self.split(self.query(q_in))
        k, v = self.split(self.key(kv_in)), self.split(self.value(kv_in))
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        o = torch.softmax(scores, dim=-1) @ v
        b, h, n, d = o.shape
        return o.transpose(1, 2).reshape(b, n, h * d)


class PerceiverSelfOutput(nn.Module):
    def __init__(self, v, out):
        super().__init__()
        self.dense = nn.Linear(v, out)


class PerceiverAttention(nn.Module):
    def __init__(self, is_cross, q_dim, kv_dim, qk, v, heads, query_residual):
        super().__init__()
        self.self = PerceiverSelfAttention(is_cross, q_dim, kv_dim, qk, v, heads)
        self.output = PerceiverSelfOutput(v, q_dim if is_cross else v)
        self.query_residual = query_residual

    def forward(self, hidden_states, inputs=None):
        a = self.output.dense(self.self(hidden_states, inputs))
        # The residual adds the un-normalised query, as HF does.
        return a + hidden_states if self.query_residual else a


class PerceiverMLP(nn.Module):
    def __init__(self, dim, widening, gelu):
        super().__init__()
        self.dense1 = nn.Linear(dim, widening * dim)
        self.dense2 = nn.Linear(widening * dim, dim)
        self.approximate = "tanh" if gelu == "tanh" else "none"  # HF "gelu_new" vs "gelu"

    def forward(self, x):
        return self.dense2(nn.functional.gelu(self.dense1(x), approximate=self.approximate))


class PerceiverLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.attention = PerceiverAttention(c["cross"], c["q_dim"], c["kv_dim"], c["qk"], c["v"],
                                            c["heads"], c["query_residual"])
        self.layernorm = nn.LayerNorm(c["q_dim"], eps=1e-5)
        self.mlp = PerceiverMLP(c["q_dim"], c["widening"], c["gelu"])

    def forward(self, hidden_states, inputs=None):
        x = self.attention(hidden_states, inputs)
        return x + self.mlp(self.layernorm(x))


# ---- cases -------------------------------------------------------------------------------------
def randomize(module, gen):
    """Visible, non-symmetric values for every parameter (HF's init would leave LN at 1/0)."""
    with torch.no_grad():
        for m in module.modules():
            for name, p in m.named_parameters(recurse=False):
                noise = torch.randn(p.shape, generator=gen)
                if isinstance(m, nn.LayerNorm) and name == "weight":
                    p.copy_(1 + GAIN_NOISE * noise)
                else:
                    p.copy_((BIAS_STD if name == "bias" else WEIGHT_STD) * noise)
    return module


def block_config(cross, q_dim, kv_dim, heads, query_residual=True, qk=0, v=0, widening=1,
                 gelu="erf", batch=2, nq=5, nk=7, kv_chunk=-1):
    """Resolves qk/v/out widths exactly as AttentionBlockConfig::attention() (spec §2.2)."""
    qk_res = qk or (kv_dim if cross else q_dim)
    return dict(cross=cross, q_dim=q_dim, kv_dim=kv_dim if cross else q_dim, heads=heads,
                query_residual=query_residual, qk_channels=qk, v_channels=v, qk=qk_res,
                v=v or qk_res, widening=widening, gelu=gelu, batch=batch, nq=nq,
                nk=nk if cross else nq, kv_chunk=kv_chunk)


def run_block(c, gen):
    layer = randomize(PerceiverLayer(c), gen)
    inputs = {"xq": torch.randn(c["batch"], c["nq"], c["q_dim"], generator=gen)}
    if c["cross"]:
        inputs["xkv"] = torch.randn(c["batch"], c["nk"], c["kv_dim"], generator=gen)
    return layer, inputs, lambda xs: layer(xs["xq"], xs.get("xkv"))


def run_module(module, shape, gen, offset=0.0):
    module = randomize(module, gen)
    # An offset input mean makes the LayerNorm centring do real work.
    return module, {"x": offset + torch.randn(*shape, generator=gen)}, lambda xs: module(xs["x"])


MODULE_CASES = {
    "linear": lambda g: ("linear", dict(in_dim=12, out_dim=16),
                         run_module(nn.Linear(12, 16), (2, 5, 12), g)),
    "layer_norm": lambda g: ("layer_norm", dict(dim=16, eps=1e-5),
                             run_module(nn.LayerNorm(16, eps=1e-5), (2, 5, 16), g, offset=1.5)),
    "mlp_erf": lambda g: ("mlp", dict(dim=16, widening=2, gelu="erf"),
                          run_module(PerceiverMLP(16, 2, "erf"), (2, 5, 16), g)),
    "mlp_tanh": lambda g: ("mlp", dict(dim=16, widening=2, gelu="tanh"),
                           run_module(PerceiverMLP(16, 2, "tanh"), (2, 5, 16), g)),
}

BLOCK_CASES = {
    "cross_residual": block_config(True, 16, 12, 1),
    "cross_no_residual": block_config(True, 16, 12, 1, query_residual=False, gelu="tanh"),
    "cross_heads2": block_config(True, 16, 12, 2, qk=8, v=10, widening=2),
    "self_heads4": block_config(False, 16, 0, 4, widening=2, nq=6),
    # Nk=1000 with chunk 128 leaves a partial last chunk; Nq=70 spans two 64-row query blocks.
    "cross_streamed": block_config(True, 16, 12, 2, batch=2, nq=70, nk=1000, kv_chunk=128),
}

LOSS_CASES = ("loss_l1", "loss_mse", "loss_ce")


def as_stored(t):
    """Floating tensors are stored as float32 (rounded once, from REF_DTYPE); integers as is."""
    t = t.detach()
    return (t.float() if t.is_floating_point() else t).numpy()


def write_case(path, attrs, inputs, params, y, dy, grads):
    tmp = f"{path}.{os.getpid()}.tmp"
    with h5py.File(tmp, "w") as f:
        f.attrs.update(attrs)
        for group, tensors in (("inputs", inputs), ("params", params), ("grads", grads)):
            for name, t in tensors.items():
                f[f"{group}/{name}"] = as_stored(t)
        f["outputs/" + ("loss" if y.dim() == 0 else "y")] = as_stored(y)
        f["dy"] = dy.numpy()
    os.replace(tmp, path)


def forward_backward(module, inputs, fn, gen):
    """y = fn(inputs), then autograd of sum(y·dy) for a random dy, all in REF_DTYPE."""
    module.to(REF_DTYPE)  # exact: the stored float32 values are what the C++ side loads
    xs = {k: v.to(REF_DTYPE, copy=True).requires_grad_(True) for k, v in inputs.items()}
    y = fn(xs)
    dy = torch.randn(y.shape, generator=gen)
    y.backward(dy.to(REF_DTYPE))
    grads = {n: p.grad for n, p in module.named_parameters()}
    grads.update({f"input_{k}": v.grad for k, v in xs.items()})
    params = {n: p for n, p in module.named_parameters()}
    return y, dy, params, grads


def loss_case(name, gen):
    """Losses return the unweighted mean; the gradient is of weight·loss (dy holds the weight)."""
    weight = torch.tensor(0.375 if name != "loss_ce" else 1.75)  # exact in binary
    if name == "loss_ce":
        inputs = {"pred": 2 * torch.randn(6, 10, generator=gen)}
        labels = torch.randint(0, 10, (6,), generator=gen)
        fn = lambda xs: nn.functional.cross_entropy(xs["pred"], labels)  # noqa: E731
    else:
        inputs = {"pred": torch.randn(2, 5, 7, generator=gen)}
        target = torch.randn(2, 5, 7, generator=gen)
        target.view(-1)[:3] = inputs["pred"].view(-1)[:3]  # exact ties: torch's sign(0) = 0
        loss = nn.functional.l1_loss if name == "loss_l1" else nn.functional.mse_loss
        fn = lambda xs: loss(xs["pred"], target.to(REF_DTYPE))  # noqa: E731
    xs = {"pred": inputs["pred"].to(REF_DTYPE, copy=True).requires_grad_(True)}
    y = fn(xs)
    y.backward(weight.to(REF_DTYPE))
    extra = {"labels": labels} if name == "loss_ce" else {"target": target}
    return ("loss", dict(loss=name[5:], weight=float(weight)), {**inputs, **extra}, {}, y, weight,
            {"input_pred": xs["pred"].grad})


def build_case(name, seed):
    # Each case has its own stream, so generating one case alone gives the same file.
    gen = torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(name.encode()))
    if name in LOSS_CASES:
        return loss_case(name, gen)
    if name in BLOCK_CASES:
        cfg = BLOCK_CASES[name]
        module, inputs, fn = run_block(cfg, gen)
        kind, attrs = "attention_block", cfg
    else:
        kind, attrs, (module, inputs, fn) = MODULE_CASES[name](gen)
    y, dy, params, grads = forward_backward(module, inputs, fn, gen)
    return kind, attrs, inputs, params, y, dy, grads


def generate(name, out_dir, seed):
    kind, attrs, inputs, params, y, dy, grads = build_case(name, seed)
    attrs = {"kind": kind, "case": name, "seed": seed,
             "reference_dtype": str(REF_DTYPE).removeprefix("torch."), **attrs}
    attrs = {k: (int(v) if isinstance(v, bool) else v) for k, v in attrs.items()}
    write_case(os.path.join(out_dir, f"{name}.h5"), attrs, inputs, params, y, dy, grads)


ALL_CASES = list(MODULE_CASES) + list(BLOCK_CASES) + list(LOSS_CASES)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="output directory (created)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--case", action="append", choices=ALL_CASES, help="default: every case")
    p.add_argument("--list", action="store_true", help="print the case names and exit")
    p.add_argument("--reference-dtype", choices=["float64", "float32"], default="float64",
                   help="dtype of the reference computation (results are stored as float32)")
    args = p.parse_args(argv)
    global REF_DTYPE
    REF_DTYPE = getattr(torch, args.reference_dtype)
    if args.list:
        print("\n".join(ALL_CASES))
        return 0
    torch.set_num_threads(1)  # small problems; deterministic and quick
    os.makedirs(args.out, exist_ok=True)
    for name in args.case or ALL_CASES:
        generate(name, args.out, args.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
