#include "model/decoder_queries.h"

#include <algorithm>

#include "backend/cpu/cpu_reduce.h"
#include "model/fourier.h"

namespace perceiver {

std::vector<ParamSpec> decoder_query_param_specs(const ModelConfig& c) {
  const int64_t E = c.query_channels();
  auto emb = [](const char* name, int64_t width) { return ParamSpec{name, Shape{1, width}, ParamRole::kEmbedding, 0}; };
  return {emb("padding.audio", E - c.audio_pos_channels()), emb("padding.image", E - c.image_pos_channels()),
          emb("padding.label", E - c.label_trainable_num_channels),
          emb("modalities.label.decoder.output_position_encodings.position_embeddings", c.label_trainable_num_channels)};
}

template <class T>
DecoderQueryParams<T> DecoderQueryParams<T>::bind(const ParamBinder<T>& b) {
  return {b.param("padding.audio"), b.param("padding.image"), b.param("padding.label"),
          b.param("modalities.label.decoder.output_position_encodings.position_embeddings")};
}
template <class T>
DecoderQueryGrads<T> DecoderQueryGrads<T>::bind(const ParamBinder<T>& b) {
  return {b.grad("padding.audio"), b.grad("padding.image"), b.grad("padding.label"),
          b.grad("modalities.label.decoder.output_position_encodings.position_embeddings")};
}

template <class T>
void decoder_queries_forward(const ModelConfig& c, const DecoderQueryParams<T>& p, const OutputPoints& pts,
                             TensorView<T> q) {
  const int64_t B = q.shape[0], O = q.shape[1], E = q.shape[2];
  const int64_t na = int64_t(pts.audio.size()), ni = int64_t(pts.image.size());
  PCV_ASSERT(O == pts.count() && E == c.query_channels());
  std::vector<float> feats(std::max(na * c.audio_pos_channels(), ni * c.image_pos_channels()));
  T* q0 = q.data;  // batch item 0; the others are copies
  auto place = [&](int64_t row0, int64_t n, int64_t width, ConstView<T> pad) {
    for (int64_t i = 0; i < n; ++i) {
      T* row = q0 + (row0 + i) * E;
      for (int64_t j = 0; j < width; ++j) row[j] = T(feats[i * width + j]);
      std::copy(pad.data, pad.data + pad.numel(), row + width);
    }
  };
  auto apos = subsampled_positions({c.audio_tokens()}, pts.audio);
  fourier_features(apos.data(), na, 1, c.audio_fourier_num_bands, {c.audio_fourier_max_resolution}, feats.data(),
                   c.audio_pos_channels());
  place(0, na, c.audio_pos_channels(), p.pad_audio);
  auto ipos = subsampled_positions({c.num_frames, c.frame_height, c.frame_width}, pts.image);
  const auto& r = c.image_fourier_max_resolution;
  fourier_features(ipos.data(), ni, 3, c.image_fourier_num_bands, {r[0], r[1], r[2]}, feats.data(),
                   c.image_pos_channels());
  place(na, ni, c.image_pos_channels(), p.pad_image);
  T* label = q0 + (O - 1) * E;
  std::copy(p.label_query.data, p.label_query.data + p.label_query.numel(), label);
  std::copy(p.pad_label.data, p.pad_label.data + p.pad_label.numel(), label + c.label_trainable_num_channels);
  for (int64_t b = 1; b < B; ++b) std::copy(q0, q0 + O * E, q.data + b * O * E);
}

template <class T>
void decoder_queries_backward(const ModelConfig& c, const OutputPoints& pts, ConstView<T> dq,
                              const DecoderQueryGrads<T>& g) {
  const int64_t B = dq.shape[0], O = dq.shape[1], E = dq.shape[2];
  const int64_t na = int64_t(pts.audio.size()), ni = int64_t(pts.image.size());
  // Rows [row0, row0+n) of every batch item, columns [from, from+width).
  auto sum_rows = [&](int64_t row0, int64_t n, int64_t from, int64_t width, T* out) {
    cpu::detail::blocked_column_sum(
        B * n, width, [&](int64_t r, int64_t j) { return double(dq.data[((r / n) * O + row0 + r % n) * E + from + j]); },
        out);
  };
  sum_rows(0, na, c.audio_pos_channels(), E - c.audio_pos_channels(), g.pad_audio.data);
  sum_rows(na, ni, c.image_pos_channels(), E - c.image_pos_channels(), g.pad_image.data);
  sum_rows(O - 1, 1, c.label_trainable_num_channels, E - c.label_trainable_num_channels, g.pad_label.data);
  sum_rows(O - 1, 1, 0, c.label_trainable_num_channels, g.label_query.data);
}

#define PCV_INSTANTIATE(T)                                                                             \
  template struct DecoderQueryParams<T>;                                                               \
  template struct DecoderQueryGrads<T>;                                                                \
  template void decoder_queries_forward<T>(const ModelConfig&, const DecoderQueryParams<T>&,           \
                                           const OutputPoints&, TensorView<T>);                        \
  template void decoder_queries_backward<T>(const ModelConfig&, const OutputPoints&, ConstView<T>,     \
                                            const DecoderQueryGrads<T>&);
PCV_INSTANTIATE(float)
PCV_INSTANTIATE(double)
#undef PCV_INSTANTIATE

}  // namespace perceiver
