#!/usr/bin/python3
"""Self-contained PyTorch reference of HF `PerceiverForMultimodalAutoencoding` (Perceiver IO, Kinetics-700).

Written from perceiver-spec.md and a reading of HF's modeling_perceiver.py; no HF import. The module
tree mirrors HF's so that `state_dict()` keys (names, shapes, and registration order) are exactly
HF's: a checkpoint of deepmind/multimodal-perceiver loads with `load_state_dict` unchanged.

Numerics equal HF in eval() mode (no attention dropout), with these documented choices:
  * Inputs use the DeepMind layout. video [B,T,H,W,3]; HF takes [B,T,3,H,W] = video.permute(0,1,4,2,3)
    (`to_hf_inputs`). audio [B,S]; HF takes [B,S,1]. label int64 [B] or one-hot float [B,L].
  * Fourier features are always computed in float32, then cast to the model dtype (as HF does).
    The encoder grid and the frequency bands come from `linspace_f32`: grid="exact" (default) is the
    correctly specified −1+2i/(s−1), reproducible bit-for-bit in C++; grid="torch" is torch.linspace,
    HF's bits, which differ by ≤1 ulp (spec §3.1).
  * Masking: for p in {0, 1} the mask is constant. For 0<p<1 pass explicit masks {modality: [B,n]},
    or a torch.Generator to draw them (HF draws with the global CPU RNG, which we do not reproduce).

Shape legend: B batch; M/C input tokens/width; N/D latents/width; O output queries; E query width.
"""
import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from perceiver_config import MMConfig

MODALITIES = ("audio", "image", "label")   # sorted order: token order of inputs, queries and outputs
KINETICS700_PARAMS = 19_858_855            # spec §7


# ---------------------------------------------------------------------------------------------
# Fourier position features (spec §3.1, §4.1). Float32 throughout; the result is cast by callers.
# ---------------------------------------------------------------------------------------------
def linspace_f32(start, end, steps, grid="exact"):
    """[steps] float32 from start to end inclusive.

    exact: (float)(start + ((end - start) * i) / (steps - 1)) evaluated in double, then rounded once.
    torch: torch.linspace (HF); its CPU kernel rounds differently (±1 ulp, vector-width dependent).
    """
    if grid == "torch":
        return torch.linspace(start, end, steps, dtype=torch.float32)
    if grid != "exact":
        raise ValueError(f"grid must be exact|torch, got {grid!r}")
    if steps == 1:
        return torch.tensor([start], dtype=torch.float32)
    i = torch.arange(steps, dtype=torch.float64)
    return (start + ((end - start) * i) / (steps - 1)).to(torch.float32)


def fourier_bands(num_bands, max_resolution, grid="exact"):
    """[d, K] frequencies: linspace(1, r_j/2, K) per dimension j (linear, not log)."""
    return torch.stack([linspace_f32(1.0, r / 2.0, num_bands, grid) for r in max_resolution])


def fourier_features(pos, num_bands, max_resolution, grid="exact"):
    """pos [n, d] float32 -> [n, d + 2dK] = [pos | sin(pi*p) | cos(pi*p)], p[:, j*K+k] = pos[:, j]*f[j, k].

    Order of float32 operations, as in HF: p = pos*f; a = p*float32(pi); sin(a), cos(a).
    """
    pos = pos.to(torch.float32)
    freqs = fourier_bands(num_bands, max_resolution, grid)
    p = (pos[:, :, None] * freqs[None, :, :]).reshape(pos.shape[0], -1)
    a = p * math.pi    # torch rounds the scalar to float32 before multiplying
    return torch.cat([pos, torch.sin(a), torch.cos(a)], dim=-1)


