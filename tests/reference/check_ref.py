#!/usr/bin/python3
"""Self-checks of the PyTorch reference. Exit status 0 only if every check passes.

    /usr/bin/python3 tests/reference/check_ref.py [-k SUBSTRING]

Covers: HF key list / shapes / order and the 19,858,855 parameter count; preset and HF-config
loading; output shapes; float64 gradcheck of the whole model (tiny) under the mask, activation,
loss and weight-sharing variants; chunked == full decoding; Fourier tables and space-to-depth vs
HF's formulations; safetensors round trip; the fixture generator end to end.
"""
import argparse
import os
import sys
import tempfile
import time
import traceback

import h5py
import numpy as np
import torch
from torch.nn.utils.stateless import functional_call

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import gen_model_fixture  # noqa: E402
import perceiver_config as pcfg  # noqa: E402
import perceiver_ref as ref  # noqa: E402
import safetensors_io  # noqa: E402

CONFIGS = os.path.join(ROOT, "configs")


def preset(name, **overrides):
    d = pcfg.to_flat_dict(pcfg.from_yaml(os.path.join(CONFIGS, f"{name}.yaml")))
    d.update(overrides)
    return pcfg.from_dict(d)


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


def tiny_model(dtype=torch.float64, seed=0, **overrides):
    cfg = preset("tiny", **overrides)
    model = ref.init_params(ref.PerceiverMMRef(cfg), "test", 0.2, seed=seed).to(dtype)
    gen = torch.Generator().manual_seed(seed + 1)
    return cfg, model, gen_model_fixture.make_inputs(cfg, 2, gen, dtype)


# ---------------------------------------------------------------------------------------------
# Key list, shapes and counts
# ---------------------------------------------------------------------------------------------
def expected_hf_keys(cfg):
    """HF state_dict (name, shape) in registration order, written out from HF's module tree."""
    c, d, e, o = cfg.input_channels, cfg.d_latents, cfg.query_channels, cfg.output_num_channels
    keys = [(f"perceiver.input_preprocessor.padding.{m}", [1, c - w]) for m, w in
            (("audio", cfg.audio_in_channels), ("image", cfg.image_in_channels), ("label", cfg.num_labels))]
    keys += [(f"perceiver.input_preprocessor.mask.{m}", [1, c]) for m in ("audio", "image", "label")]
    for m, w in (("audio", cfg.samples_per_patch), ("image", 3), ("label", cfg.num_labels)):
        keys += [(f"perceiver.output_postprocessor.modalities.{m}.classifier.weight", [w, o]),
                 (f"perceiver.output_postprocessor.modalities.{m}.classifier.bias", [w])]
    keys.append(("perceiver.embeddings.latents", [cfg.num_latents, d]))

    def layer(prefix, q, kv, cross):          # default widths only (qk_channels = v_channels = None)
        qk = kv if cross else q
        out = [(f"{prefix}.attention.self.layernorm1.{p}", [q]) for p in ("weight", "bias")]
        if cross:
            out += [(f"{prefix}.attention.self.layernorm2.{p}", [kv]) for p in ("weight", "bias")]
        for n, i in (("query", q), ("key", kv), ("value", kv)):
            out += [(f"{prefix}.attention.self.{n}.weight", [qk, i]), (f"{prefix}.attention.self.{n}.bias", [qk])]
        out += [(f"{prefix}.attention.output.dense.weight", [q, qk]), (f"{prefix}.attention.output.dense.bias", [q])]
        out += [(f"{prefix}.layernorm.{p}", [q]) for p in ("weight", "bias")]
        for n in ("dense1", "dense2"):
            out += [(f"{prefix}.mlp.{n}.weight", [q, q]), (f"{prefix}.mlp.{n}.bias", [q])]
        return out

    keys += layer("perceiver.encoder.cross_attention", d, c, True)
    for i in range(cfg.num_self_attends_per_block):
        keys += layer(f"perceiver.encoder.self_attends.{i}", d, d, False)
    keys.append(("perceiver.decoder.modalities.label.decoder.output_position_encodings.position_embeddings",
                 [1, cfg._label_trainable_num_channels]))
    keys += layer("perceiver.decoder.decoder.decoding_cross_attention", e, d, True)
    keys += [("perceiver.decoder.decoder.final_layer.weight", [o, e]), ("perceiver.decoder.decoder.final_layer.bias", [o])]
    keys += [(f"perceiver.decoder.padding.{m}", [1, e - w]) for m, w in
             (("audio", cfg.audio_pos_channels), ("image", cfg.image_pos_channels),
              ("label", cfg._label_trainable_num_channels))]
    return keys


