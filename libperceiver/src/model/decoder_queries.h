// Multimodal decoder queries (spec §4.1-4.2): for the subsampled output points of each modality,
//   audio  Fourier(−1 + 2j/n_patches)                | padding.audio
//   image  Fourier((t,y,x) → −1 + 2i/s over T×H×W)   | padding.image
//   label  trainable query [1, label_q]              | padding.label
// concatenated in sorted order into q [O, E] (the same for every batch item) and broadcast to
// [B, O, E]. HF names: perceiver.decoder.padding.{audio,image,label} and
// perceiver.decoder.modalities.label.decoder.output_position_encodings.position_embeddings.
#pragma once

#include <vector>

#include "core/params.h"
#include "layers/bind.h"
#include "perceiver/config.h"

namespace perceiver {

/// The output points of one decoding pass, shared by the whole batch.
struct OutputPoints {
  std::vector<int64_t> image;  // flat indices into T×H×W (row-major)
  std::vector<int64_t> audio;  // audio patch indices
  int64_t count() const { return int64_t(image.size() + audio.size()) + 1; }  // + the label query
};

/// Parameter names relative to "perceiver.decoder.".
std::vector<ParamSpec> decoder_query_param_specs(const ModelConfig& cfg);

template <class T>
struct DecoderQueryParams {
  ConstView<T> pad_audio, pad_image, pad_label, label_query;
  static DecoderQueryParams bind(const ParamBinder<T>& b);
};
template <class T>
struct DecoderQueryGrads {
  TensorView<T> pad_audio, pad_image, pad_label, label_query;
  static DecoderQueryGrads bind(const ParamBinder<T>& b);
};

/// Writes q [B, O, E].
template <class T>
void decoder_queries_forward(const ModelConfig& cfg, const DecoderQueryParams<T>& p, const OutputPoints& pts,
                             TensorView<T> q);

/// dq [B, O, E] -> padding and label-query gradients (+=).
template <class T>
void decoder_queries_backward(const ModelConfig& cfg, const OutputPoints& pts, ConstView<T> dq,
                              const DecoderQueryGrads<T>& g);

}  // namespace perceiver