def grid_positions(index_dims, grid="exact"):
    """Encoder positions [prod(s), d]: 'ij' meshgrid of linspace(-1, 1, s_j), flattened row-major."""
    axes = [linspace_f32(-1.0, 1.0, s, grid) for s in index_dims]
    mesh = torch.meshgrid(*axes, indexing="ij")
    return torch.stack(mesh, dim=-1).reshape(-1, len(index_dims))


def subsampled_positions(flat_idx, index_dims):
    """Decoder positions [n, d] for flat row-major indices: -1 + float32(2*i_j) / float32(s_j).

    This is HF's `-1 + 2 * pos / tensor(dims)` (int64 true division runs in float32). Note the
    divisor s, not s-1: decoder positions never reach +1 (spec §3.1, §11.9).
    """
    coords = np.unravel_index(np.asarray(flat_idx, dtype=np.int64), tuple(index_dims))
    cols = [-1.0 + (2 * torch.from_numpy(np.asarray(c, dtype=np.int64))).to(torch.float32) / float(s)
            for c, s in zip(coords, index_dims)]
    return torch.stack(cols, dim=1)


def image_input_pos_enc(cfg, grid="exact"):      # [T'*H'*W', 3 + 6K]
    return fourier_features(grid_positions(cfg.image_grid, grid), cfg.image_fourier_num_bands,
                            cfg.image_max_res, grid)


def audio_input_pos_enc(cfg, grid="exact"):      # [S/spp, 1 + 2K]
    return fourier_features(grid_positions((cfg.n_audio_tokens,), grid), cfg.audio_fourier_num_bands,
                            (cfg.audio_max_res,), grid)


def image_query_pos_enc(cfg, idx, grid="exact"):  # [n, 3 + 6K]; idx into T*H*W pixels
    pos = subsampled_positions(idx, (cfg.num_frames, cfg.frame_height, cfg.frame_width))
    return fourier_features(pos, cfg.image_fourier_num_bands, cfg.image_max_res, grid)


def audio_query_pos_enc(cfg, idx, grid="exact"):  # [n, 1 + 2K]; idx into audio patches
    pos = subsampled_positions(idx, (cfg.n_audio_tokens,))
    return fourier_features(pos, cfg.audio_fourier_num_bands, (cfg.audio_max_res,), grid)


# ---------------------------------------------------------------------------------------------
# Layers. Attribute names are HF's (they become the state_dict keys).
# ---------------------------------------------------------------------------------------------
def activation(name):
    if name == "gelu":                    # exact erf form (HF ACT2FN["gelu"])
        return F.gelu
    if name == "gelu_new":                # tanh form, written as HF's NewGELUActivation
        c = math.sqrt(2.0 / math.pi)
        return lambda x: 0.5 * x * (1.0 + torch.tanh(c * (x + 0.044715 * torch.pow(x, 3.0))))
    raise ValueError(f"unsupported hidden_act {name!r}")


def attention_widths(is_cross, q_dim, kv_dim, qk, v, shape_for_attention):
    """(qk, v, out) channel widths with HF's defaulting rules (spec §2.2)."""
    if qk is None:
        qk = (q_dim if shape_for_attention == "q" else kv_dim) if is_cross else q_dim
    if v is None:
        v = qk
    return qk, v, (q_dim if is_cross else v)


