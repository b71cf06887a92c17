#!/usr/bin/python3
"""Write an HDF5 parity fixture for the whole multimodal model: inputs, params, outputs, loss, grads.

    /usr/bin/python3 tests/reference/gen_model_fixture.py --config configs/tiny.yaml --seed 0 --batch 2 \
        --out fixture.h5 [--hf-config-out config.json] [--safetensors-out model.safetensors] \
        [--recon_loss l1|mse] [--loss_weights 0.03,1,1e-4] [--label_mask_prob p] \
        [--hidden_act gelu|gelu_new] [--init hf|test] [--double] [--set key=value ...]

HDF5 layout (dtype f32, or f64 with --double; names are HF state_dict keys):
  video [B,T,H,W,3]  audio [B,S]  label i64 [B]
  subsample/image i64 [Pi] (flat row-major over T*H*W)   subsample/audio i64 [Pa] (audio patch index)
  masks/{audio,image,label} [B,n_tokens] 0/1 masks that were applied
  params/<name>  (torch layout, Linear weight [out,in])      grads/<name>  d loss / d param
  logits/image [B,Pi,3]  logits/audio [B,Pa*spp]  logits/label [B,L]
  loss (scalar, weighted total)  loss_terms/{image,audio,label} (unweighted)
  intermediate/{x [B,M,C], z_cross [B,N,D], z_self_<k> [B,N,D] (k = application index over
      num_blocks*layers), queries [B,O,E], decoder_out [B,O,E] (before final_layer),
      decoder_final [B,O,output_num_channels]}
  intermediate/pos/{image_input, audio_input, image_query, audio_query}: Fourier tables (f32 math)
  intermediate_grads/<same names as intermediate/>: d loss / d activation
  param_names: registration order;  root attrs: config_yaml, seed, recon_loss, loss_weights, ...
"""
import argparse
import sys

import h5py
import numpy as np
import torch
import yaml

import perceiver_config as pcfg
import perceiver_ref as ref
import safetensors_io


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", required=True, help="preset .yaml or HF config .json")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--out", required=True, help="output HDF5 fixture")
    p.add_argument("--hf-config-out", "--hf_config_out", help="also write an HF-style config.json")
    p.add_argument("--yaml-out", "--yaml_out", help="also write the effective preset YAML")
    p.add_argument("--safetensors-out", "--safetensors_out", help="also write the weights as safetensors")
    p.add_argument("--safetensors-dtype", "--safetensors_dtype", default="F32", choices=["F32", "F16", "BF16", "F64"])
    p.add_argument("--recon_loss", "--recon-loss", default="l1", choices=["l1", "mse"])
    p.add_argument("--loss_weights", "--loss-weights", default="0.03,1.0,1e-4", help="video,audio,label")
    p.add_argument("--label_mask_prob", "--label-mask-prob", type=float, help="override mask_prob_label")
    p.add_argument("--hidden_act", "--hidden-act", choices=["gelu", "gelu_new"], help="override hidden_act")
    p.add_argument("--init", default="test", choices=["hf", "test"],
                   help="hf: N(0,initializer_range), LN 1/0, biases 0; test: Linear N(0,1/fan_in), "
                        "LN gains 1+N(0,std), all else N(0,std)")
    p.add_argument("--init-std", "--init_std", type=float, help="default: initializer_range (hf) or 0.2 (test)")
    p.add_argument("--double", action="store_true", help="float64 model, inputs and outputs")
    p.add_argument("--fourier-grid", "--fourier_grid", default="exact", choices=["exact", "torch"])
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override any config key, e.g. --set num_blocks=2 (value parsed as YAML)")
    return p.parse_args(argv)


def effective_config(args):
    """Load the config and apply overrides; the result is validated."""
    d = pcfg.to_flat_dict(pcfg.load(args.config))
    for kv in args.set:
        key, _, val = kv.partition("=")
        d[key] = yaml.safe_load(val)
    if args.label_mask_prob is not None:
        d["mask_prob_label"] = args.label_mask_prob
    if args.hidden_act is not None:
        d["hidden_act"] = args.hidden_act
    return pcfg.from_dict(d, strict=True)


def make_inputs(cfg, batch, gen, dtype):
    """Random inputs in the C++ `perceiver-eval` layout, and fresh query indices (no replacement)."""
    video = torch.rand(batch, cfg.num_frames, cfg.frame_height, cfg.frame_width, 3, generator=gen, dtype=dtype)
    audio = torch.rand(batch, cfg.n_audio_samples, generator=gen, dtype=dtype) * 2 - 1
    label = torch.randint(0, cfg.num_labels, (batch,), generator=gen)
    points = {"image": torch.randperm(cfg.n_pixels, generator=gen)[:cfg.num_queries_image],
              "audio": torch.randperm(cfg.n_audio_tokens, generator=gen)[:cfg.num_queries_audio]}
    return video, audio, label, points


