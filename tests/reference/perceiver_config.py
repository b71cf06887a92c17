#!/usr/bin/python3
"""Model configuration for the PyTorch reference of the Perceiver IO multimodal autoencoder.

One flat dataclass, `MMConfig`, holds every shape and option of the model. It can be built from
  * our YAML presets (`configs/*.yaml`, top-level `model:` mapping), which the C++ side reads too, or
  * an HF-style `config.json` of `PerceiverForMultimodalAutoencoding` (e.g. deepmind/multimodal-perceiver).

Field names are HF's `PerceiverConfig` names where HF has one. The extra fields are the values HF
hard-codes inside `PerceiverForMultimodalAutoencoding.__init__` (Fourier bands, downsampling, padding
sizes, mask probabilities, decoder heads) plus the training-time query counts; their defaults are the
HF hard-coded values, so an HF config.json without them yields exactly the HF model.

Shape legend: T frames, H/W frame size, S audio samples, L labels, C input width, E query width.
"""
import dataclasses
import json
from typing import List, Optional

import yaml

# HF PerceiverConfig keys that describe this model. Everything else in an HF config.json
# (vocab_size, train_size, id2label, ...) is ignored here.
HF_KEYS = (
    "num_latents", "d_latents", "d_model", "num_blocks", "num_self_attends_per_block",
    "num_self_attention_heads", "num_cross_attention_heads", "qk_channels", "v_channels",
    "cross_attention_shape_for_attention", "self_attention_widening_factor",
    "cross_attention_widening_factor", "hidden_act", "attention_probs_dropout_prob",
    "initializer_range", "use_query_residual", "num_labels", "image_size", "num_frames",
    "audio_samples_per_frame", "samples_per_patch", "output_shape", "output_num_channels",
    "_label_trainable_num_channels",
)