def check_keys_and_counts():
    for name in ("tiny", "small", "kinetics700"):
        cfg = preset(name)
        model = ref.PerceiverMMRef(cfg)
        got = [(k, list(v.shape)) for k, v in model.state_dict().items()]
        want = expected_hf_keys(cfg)
        check(got == want, f"{name}: state_dict keys/shapes/order differ from HF: "
              f"{[g for g in got if g not in want][:3]} vs {[w for w in want if w not in got][:3]}")
        check(len(list(model.buffers())) == 0, f"{name}: unexpected buffers")
        check(ref.count_params(model) == ref.analytic_param_count(cfg), f"{name}: count != formula")
    n = ref.count_params(ref.PerceiverMMRef(preset("kinetics700")))
    check(n == ref.KINETICS700_PARAMS, f"kinetics700 has {n} params, spec §7 says {ref.KINETICS700_PARAMS}")
    check(ref.count_params(ref.PerceiverMMRef(pcfg.MMConfig())) == ref.KINETICS700_PARAMS, "MMConfig() defaults")


def check_configs():
    k = preset("kinetics700")
    hf = pcfg.from_hf_json(os.path.join(CONFIGS, "hf_kinetics700_config.json"))
    check(hf == k, f"hf_kinetics700_config.json != kinetics700.yaml: "
          f"{[f for f in pcfg.to_flat_dict(k) if getattr(k, f) != getattr(hf, f)]}")
    check(k == pcfg.MMConfig().validate(), "kinetics700.yaml != MMConfig defaults (HF hard-coded values)")
    check((k.input_channels, k.query_channels, k.n_image_tokens, k.n_audio_tokens) == (704, 1026, 50176, 1920),
          "kinetics derived sizes")
    t = preset("tiny")
    check((t.input_channels, t.query_channels, t.image_in_channels, t.audio_in_channels) == (67, 17, 63, 11),
          "tiny derived sizes (spec §10)")
    s = preset("small")
    check((s.input_channels, s.query_channels, s.image_in_channels, s.audio_in_channels) == (151, 130, 147, 81),
          "small derived sizes (spec §10)")
    with tempfile.TemporaryDirectory() as tmp:     # our extras make HF-style JSON round-trip any preset
        for name in ("tiny", "small"):
            path = os.path.join(tmp, "c.json")
            pcfg.dump_hf_json(preset(name), path)
            check(pcfg.from_hf_json(path) == preset(name), f"{name}: HF json round trip")
    for bad in ({"d_model": 68}, {"num_frames": 1, "output_shape": [1, 1, 16, 16]}, {"hidden_act": "relu"}):
        try:
            preset("tiny", **bad)
        except ValueError:
            continue
        raise AssertionError(f"config {bad} should be rejected")


# ---------------------------------------------------------------------------------------------
# Forward shapes, masking semantics
# ---------------------------------------------------------------------------------------------
def check_shapes():
    for name, b in (("tiny", 2), ("small", 1)):
        cfg = preset(name)
        model = ref.init_params(ref.PerceiverMMRef(cfg), "hf", 0.02)
        video, audio, label, pts = gen_model_fixture.make_inputs(cfg, b, torch.Generator().manual_seed(0), torch.float32)
        trace = {}
        with torch.no_grad():
            out = model(video, audio, label, pts, trace=trace)
        pi, pa = cfg.num_queries_image, cfg.num_queries_audio
        m = cfg.n_audio_tokens + cfg.n_image_tokens + 1
        want = {"image": (b, pi, 3), "audio": (b, pa * cfg.samples_per_patch), "label": (b, cfg.num_labels)}
        for k, s in want.items():
            check(tuple(out[k].shape) == s, f"{name}: logits/{k} {tuple(out[k].shape)} != {s}")
        check(tuple(trace["x"].shape) == (b, m, cfg.input_channels), f"{name}: x shape")
        check(tuple(trace["queries"].shape) == (b, pa + pi + 1, cfg.query_channels), f"{name}: queries shape")
        check(sum(k.startswith("z_self_") for k in trace) == cfg.num_blocks * cfg.num_self_attends_per_block,
              f"{name}: z_self count")