def run(model, cfg, args, video, audio, label, points, masks):
    """Forward + backward. Returns (logits, total, terms, trace) with grads populated."""
    trace = {}
    logits = model(video, audio, label, points, masks=masks, trace=trace)
    for t in trace.values():
        t.retain_grad()
    weights = tuple(float(w) for w in args.loss_weights.split(","))
    if len(weights) != 3:
        raise ValueError("--loss_weights needs three comma-separated values")
    total, terms = ref.multimodal_loss(cfg, logits, video, audio, label, points, args.recon_loss, weights)
    total.backward()
    return logits, total, terms, trace, weights


def preset_yaml(cfg):
    return yaml.safe_dump({"model": pcfg.to_flat_dict(cfg)}, sort_keys=False)


def np_(t):
    return t.detach().cpu().numpy()


def write_h5(path, args, cfg, model, inputs, masks, result):
    video, audio, label, points = inputs
    logits, total, terms, trace, weights = result
    with h5py.File(path, "w") as f:
        f.attrs.update(format="libperceiver-model-fixture", version=1, seed=args.seed, batch=args.batch,
                       recon_loss=args.recon_loss, loss_weights=np.array(weights), init=args.init,
                       dtype="float64" if args.double else "float32", fourier_grid=args.fourier_grid,
                       hidden_act=cfg.hidden_act, config_yaml=preset_yaml(cfg))
        f["video"], f["audio"], f["label"] = np_(video), np_(audio), np_(label).astype(np.int64)
        for m in ("image", "audio"):
            f[f"subsample/{m}"] = np_(points[m]).astype(np.int64)
        for m, mk in masks.items():
            f[f"masks/{m}"] = np_(mk).astype(np_(video).dtype)
        names = [n for n, _ in model.named_parameters()]
        f["param_names"] = np.array(names, dtype=h5py.string_dtype())
        for n, p in model.named_parameters():
            f[f"params/{n}"] = np_(p)
            f[f"grads/{n}"] = np_(p.grad)
        for m, v in logits.items():
            f[f"logits/{m}"] = np_(v)
        f["loss"] = np_(total)
        for m, v in terms.items():
            f[f"loss_terms/{m}"] = np_(v)
        for k, v in trace.items():
            f[f"intermediate/{k}"] = np_(v)
            f[f"intermediate_grads/{k}"] = np_(v.grad)
        g = args.fourier_grid
        f["intermediate/pos/image_input"] = np_(ref.image_input_pos_enc(cfg, g))
        f["intermediate/pos/audio_input"] = np_(ref.audio_input_pos_enc(cfg, g))
        f["intermediate/pos/image_query"] = np_(ref.image_query_pos_enc(cfg, points["image"], g))
        f["intermediate/pos/audio_query"] = np_(ref.audio_query_pos_enc(cfg, points["audio"], g))


def round_to_storage_dtype(model, args):
    """With F16/BF16 weights the C++ side sees the rounded values, so the reference must too."""
    half = {"F16": torch.float16, "BF16": torch.bfloat16}.get(args.safetensors_dtype if args.safetensors_out else "")
    if half is None:
        return
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(half).to(p.dtype))


def main(argv=None):
    args = parse_args(argv)
    cfg = effective_config(args)
    dtype = torch.float64 if args.double else torch.float32
    std = args.init_std if args.init_std is not None else (cfg.initializer_range if args.init == "hf" else 0.2)
    model = ref.PerceiverMMRef(cfg, grid=args.fourier_grid)
    ref.init_params(model, args.init, std, seed=args.seed)
    model.to(dtype)
    round_to_storage_dtype(model, args)
    gen = torch.Generator().manual_seed(args.seed + 1)     # data stream, separate from init
    inputs = make_inputs(cfg, args.batch, gen, dtype)
    masks = model.make_masks(args.batch, generator=gen)
    result = run(model, cfg, args, *inputs, masks)
    write_h5(args.out, args, cfg, model, inputs, masks, result)
    if args.hf_config_out:
        pcfg.dump_hf_json(cfg, args.hf_config_out, with_extras=True)
    if args.yaml_out:
        with open(args.yaml_out, "w") as f:
            f.write(preset_yaml(cfg))
    if args.safetensors_out:
        safetensors_io.save(dict(model.state_dict()), args.safetensors_out, args.safetensors_dtype,
                            metadata={"format": "pt"})
    total, terms = result[1], result[2]
    print(f"wrote {args.out}: params={ref.count_params(model)} loss={total.item():.6g} "
          + " ".join(f"{k}={v.item():.6g}" for k, v in terms.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