@dataclasses.dataclass
class MMConfig:
    # ---- HF PerceiverConfig fields (defaults = the released kinetics700 model) ----
    num_latents: int = 784
    d_latents: int = 512
    d_model: int = 704                      # must equal the computed input width C (HF ignores it)
    num_blocks: int = 1                     # the self-attention block is applied this many times (shared weights)
    num_self_attends_per_block: int = 8
    num_self_attention_heads: int = 8
    num_cross_attention_heads: int = 1      # encoder cross-attention only
    qk_channels: Optional[int] = None       # encoder cross- and self-attention; None = spec §2.2 defaults
    v_channels: Optional[int] = None
    cross_attention_shape_for_attention: str = "kv"   # also used by the decoder cross-attention
    self_attention_widening_factor: int = 1
    cross_attention_widening_factor: int = 1
    hidden_act: str = "gelu"                # "gelu" (erf, HF) or "gelu_new" (tanh, DeepMind)
    attention_probs_dropout_prob: float = 0.0   # reference supports 0 only (== HF eval())
    initializer_range: float = 0.02
    use_query_residual: bool = True         # encoder cross-attention only
    num_labels: int = 700
    image_size: int = 56                    # patch-grid size; only used as the image Fourier max_resolution
    num_frames: int = 16
    audio_samples_per_frame: int = 1920
    samples_per_patch: int = 16
    output_shape: List[int] = dataclasses.field(default_factory=lambda: [1, 16, 224, 224])
    output_num_channels: int = 512
    _label_trainable_num_channels: int = 1024
    # ---- extras: values HF hard-codes in PerceiverForMultimodalAutoencoding ----
    frame_height: int = 224
    frame_width: int = 224
    spatial_downsample: int = 4
    temporal_downsample: int = 1
    image_fourier_num_bands: int = 32
    image_fourier_max_resolution: Optional[List[int]] = None   # None -> [num_frames, image_size, image_size]
    audio_fourier_num_bands: int = 192
    audio_fourier_max_resolution: Optional[int] = None         # None -> num_frames * audio_samples_per_frame
    input_min_padding_size: int = 4
    decoder_min_padding_size: int = 2
    decoder_num_heads: int = 1
    decoder_widening_factor: int = 1
    decoder_use_query_residual: bool = False
    ln_eps: float = 1e-5                    # the eps actually used (HF's layer_norm_eps=1e-12 is dead)
    mask_prob_image: float = 0.0
    mask_prob_audio: float = 0.0
    mask_prob_label: float = 1.0
    num_queries_image: int = 512            # training-time subsampled decoder queries
    num_queries_audio: int = 512            # audio *patches* (each gives samples_per_patch samples)

    # ---- derived sizes (spec §10 formula check) ----
    @property
    def n_audio_samples(self):              # S
        return self.num_frames * self.audio_samples_per_frame

    @property
    def n_audio_tokens(self):
        return self.n_audio_samples // self.samples_per_patch

    @property
    def image_grid(self):                   # (T', H', W') after space-to-depth
        return (self.num_frames // self.temporal_downsample,
                self.frame_height // self.spatial_downsample,
                self.frame_width // self.spatial_downsample)

    @property
    def n_image_tokens(self):
        t, h, w = self.image_grid
        return t * h * w

    @property
    def n_pixels(self):                     # decoder image index space (T, H, W)
        return self.num_frames * self.frame_height * self.frame_width

    @property
    def image_max_res(self):
        r = self.image_fourier_max_resolution
        return list(r) if r is not None else [self.num_frames, self.image_size, self.image_size]

    @property
    def audio_max_res(self):
        r = self.audio_fourier_max_resolution
        return int(r) if r is not None else self.n_audio_samples

    @property
    def image_pos_channels(self):           # 3 + 6K
        return 3 + 2 * 3 * self.image_fourier_num_bands

    @property
    def audio_pos_channels(self):           # 1 + 2K
        return 1 + 2 * self.audio_fourier_num_bands

    @property
    def image_in_channels(self):            # c_img = 48*dt + 3 + 6K for sd=4
        return 3 * self.temporal_downsample * self.spatial_downsample ** 2 + self.image_pos_channels

    @property
    def audio_in_channels(self):            # c_aud = spp + 1 + 2K
        return self.samples_per_patch + self.audio_pos_channels

    @property
    def input_channels(self):               # C
        return max(self.image_in_channels, self.audio_in_channels, self.num_labels) + self.input_min_padding_size

    @property
    def query_channels(self):               # E
        return max(self.image_pos_channels, self.audio_pos_channels,
                   self._label_trainable_num_channels) + self.decoder_min_padding_size

    @property
    def mask_probs(self):
        return {"audio": self.mask_prob_audio, "image": self.mask_prob_image, "label": self.mask_prob_label}

    def validate(self):
        """Resolve derived defaults; reject configs HF would mis-handle or crash on (spec §3.2, §10)."""
        # Resolve the HF-derived defaults so equal models compare equal.
        if self.image_fourier_max_resolution is None:
            self.image_fourier_max_resolution = [self.num_frames, self.image_size, self.image_size]
        if self.audio_fourier_max_resolution is None:
            self.audio_fourier_max_resolution = self.n_audio_samples

        def need(cond, msg):
            if not cond:
                raise ValueError(f"invalid perceiver config: {msg}")
        need(self.frame_height % self.spatial_downsample == 0 and self.frame_width % self.spatial_downsample == 0,
             "frame size must be divisible by spatial_downsample")
        need(self.num_frames % self.temporal_downsample == 0, "num_frames % temporal_downsample != 0")
        need(self.num_frames // self.temporal_downsample >= 2,
             "T/temporal_downsample must be >= 2 (HF squeezes a single time step)")
        need(self.n_audio_samples % self.samples_per_patch == 0, "audio samples % samples_per_patch != 0")
        need(self.d_model == self.input_channels,
             f"d_model={self.d_model} but the preprocessed input width is {self.input_channels}")
        need(self.d_latents % self.num_self_attention_heads == 0, "d_latents % self heads != 0")
        need(self.d_latents % self.num_cross_attention_heads == 0, "d_latents % cross heads != 0")
        need(self.hidden_act in ("gelu", "gelu_new"), f"hidden_act {self.hidden_act!r} not gelu|gelu_new")
        need(self.cross_attention_shape_for_attention in ("q", "kv"), "cross_attention_shape_for_attention not q|kv")
        need(self.attention_probs_dropout_prob == 0.0, "the reference has no dropout; set attention_probs_dropout_prob 0")
        need(list(self.output_shape[1:]) == [self.num_frames, self.frame_height, self.frame_width],
             f"output_shape {self.output_shape} != [1, num_frames, frame_height, frame_width]")
        need(len(self.image_max_res) == 3, "image_fourier_max_resolution needs 3 entries (t, h, w)")
        for m, p in self.mask_probs.items():
            need(0.0 <= p <= 1.0, f"mask_prob_{m} outside [0, 1]")
        need(0 <= self.num_queries_image <= self.n_pixels, "num_queries_image out of range")
        need(0 <= self.num_queries_audio <= self.n_audio_tokens, "num_queries_audio out of range")
        return self


_FIELDS = {f.name: f for f in dataclasses.fields(MMConfig)}


def from_dict(d, strict=True):
    """Build a config from a flat mapping of field names. Unknown keys raise if strict."""
    unknown = sorted(set(d) - set(_FIELDS))
    if strict and unknown:
        raise ValueError(f"unknown config keys: {unknown}")
    return MMConfig(**{k: v for k, v in d.items() if k in _FIELDS}).validate()


def from_yaml(path):
    """Our preset format: `model:` mapping of MMConfig fields (see configs/kinetics700.yaml)."""
    with open(path) as f:
        doc = yaml.safe_load(f)
    if not isinstance(doc, dict) or not isinstance(doc.get("model"), dict):
        raise ValueError(f"{path}: expected a top-level 'model:' mapping")
    missing = sorted(set(_FIELDS) - set(doc["model"]))
    if missing:
        raise ValueError(f"{path}: missing keys {missing} (presets list every key)")
    return from_dict(doc["model"], strict=True)


def from_hf_dict(hf):
    """HF config.json dict -> MMConfig. HF-absent extras take HF's hard-coded values.

    num_labels: HF's save_pretrained writes id2label (num_labels = its length), not num_labels.
    attention_probs_dropout_prob: HF's hub value 0.1 only acts in train(); the reference models
    HF in eval(), so it is forced to 0 here. layer_norm_eps (1e-12) is unused by HF's layers.
    Our extra keys, if present in the JSON, override the hard-coded values (HF itself ignores them).
    """
    d = {k: hf[k] for k in HF_KEYS if k in hf}
    if "id2label" in hf:
        d["num_labels"] = len(hf["id2label"])
    d["attention_probs_dropout_prob"] = 0.0
    extras = {k: hf[k] for k in _FIELDS if k not in HF_KEYS and k in hf}
    d.update(extras)
    shape = d.get("output_shape", MMConfig().output_shape)
    d.setdefault("frame_height", shape[2])
    d.setdefault("frame_width", shape[3])
    return from_dict(d, strict=True)


def from_hf_json(path):
    with open(path) as f:
        return from_hf_dict(json.load(f))


def load(path):
    """Dispatch on the file extension: .yaml/.yml are presets, .json is an HF config."""
    return from_hf_json(path) if str(path).endswith(".json") else from_yaml(path)


def to_hf_dict(cfg, with_extras=True, hub_dropout=False):
    """MMConfig -> HF-style config.json dict. id2label carries num_labels, as HF writes it.

    with_extras adds our non-HF keys so the file round-trips configs HF cannot express
    (e.g. tiny's 2 Fourier bands); HF's own class ignores them.
    """
    d = {"architectures": ["PerceiverForMultimodalAutoencoding"], "model_type": "perceiver"}
    for k in HF_KEYS:
        if k != "num_labels":
            d[k] = getattr(cfg, k)
    d["attention_probs_dropout_prob"] = 0.1 if hub_dropout else cfg.attention_probs_dropout_prob
    d["layer_norm_eps"] = 1e-12             # HF default, unused by the model
    d["id2label"] = {str(i): f"LABEL_{i}" for i in range(cfg.num_labels)}
    d["label2id"] = {f"LABEL_{i}": i for i in range(cfg.num_labels)}
    d["torch_dtype"] = "float32"
    if with_extras:
        for k in _FIELDS:
            if k not in HF_KEYS:
                d[k] = getattr(cfg, k)
    return d


def dump_hf_json(cfg, path, **kw):
    with open(path, "w") as f:
        json.dump(to_hf_dict(cfg, **kw), f, indent=2)
        f.write("\n")


def to_flat_dict(cfg):
    return dataclasses.asdict(cfg)