def check_mask_semantics():
    """p=1 replaces the label token (zero grad into pad_label), p=0 leaves mask tokens untrained."""
    cfg, model, (video, audio, label, pts) = tiny_model()
    out = model(video, audio, label, pts)
    total, _ = ref.multimodal_loss(cfg, out, video, audio, label, pts)
    total.backward()
    pp = model.perceiver.input_preprocessor
    check(pp.padding["label"].grad.abs().max() == 0, "label padding must get zero grad when p_label=1")
    check(pp.mask["label"].grad.abs().max() > 0, "label mask token must get grad when p_label=1")
    check(pp.mask["image"].grad.abs().max() == 0 and pp.mask["audio"].grad.abs().max() == 0,
          "image/audio mask tokens must get zero grad at p=0")
    try:
        preset_model = ref.PerceiverMMRef(preset("tiny", mask_prob_label=0.5))
        preset_model.make_masks(2)
    except ValueError:
        return
    raise AssertionError("0<p<1 without explicit mask or generator must raise")


# ---------------------------------------------------------------------------------------------
# Gradient checks (float64)
# ---------------------------------------------------------------------------------------------
def _loss_fn(model, cfg, names, label, pts, masks, recon, inputs):
    """Loss as a function of (params..., [video, audio]); inputs=(video, audio) pins them instead."""
    def fn(*tensors):
        params = dict(zip(names, tensors[:len(names)]))
        video, audio = inputs if inputs is not None else tensors[len(names):]
        out = functional_call(model, params, (video, audio, label, pts), {"masks": masks})
        total, _ = ref.multimodal_loss(cfg, out, video, audio, label, pts, recon, (0.03, 1.0, 1e-1))
        return total
    return fn


def _gradcheck(recon="mse", fast=True, subset=None, masks=None, **overrides):
    """fast: random-projection check over ALL params and both inputs; else element-wise on subset."""
    cfg, model, (video, audio, label, pts) = tiny_model(**overrides)
    masks = model.make_masks(2, masks)
    named = [(n, p) for n, p in model.named_parameters() if subset is None or any(s in n for s in subset)]
    names = [n for n, _ in named]
    args = [p.detach().clone().requires_grad_(True) for _, p in named]
    if fast:
        args += [video.requires_grad_(True), audio.requires_grad_(True)]
    fn = _loss_fn(model, cfg, names, label, pts, masks, recon, None if fast else (video, audio))
    ok = torch.autograd.gradcheck(fn, tuple(args), eps=1e-6, atol=1e-6, rtol=1e-4,
                                  fast_mode=fast, check_undefined_grad=False, raise_exception=False)
    check(ok, f"gradcheck failed ({recon}, fast={fast}, subset={subset}, {overrides})")


def check_gradcheck():
    _gradcheck("mse", fast=True)
    _gradcheck("l1", fast=True)
    _gradcheck("mse", fast=True, hidden_act="gelu_new")
    _gradcheck("mse", fast=True, num_blocks=2)
    _gradcheck("mse", fast=True, mask_prob_label=0.0)
    _gradcheck("mse", fast=True, mask_prob_label=0.5, mask_prob_image=0.5,
               masks={"label": torch.tensor([[1.0], [0.0]]),
                      "image": (torch.arange(64).reshape(2, 32) % 3 == 0).double()})
    # Element-wise Jacobian on small tensors of every kind (broadcast params, LN, attention, heads).
    subset = ("latents", "padding", "mask.label", "position_embeddings", "final_layer.bias",
              "self_attends.1.attention.self.query.weight", "cross_attention.attention.self.layernorm2.bias",
              "decoding_cross_attention.layernorm.weight", "modalities.label.classifier.bias")
    _gradcheck("mse", fast=False, subset=subset, mask_prob_label=0.0)


