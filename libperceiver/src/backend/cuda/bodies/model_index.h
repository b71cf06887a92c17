// The model ops as functions of one output element (op_params.h): the multimodal input array,
// the padding / mask-token gradient slots, the decoder queries and the reconstruction targets.
// One GPU thread evaluates one element; the CPU test evaluates every element with the same
// function and compares with the CPU backend's loops.
#pragma once

#include "backend/cuda/bodies/hd.h"
#include "perceiver/op_params.h"

namespace perceiver::cuda::body {

// Space-to-depth: channel c of image token (t, h, w) is video[t·dt+ti, h·sd+j, w·sd+k, ch] with
// c enumerating (ti, j, k, ch) in that order (backend/cpu image_patch).
PCV_HD float image_patch_value(const EmbedDims& d, const float* clip, int64_t i, int64_t c) {
  const int64_t sd = d.spatial_downsample, dt = d.temporal_downsample;
  const int64_t gh = d.height / sd, gw = d.width / sd;
  const int64_t t = i / (gh * gw), h = (i / gw) % gh, w = i % gw;
  const int64_t ti = c / (sd * sd * 3), rem = c % (sd * sd * 3), j = rem / (sd * 3), k = rem % (sd * 3);
  return clip[(((t * dt + ti) * d.height + h * sd + j) * d.width + w * sd) * 3 + k];
}

/// x[bt, c] of the input array x [B·M, C] (EmbedDims): content | Fourier position | padding, or
/// the modality's mask token where mask[bt] is set.
PCV_HD float embed_value(const EmbedDims& d, const EmbedArgs<float>& a, int64_t bt, int64_t c) {
  const int64_t b = bt / d.tokens, tok = bt % d.tokens;
  const int64_t spp = d.samples_per_patch, label_begin = d.audio_tokens + d.image_tokens;
  const bool masked = a.mask[bt] != 0;
  if (tok < d.audio_tokens) {
    if (masked) return a.mask_audio[c];
    if (c < spp) return a.audio[b * d.audio_samples + tok * spp + c];
    if (c < spp + d.audio_pos) return a.pos_audio[tok * d.audio_pos + (c - spp)];
    return a.pad_audio[c - spp - d.audio_pos];
  }
  if (tok < label_begin) {
    if (masked) return a.mask_image[c];
    const int64_t i = tok - d.audio_tokens;
    const int64_t pv = 3 * d.temporal_downsample * d.spatial_downsample * d.spatial_downsample;
    if (c < pv) return image_patch_value(d, a.video + b * d.frames * d.height * d.width * 3, i, c);
    if (c < pv + d.image_pos) return a.pos_image[i * d.image_pos + (c - pv)];
    return a.pad_image[c - pv - d.image_pos];
  }
  if (masked) return a.mask_label[c];
  if (c < d.num_labels) return c == a.labels[b] ? 1.f : 0.f;
  return a.pad_label[c - d.num_labels];
}

/// Modality of token `tok`: 0 audio, 1 image, 2 label.
PCV_HD int embed_modality(const EmbedDims& d, int64_t tok) {
  return tok < d.audio_tokens ? 0 : tok < d.audio_tokens + d.image_tokens ? 1 : 2;
}

/// First padding channel of a modality's rows.
PCV_HD int64_t embed_pad_from(const EmbedDims& d, int m) {
  const int64_t pv = 3 * d.temporal_downsample * d.spatial_downsample * d.spatial_downsample;
  return m == 0 ? d.samples_per_patch + d.audio_pos : m == 1 ? pv + d.image_pos : d.num_labels;
}

/// Which of the six sums [pad audio, pad image, pad label, mask audio, mask image, mask label]
/// element (row, j) of dx feeds: the whole row of a masked token goes to its mask token, the
/// padding channels of an unmasked one to its padding; −1 for content and position channels.
PCV_HD int embed_grad_slot(const EmbedDims& d, bool masked, int64_t row, int64_t j) {
  const int m = embed_modality(d, row % d.tokens);
  if (masked) return 3 + m;
  return j >= embed_pad_from(d, m) ? m : -1;
}

/// Fourier features of output point `point` on the axes `ax`, channel `col` < d + 2·d·K
/// (FourierAxes): [pos (d) | sin (d·K) | cos (d·K)] from the per-axis tables t0..t2.
PCV_HD float fourier_value(const FourierAxes& ax, const float* t0, const float* t1, const float* t2, int64_t point,
                           int64_t col) {
  const int64_t nd = ax.d, K = ax.bands;
  int64_t j = 0, entry = 0;  // axis and the entry of its table row
  if (col < nd) {
    j = col;
  } else if (col < nd + nd * K) {
    j = (col - nd) / K, entry = 1 + (col - nd) % K;
  } else {
    j = (col - nd - nd * K) / K, entry = 1 + K + (col - nd - nd * K) % K;
  }
  // Coordinate j of the point: row-major over dims[0..nd), the last axis fastest.
  int64_t inner = 1;
  for (int64_t a = nd - 1; a > j; --a) inner *= a == 2 ? ax.dims[2] : ax.dims[1];
  const int64_t dim_j = j == 0 ? ax.dims[0] : j == 1 ? ax.dims[1] : ax.dims[2];
  const int64_t coord = (point / inner) % dim_j;
  const float* table = j == 0 ? t0 : j == 1 ? t1 : t2;
  return table[coord * (1 + 2 * K) + entry];
}

/// q[row, col] of one batch item's decoder queries [O, E] (QueryDims): audio points, image
/// points, then the label query; [Fourier features | padding] or [label query | padding].
PCV_HD float query_value(const QueryDims& d, const QueryArgs<float>& a, int64_t row, int64_t col) {
  const int64_t wa = d.audio.d + 2 * d.audio.d * d.audio.bands, wi = d.image.d + 2 * d.image.d * d.image.bands;
  if (row < d.num_audio) {
    if (col < wa) return fourier_value(d.audio, a.audio_axis, a.audio_axis, a.audio_axis, a.audio_points[row], col);
    return a.pad_audio[col - wa];
  }
  if (row < d.num_audio + d.num_image) {
    if (col < wi)
      return fourier_value(d.image, a.image_axes[0], a.image_axes[1], a.image_axes[2],
                           a.image_points[row - d.num_audio], col);
    return a.pad_image[col - wi];
  }
  if (col < d.label_channels) return a.label_query[col];
  return a.pad_label[col - d.label_channels];
}

/// Source index of image target element e of [B, Pi, 3] in the video [B, T·H·W, 3].
PCV_HD int64_t image_target_source(const TargetDims& d, const int64_t* image_points, int64_t e) {
  const int64_t b = e / (d.num_image * 3), i = (e / 3) % d.num_image, ch = e % 3;
  return b * d.pixels * 3 + image_points[i] * 3 + ch;
}

/// Source index of audio target element e of [B, Pa·spp] in the audio [B, S].
PCV_HD int64_t audio_target_source(const TargetDims& d, const int64_t* audio_points, int64_t e) {
  const int64_t spp = d.samples_per_patch, per = d.num_audio * spp;
  const int64_t b = e / per, i = (e % per) / spp, s = e % spp;
  return b * d.audio_samples + audio_points[i] * spp + s;
}

}  // namespace perceiver::cuda::body
