// Multimodal decoder queries (spec §4.1-4.2): for the subsampled output points of each modality,
//   audio  Fourier(−1 + 2j/n_patches)                | padding.audio
//   image  Fourier((t,y,x) → −1 + 2i/s over T×H×W)   | padding.image
//   label  trainable query [1, label_q]              | padding.label
// concatenated in sorted order into q [O, E] (the same for every batch item) and broadcast to
// [B, O, E]. The backend's queries op builds q from per-axis Fourier tables uploaded once
// (op_params.h QueryDims). HF names: perceiver.decoder.padding.{audio,image,label} and
// perceiver.decoder.modalities.label.decoder.output_position_encodings.position_embeddings.
#pragma once

#include <vector>

#include "core/context.h"
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

/// Relative to "perceiver.decoder.": the trainable label query (HF registers it before the
/// decoder's attention) and the three paddings (registered after it).
ParamSpec label_query_param_spec(const ModelConfig& cfg);
std::vector<ParamSpec> query_padding_param_specs(const ModelConfig& cfg);

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

/// The per-axis Fourier tables of the output positions (audio patches; frames, rows, columns of
/// pixels), computed once on the host and uploaded.
struct QueryTables {
  FourierAxes audio_axes, image_axes;
  Arena<float> audio;    // [audio_tokens, 1 + 2·K_audio]
  Arena<float> image[3];  // [T | H | W, 1 + 2·K_image]
  QueryTables(Backend& backend, const ModelConfig& cfg);
};

/// The queries op's dimensions for a batch of B and the points' counts.
QueryDims query_dims(const ModelConfig& cfg, const QueryTables& tables, int64_t batch, int64_t num_audio,
                     int64_t num_image);

/// Writes q [B, O, E] for the points whose indices are on the device (audio [Pa], image [Pi]).
template <class T>
void decoder_queries_forward(const QueryDims& d, const QueryTables& tables, const DecoderQueryParams<T>& p,
                             const int64_t* audio_points, const int64_t* image_points, TensorView<T> q,
                             Context<T>& ctx);

/// dq [B, O, E] -> padding and label-query gradients (+=).
template <class T>
void decoder_queries_backward(const QueryDims& d, ConstView<T> dq, const DecoderQueryGrads<T>& g, Context<T>& ctx);

}  // namespace perceiver