# ---------------------------------------------------------------------------------------------
# Decoding in chunks, Fourier tables, space-to-depth, safetensors, generator
# ---------------------------------------------------------------------------------------------
def check_chunked_decoding():
    cfg, model, (video, audio, label, _) = tiny_model()
    full = {"image": np.arange(cfg.n_pixels), "audio": np.arange(cfg.n_audio_tokens)}
    with torch.no_grad():
        z = model.encode(video, audio, label)
        a = model.decode(z, full)
        b = model.decode_chunked(z, full, n_chunks=4)
    for k in ("image", "audio", "label"):
        err = (a[k] - b[k]).abs().max().item()
        check(err < 1e-12, f"chunked decode differs on {k}: {err}")
    for lab in b["label_chunks"]:
        check((lab - a["label"]).abs().max() < 1e-12, "label logits must not depend on the chunk")
    check(a["image"].shape == (2, cfg.n_pixels, 3) and a["audio"].shape == (2, cfg.n_audio_samples),
          "full decode shapes")


def check_fourier():
    k = preset("kinetics700")
    f = ref.fourier_bands(32, k.image_max_res)
    check(f[0, -1] == 8 and f[1, -1] == 28 and f[0, 0] == 1, "image bands linspace(1, r/2, K)")
    check(ref.fourier_bands(192, [k.audio_max_res])[0, -1] == 15360, "audio top band 15360")
    for s in (2, 4, 16, 56, 1920, 30720):          # exact vs torch.linspace: at most 1 ulp apart
        a, b = ref.linspace_f32(-1.0, 1.0, s), ref.linspace_f32(-1.0, 1.0, s, "torch")
        check(((a - b).abs() <= 1.2e-7).all(), f"grid {s}: exact vs torch.linspace > 1 ulp")
        i = torch.arange(s, dtype=torch.float64)
        check(torch.equal(a, (-1 + 2 * i / (s - 1)).float()), f"grid {s} is not -1+2i/(s-1)")
    idx = torch.randperm(k.n_pixels, generator=torch.Generator().manual_seed(0))[:1000]
    dims = (k.num_frames, k.frame_height, k.frame_width)
    hf = torch.stack([torch.from_numpy(c) for c in np.unravel_index(idx.numpy(), dims)], dim=1)
    hf = -1 + 2 * hf / torch.tensor(dims)[None, :]          # HF decoder_query, verbatim semantics
    check(torch.equal(ref.subsampled_positions(idx, dims), hf), "decoder positions differ from HF")
    pe = ref.image_query_pos_enc(k, idx)
    check(pe.shape == (1000, 195) and pe.dtype == torch.float32, "image query table shape")
    check(ref.audio_input_pos_enc(k).shape == (1920, 385), "audio input table shape")
    p = ref.grid_positions((3, 4))
    check(torch.equal(p[5], torch.tensor([0.0, -1.0 / 3.0]).float()), "meshgrid is 'ij', row-major")