class _SelfAttention(nn.Module):
    """HF PerceiverSelfAttention: pre-LNs and q/k/v projections, scaled dot-product attention.

    Self-attention has no layernorm2 (HF uses nn.Identity, so no key); Q, K, V all read LN_1(z).
    """

    def __init__(self, q_dim, kv_dim, qk, v, heads, is_cross, eps):
        super().__init__()
        if qk % heads or v % heads:
            raise ValueError(f"qk={qk}, v={v} not divisible by heads={heads}")
        self.heads = heads
        self.is_cross = is_cross
        self.layernorm1 = nn.LayerNorm(q_dim, eps=eps)
        if is_cross:
            self.layernorm2 = nn.LayerNorm(kv_dim, eps=eps)
        self.query = nn.Linear(q_dim, qk)
        self.key = nn.Linear(kv_dim, qk)
        self.value = nn.Linear(kv_dim, v)

    def _split(self, x):                  # [B, n, F] -> [B, h, n, F/h]; head = contiguous channel block
        b, n, f = x.shape
        return x.view(b, n, self.heads, f // self.heads).permute(0, 2, 1, 3)

    def forward(self, hidden, inputs=None):
        hidden = self.layernorm1(hidden)
        kv = self.layernorm2(inputs) if self.is_cross else hidden
        q = self._split(self.query(hidden))
        k = self._split(self.key(kv))
        v = self._split(self.value(kv))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        ctx = torch.matmul(torch.softmax(scores, dim=-1), v)          # [B, h, n, Fv/h]
        b, h, n, fh = ctx.shape
        return ctx.permute(0, 2, 1, 3).reshape(b, n, h * fh)


class _Dense(nn.Module):                  # HF PerceiverSelfOutput: holds `dense`
    def __init__(self, i, o):
        super().__init__()
        self.dense = nn.Linear(i, o)

    def forward(self, x):
        return self.dense(x)


class _Attention(nn.Module):              # HF PerceiverAttention: `self` + `output` (+ query residual)
    def __init__(self, q_dim, kv_dim, qk, v, out, heads, is_cross, use_query_residual, eps):
        super().__init__()
        self.self = _SelfAttention(q_dim, kv_dim, qk, v, heads, is_cross, eps)
        self.output = _Dense(v, out)
        self.use_query_residual = use_query_residual

    def forward(self, hidden, inputs=None):
        out = self.output(self.self(hidden, inputs))
        return out + hidden if self.use_query_residual else out


class _MLP(nn.Module):
    def __init__(self, dim, widening, act):
        super().__init__()
        self.dense1 = nn.Linear(dim, widening * dim)
        self.dense2 = nn.Linear(widening * dim, dim)
        self.act = activation(act)

    def forward(self, x):
        return self.dense2(self.act(self.dense1(x)))


class PerceiverLayer(nn.Module):
    """Pre-LN block: x = Attn(x[, inputs]) (+x); out = x + MLP(LN(x)). HF PerceiverLayer."""

    def __init__(self, cfg, q_dim, kv_dim, heads, widening, is_cross, use_query_residual=True,
                 qk=None, v=None):
        super().__init__()
        qk, v, out = attention_widths(is_cross, q_dim, kv_dim, qk, v, cfg.cross_attention_shape_for_attention)
        self.attention = _Attention(q_dim, kv_dim, qk, v, out, heads, is_cross, use_query_residual, cfg.ln_eps)
        self.layernorm = nn.LayerNorm(q_dim, eps=cfg.ln_eps)
        self.mlp = _MLP(q_dim, widening, cfg.hidden_act)

    def forward(self, hidden, inputs=None):
        x = self.attention(hidden, inputs)
        return x + self.mlp(self.layernorm(x))


def _holder(**children):
    """A parameter-free nn.Module that only exists to reproduce an HF key prefix."""
    m = nn.Module()
    for k, v in children.items():
        setattr(m, k, v)
    return m


def _sorted_param_dict(shapes):
    """nn.ParameterDict built from a plain dict sorts its keys (torch 1.x and 2.x), as in HF."""
    return nn.ParameterDict({m: nn.Parameter(torch.zeros(*shapes[m])) for m in sorted(shapes)})


# ---------------------------------------------------------------------------------------------
# The model. Registration order = HF's: input_preprocessor, output_postprocessor, embeddings,
# encoder, decoder (PerceiverModel assigns its attributes in that order).
# ---------------------------------------------------------------------------------------------
class _Encoder(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cross_attention = PerceiverLayer(
            cfg, cfg.d_latents, cfg.input_channels, cfg.num_cross_attention_heads,
            cfg.cross_attention_widening_factor, True, cfg.use_query_residual, cfg.qk_channels, cfg.v_channels)
        self.self_attends = nn.ModuleList(
            PerceiverLayer(cfg, cfg.d_latents, cfg.d_latents, cfg.num_self_attention_heads,
                           cfg.self_attention_widening_factor, False, True, cfg.qk_channels, cfg.v_channels)
            for _ in range(cfg.num_self_attends_per_block))


class _Decoder(nn.Module):
    """HF PerceiverMultimodalDecoder: only the label query builder owns a parameter; the audio and
    image builders are Fourier-only (no keys). decoder.decoder is the shared cross-attention."""

    def __init__(self, cfg):
        super().__init__()
        e = cfg.query_channels
        label_pe = _holder(position_embeddings=nn.Parameter(torch.zeros(1, cfg._label_trainable_num_channels)))
        self.modalities = nn.ModuleDict({"label": _holder(decoder=_holder(output_position_encodings=label_pe))})
        self.decoder = _holder(
            decoding_cross_attention=PerceiverLayer(
                cfg, e, cfg.d_latents, cfg.decoder_num_heads, cfg.decoder_widening_factor, True,
                cfg.decoder_use_query_residual),
            final_layer=nn.Linear(e, cfg.output_num_channels))
        self.padding = _sorted_param_dict({
            "audio": (1, e - cfg.audio_pos_channels),
            "image": (1, e - cfg.image_pos_channels),
            "label": (1, e - cfg._label_trainable_num_channels)})


def _build_core(cfg):
    c = cfg.input_channels
    core = nn.Module()
    core.input_preprocessor = _holder(
        padding=_sorted_param_dict({"audio": (1, c - cfg.audio_in_channels),
                                    "image": (1, c - cfg.image_in_channels),
                                    "label": (1, c - cfg.num_labels)}),
        mask=_sorted_param_dict({m: (1, c) for m in MODALITIES}))
    o = cfg.output_num_channels
    core.output_postprocessor = _holder(modalities=nn.ModuleDict({
        "audio": _holder(classifier=nn.Linear(o, cfg.samples_per_patch)),
        "image": _holder(classifier=nn.Linear(o, 3)),
        "label": _holder(classifier=nn.Linear(o, cfg.num_labels))}))
    core.embeddings = _holder(latents=nn.Parameter(torch.zeros(cfg.num_latents, cfg.d_latents)))
    core.encoder = _Encoder(cfg)
    core.decoder = _Decoder(cfg)
    return core


def space_to_depth(video, dt, sd):
    """[B,T,H,W,C] -> [B, T/dt, H/sd, W/sd, dt*sd*sd*C], channel order (dt, dh, dw, c), c fastest."""
    b, t, h, w, c = video.shape
    x = video.reshape(b, t // dt, dt, h // sd, sd, w // sd, sd, c)
    x = x.permute(0, 1, 3, 5, 2, 4, 6, 7)
    return x.reshape(b, t // dt, h // sd, w // sd, dt * sd * sd * c)


def label_one_hot(label, num_labels, dtype):
    if label.dtype in (torch.int64, torch.int32):
        return F.one_hot(label.long(), num_labels).to(dtype)
    return label.to(dtype)


class PerceiverMMRef(nn.Module):
    """Reference `PerceiverForMultimodalAutoencoding`. All state lives under `perceiver.`."""

    def __init__(self, cfg: MMConfig, grid="exact"):
        super().__init__()
        self.cfg = cfg.validate()
        self.grid = grid
        self.perceiver = _build_core(cfg)
        self._pos_cache = {}

    # -- preprocessing (spec §3) --
    def _input_pos(self, name):
        if name not in self._pos_cache:
            fn = image_input_pos_enc if name == "image" else audio_input_pos_enc
            self._pos_cache[name] = fn(self.cfg, self.grid)
        return self._pos_cache[name]

    def make_masks(self, batch, masks=None, generator=None):
        """{modality: [B, n] float 0/1}. Explicit masks win; p in {0,1} needs no RNG."""
        masks = dict(masks or {})
        sizes = {"audio": self.cfg.n_audio_tokens, "image": self.cfg.n_image_tokens, "label": 1}
        for m, p in self.cfg.mask_probs.items():
            if m in masks:
                if tuple(masks[m].shape) != (batch, sizes[m]):
                    raise ValueError(f"mask[{m}] shape {tuple(masks[m].shape)} != {(batch, sizes[m])}")
                continue
            if p in (0.0, 1.0):
                masks[m] = torch.full((batch, sizes[m]), float(p))
            elif generator is not None:
                masks[m] = torch.bernoulli(torch.full((batch, sizes[m]), float(p)), generator=generator)
            else:
                raise ValueError(f"mask_prob_{m}={p} needs an explicit mask or a generator")
        return masks

    def preprocess(self, video, audio, label, masks, trace=None):
        """-> x [B, M, C]: per modality [features | pos] ++ padding row, masked, concatenated sorted."""
        cfg, pp = self.cfg, self.perceiver.input_preprocessor
        b, dtype = video.shape[0], video.dtype
        img = space_to_depth(video, cfg.temporal_downsample, cfg.spatial_downsample).reshape(b, cfg.n_image_tokens, -1)
        aud = audio.reshape(b, cfg.n_audio_tokens, cfg.samples_per_patch)
        feats = {
            "image": torch.cat([img, self._input_pos("image").to(dtype).expand(b, -1, -1)], dim=-1),
            "audio": torch.cat([aud, self._input_pos("audio").to(dtype).expand(b, -1, -1)], dim=-1),
            "label": label_one_hot(label, cfg.num_labels, dtype)[:, None, :],
        }
        out = []
        for m in MODALITIES:
            x = feats[m]
            pad = pp.padding[m].expand(b, x.shape[1], -1)
            x = torch.cat([x, pad], dim=-1)
            mk = masks[m].to(dtype)[:, :, None]
            out.append((1 - mk) * x + mk * pp.mask[m].expand(b, -1, -1))   # HF applies this for every p
        x = torch.cat(out, dim=1)
        if trace is not None:
            trace["x"] = x
        return x

    # -- encoder (spec §2.4) --
    def encode(self, video, audio, label, masks=None, generator=None, trace=None):
        """-> z [B, N, D]. trace (dict) receives x, z_cross, z_self_<k> (k = application index)."""
        masks = self.make_masks(video.shape[0], masks, generator)
        x = self.preprocess(video, audio, label, masks, trace)
        enc = self.perceiver.encoder
        z = self.perceiver.embeddings.latents.expand(x.shape[0], -1, -1)
        z = enc.cross_attention(z, x)
        if trace is not None:
            trace["z_cross"] = z
        k = 0
        for _ in range(self.cfg.num_blocks):
            for layer in enc.self_attends:
                z = layer(z)
                if trace is not None:
                    trace[f"z_self_{k}"] = z
                k += 1
        return z

    # -- decoder (spec §4) --
    def decoder_queries(self, batch, points, dtype):
        """-> q [B, O, E] = sorted [audio | image | label] queries, each ++ its padding row."""
        cfg, dec = self.cfg, self.perceiver.decoder
        raw = {
            "audio": audio_query_pos_enc(cfg, points["audio"], self.grid).to(dtype),
            "image": image_query_pos_enc(cfg, points["image"], self.grid).to(dtype),
            "label": dec.modalities["label"].decoder.output_position_encodings.position_embeddings,
        }
        parts = []
        for m in MODALITIES:
            q = raw[m].expand(batch, -1, -1)
            parts.append(torch.cat([q, dec.padding[m].expand(batch, q.shape[1], -1)], dim=-1))
        return torch.cat(parts, dim=1)

    def decode(self, z, points, trace=None):
        """z [B,N,D], points {image: idx [Pi], audio: idx [Pa]} -> logits dict (spec §4.4)."""
        core = self.perceiver
        b = z.shape[0]
        q = self.decoder_queries(b, points, z.dtype)
        y = core.decoder.decoder.decoding_cross_attention(q, z)
        out = core.decoder.decoder.final_layer(y)
        if trace is not None:
            trace.update(queries=q, decoder_out=y, decoder_final=out)
        n_a, n_i = len(points["audio"]), len(points["image"])
        heads = core.output_postprocessor.modalities
        return {
            "audio": heads["audio"].classifier(out[:, :n_a]).reshape(b, -1),    # [B, Pa*spp], patch-major
            "image": heads["image"].classifier(out[:, n_a:n_a + n_i]),          # [B, Pi, 3]
            "label": heads["label"].classifier(out[:, n_a + n_i:])[:, 0, :],    # [B, L]
        }

    def decode_chunked(self, z, points, n_chunks):
        """Decode the index sets in n_chunks contiguous pieces (the colab's inference loop)."""
        img = np.array_split(np.asarray(points["image"]), n_chunks)
        aud = np.array_split(np.asarray(points["audio"]), n_chunks)
        outs = [self.decode(z, {"image": i, "audio": a}) for i, a in zip(img, aud)]
        return {"image": torch.cat([o["image"] for o in outs], dim=1),
                "audio": torch.cat([o["audio"] for o in outs], dim=1),
                "label": outs[0]["label"], "label_chunks": [o["label"] for o in outs]}

    def forward(self, video, audio, label, points, masks=None, generator=None, trace=None):
        z = self.encode(video, audio, label, masks, generator, trace)
        return self.decode(z, points, trace)


def to_hf_inputs(video, audio, label, num_labels):
    """Our tensors -> HF's `inputs` dict: image [B,T,3,H,W], audio [B,S,1], label one-hot [B,L]."""
    return {"image": video.permute(0, 1, 4, 2, 3), "audio": audio[..., None],
            "label": label_one_hot(label, num_labels, video.dtype)}


# ---------------------------------------------------------------------------------------------
# Loss (spec §5): w_v*recon(video) + w_a*recon(audio) + w_l*CE(label).
# ---------------------------------------------------------------------------------------------
def recon_targets(cfg, video, audio, points):
    """Raw pixels [B,Pi,3] and samples [B,Pa*spp] at the queried indices."""
    b = video.shape[0]
    img = video.reshape(b, -1, 3)[:, torch.as_tensor(points["image"], dtype=torch.long)]
    aud = audio.reshape(b, -1, cfg.samples_per_patch)[:, torch.as_tensor(points["audio"], dtype=torch.long)]
    return img, aud.reshape(b, -1)


def _recon(pred, target, kind):
    if pred.numel() == 0:
        return pred.sum()
    if kind == "l1":
        return (pred - target).abs().mean()          # mean over subsampled elements and batch
    if kind == "mse":
        return ((pred - target) ** 2).mean()
    raise ValueError(f"recon loss must be l1|mse, got {kind!r}")


def multimodal_loss(cfg, logits, video, audio, label, points, recon="l1", weights=(0.03, 1.0, 1e-4)):
    """-> (total, {image, audio, label}) with UNWEIGHTED terms; total = sum(w * term).

    CE is softmax cross-entropy against the one-hot label, mean over the batch.
    """
    img_t, aud_t = recon_targets(cfg, video, audio, points)
    onehot = label_one_hot(label, cfg.num_labels, logits["label"].dtype)
    terms = {
        "image": _recon(logits["image"], img_t, recon),
        "audio": _recon(logits["audio"], aud_t, recon),
        "label": -(onehot * torch.log_softmax(logits["label"], dim=-1)).sum(-1).mean(),
    }
    wv, wa, wl = weights
    return wv * terms["image"] + wa * terms["audio"] + wl * terms["label"], terms


# ---------------------------------------------------------------------------------------------
# Initialisation and counting.
# ---------------------------------------------------------------------------------------------
def _param_roles(model):
    """id(param) -> 'ln_gain' | 'ln_bias' | ('linear', fan_in); other params are absent."""
    roles = {}
    for mod in model.modules():
        if isinstance(mod, nn.LayerNorm):
            roles[id(mod.weight)], roles[id(mod.bias)] = "ln_gain", "ln_bias"
        elif isinstance(mod, nn.Linear):
            roles[id(mod.weight)] = ("linear", mod.in_features)
    return roles


@torch.no_grad()
def init_params(model, mode="hf", std=0.02, seed=0):
    """Deterministic init from `seed`, parameters visited in registration order.

    hf:   HF _init_weights: N(0,std) for Linear weights, latents, pads, mask tokens and the label
          query; biases 0; LN gain 1, bias 0.
    test: for parity fixtures, so that every gradient is O(1) rather than tiny: Linear weights
          N(0, 1/fan_in) (unit-gain, keeps activations O(1) at any width), LN gains 1+N(0,std),
          every other tensor (biases, LN biases, latents, pads, masks, query) N(0,std).
    """
    g = torch.Generator().manual_seed(seed)
    roles = _param_roles(model)
    for name, p in model.named_parameters():
        role = roles.get(id(p))
        if mode == "hf":
            if role in ("ln_gain", "ln_bias"):
                p.fill_(1.0 if role == "ln_gain" else 0.0)
            elif name.endswith(".bias"):
                p.zero_()
            else:
                p.normal_(0.0, std, generator=g)
        elif mode == "test":
            sd = role[1] ** -0.5 if isinstance(role, tuple) else std
            p.normal_(0.0, sd, generator=g)
            if role == "ln_gain":
                p.add_(1.0)
        else:
            raise ValueError(f"init must be hf|test, got {mode!r}")
    return model


def count_params(model):
    return sum(p.numel() for p in model.parameters())


def analytic_param_count(cfg):
    """Independent formula (spec §7, §10) to cross-check the module tree."""
    lin = lambda i, o: i * o + o                                # noqa: E731
    ln = lambda d: 2 * d                                        # noqa: E731
    c, d, e, o = cfg.input_channels, cfg.d_latents, cfg.query_channels, cfg.output_num_channels

    def layer(q_dim, kv_dim, is_cross, wf, qk=None, v=None, shape="kv"):
        qk, v, out = attention_widths(is_cross, q_dim, kv_dim, qk, v, shape)
        att = ln(q_dim) + (ln(kv_dim) if is_cross else 0) + lin(q_dim, qk) + lin(kv_dim, qk) + lin(kv_dim, v)
        return att + lin(v, out) + ln(q_dim) + lin(q_dim, wf * q_dim) + lin(wf * q_dim, q_dim)

    shape = cfg.cross_attention_shape_for_attention
    n = 3 * c - cfg.audio_in_channels - cfg.image_in_channels - cfg.num_labels   # input padding rows
    n += 3 * c + cfg.num_latents * d                                             # mask tokens, latents
    n += layer(d, c, True, cfg.cross_attention_widening_factor, cfg.qk_channels, cfg.v_channels, shape)
    n += cfg.num_self_attends_per_block * layer(d, d, False, cfg.self_attention_widening_factor,
                                                cfg.qk_channels, cfg.v_channels)
    n += 3 * e - cfg.audio_pos_channels - cfg.image_pos_channels               # decoder padding rows ...
    n += layer(e, d, True, cfg.decoder_widening_factor, shape=shape) + lin(e, o)  # (label pad+query = e)
    n += lin(o, cfg.samples_per_patch) + lin(o, 3) + lin(o, cfg.num_labels)
    return n