def check_space_to_depth():
    video = torch.randn(2, 4, 8, 12, 3)
    ours = ref.space_to_depth(video, 2, 4)
    x = video.permute(0, 1, 4, 2, 3)                       # HF layout [B,T,C,H,W]
    b, t, c, h, w = x.shape
    hf = x.reshape(b, t // 2, 2, c, h // 4, 4, w // 4, 4).permute(0, 1, 4, 6, 2, 5, 7, 3)
    hf = hf.reshape(b, t // 2, h // 4, w // 4, 2 * 16 * c)
    check(torch.equal(ours, hf), "space_to_depth differs from HF's [B,T,C,H,W] path")
    # channel index = ((dt*4 + dh)*4 + dw)*3 + c
    check(ours[1, 1, 1, 2, ((1 * 4 + 2) * 4 + 3) * 3 + 1] == video[1, 3, 6, 11, 1], "patch channel order")


def check_safetensors():
    t = {"a.weight": torch.randn(3, 5), "b": torch.randn(7), "c": torch.randn(2, 2, 2)}
    with tempfile.TemporaryDirectory() as tmp:
        for dt, tol in (("F32", 0), ("F64", 0), ("F16", 1e-2), ("BF16", 1e-1)):
            path = os.path.join(tmp, "m.safetensors")
            safetensors_io.save(t, path, dt, metadata={"format": "pt"})
            with open(path, "rb") as f:
                n = int.from_bytes(f.read(8), "little")
            check(n % 8 == 0, "header not 8-byte aligned")
            back, meta = safetensors_io.load(path)
            check(meta == {"format": "pt"} and set(back) == set(t), f"{dt}: names/metadata")
            for k in t:
                err = (back[k].double() - t[k].double()).abs().max().item()
                check(back[k].shape == t[k].shape and err <= tol * max(1.0, t[k].abs().max().item()),
                      f"{dt}: {k} err {err}")


def check_generator():
    """End to end: the fixture reloads into a fresh model and reproduces loss and grads."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "f.h5")
        st = os.path.join(tmp, "m.safetensors")
        js = os.path.join(tmp, "c.json")
        argv = ["--config", os.path.join(CONFIGS, "tiny.yaml"), "--seed", "3", "--batch", "2", "--out", out,
                "--safetensors-out", st, "--hf-config-out", js, "--double", "--set", "num_blocks=2"]
        gen_model_fixture.main(argv)
        cfg = pcfg.from_hf_json(js)
        check(cfg.num_blocks == 2, "--set override not applied / not in HF json")
        model = ref.PerceiverMMRef(cfg).double()
        weights, _ = safetensors_io.load(st)
        model.load_state_dict(weights)
        with h5py.File(out, "r") as f:
            names = [n.decode() if isinstance(n, bytes) else n for n in f["param_names"][()]]
            check(names == list(model.state_dict()), "param_names order")
            load = lambda k: torch.from_numpy(f[k][()])              # noqa: E731
            pts = {"image": load("subsample/image"), "audio": load("subsample/audio")}
            masks = {m: load(f"masks/{m}") for m in ("audio", "image", "label")}
            video, audio, label = load("video"), load("audio"), load("label")
            out_ = model(video, audio, label, pts, masks=masks)
            total, _ = ref.multimodal_loss(cfg, out_, video, audio, label, pts, "l1", tuple(f.attrs["loss_weights"]))
            total.backward()
            check(abs(total.item() - f["loss"][()]) < 1e-12, "reloaded loss differs")
            for n, p in model.named_parameters():
                check(np.allclose(p.grad.numpy(), f[f"grads/{n}"][()], atol=1e-12), f"grad {n} differs")
            check("intermediate/z_self_3" in f, "weight-shared applications traced")


CHECKS = [
    ("keys_and_counts", check_keys_and_counts), ("configs", check_configs), ("shapes", check_shapes),
    ("mask_semantics", check_mask_semantics), ("fourier", check_fourier),
    ("space_to_depth", check_space_to_depth), ("chunked_decoding", check_chunked_decoding),
    ("safetensors", check_safetensors), ("generator", check_generator), ("gradcheck", check_gradcheck),
]


def main():
    ap = argparse.ArgumentParser(description="reference self-checks")
    ap.add_argument("-k", default="", help="run only checks whose name contains this")
    args = ap.parse_args()
    torch.manual_seed(0)
    failed = 0
    for name, fn in CHECKS:
        if args.k not in name:
            continue
        t0 = time.time()
        try:
            fn()
            print(f"PASS {name} ({time.time() - t0:.1f}s)")
        except Exception:                              # report every failure, then exit non-zero
            failed += 1
            print(f"FAIL {name}\n{traceback.format_exc()}")
    print("all reference checks passed" if not failed else f"{failed} check(s) failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
