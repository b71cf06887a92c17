#include "model/decoder_queries.h"

#include "model/fourier.h"

namespace perceiver {
namespace {

const char* kLabelQuery = "modalities.label.decoder.output_position_encodings.position_embeddings";

ParamSpec embedding(const char* name, int64_t width) { return {name, Shape{1, width}, ParamRole::kEmbedding, 0}; }

}  // namespace

ParamSpec label_query_param_spec(const ModelConfig& c) { return embedding(kLabelQuery, c.label_trainable_num_channels); }

std::vector<ParamSpec> query_padding_param_specs(const ModelConfig& c) {
  const int64_t E = c.query_channels();
  return {embedding("padding.audio", E - c.audio_pos_channels()), embedding("padding.image", E - c.image_pos_channels()),
          embedding("padding.label", E - c.label_trainable_num_channels)};
}

template <class T>
DecoderQueryParams<T> DecoderQueryParams<T>::bind(const ParamBinder<T>& b) {
  return {b.param("padding.audio"), b.param("padding.image"), b.param("padding.label"), b.param(kLabelQuery)};
}
template <class T>
DecoderQueryGrads<T> DecoderQueryGrads<T>::bind(const ParamBinder<T>& b) {
  return {b.grad("padding.audio"), b.grad("padding.image"), b.grad("padding.label"), b.grad(kLabelQuery)};
}

QueryTables::QueryTables(Backend& backend, const ModelConfig& c) {
  audio_axes.d = 1;
  audio_axes.dims[0] = c.audio_tokens();
  audio_axes.bands = c.audio_fourier_num_bands;
  const auto a = decoder_axis_table(c.audio_tokens(), c.audio_fourier_num_bands, c.audio_fourier_max_resolution);
  audio = Arena<float>(backend, a.size());
  audio.upload(a.data(), a.size());
  image_axes.d = 3;
  image_axes.bands = c.image_fourier_num_bands;
  const int64_t dims[3] = {c.num_frames, c.frame_height, c.frame_width};
  for (int j = 0; j < 3; ++j) {
    image_axes.dims[j] = dims[j];
    const auto t = decoder_axis_table(dims[j], c.image_fourier_num_bands, c.image_fourier_max_resolution[size_t(j)]);
    image[j] = Arena<float>(backend, t.size());
    image[j].upload(t.data(), t.size());
  }
}

QueryDims query_dims(const ModelConfig& c, const QueryTables& tables, int64_t B, int64_t num_audio, int64_t num_image) {
  QueryDims d;
  d.batch = B;
  d.num_audio = num_audio;
  d.num_image = num_image;
  d.channels = c.query_channels();
  d.label_channels = c.label_trainable_num_channels;
  d.audio = tables.audio_axes;
  d.image = tables.image_axes;
  return d;
}

template <class T>
void decoder_queries_forward(const QueryDims& d, const QueryTables& tables, const DecoderQueryParams<T>& p,
                             const int64_t* audio_points, const int64_t* image_points, TensorView<T> q,
                             Context<T>& ctx) {
  PCV_ASSERT(q.shape[0] == d.batch && q.shape[1] == d.rows() && q.shape[2] == d.channels);
  QueryArgs<T> a;
  a.audio_points = audio_points;
  a.image_points = image_points;
  a.audio_axis = tables.audio.data();
  for (int j = 0; j < 3; ++j) a.image_axes[j] = tables.image[j].data();
  a.pad_audio = p.pad_audio.data, a.pad_image = p.pad_image.data, a.pad_label = p.pad_label.data;
  a.label_query = p.label_query.data;
  ctx.k.queries_forward(d, a, q.data);
}

template <class T>
void decoder_queries_backward(const QueryDims& d, ConstView<T> dq, const DecoderQueryGrads<T>& g, Context<T>& ctx) {
  ctx.k.queries_backward(d, dq.data, QueryGrads<T>{g.pad_audio.data, g.pad_image.data, g.pad_label.data, g.label_query.data});
}

#define PCV_INSTANTIATE(T)                                                                                   \
  template struct DecoderQueryParams<T>;                                                                     \
  template struct DecoderQueryGrads<T>;                                                                      \
  template void decoder_queries_forward<T>(const QueryDims&, const QueryTables&, const DecoderQueryParams<T>&, \
                                           const int64_t*, const int64_t*, TensorView<T>, Context<T>&);      \
  template void decoder_queries_backward<T>(const QueryDims&, ConstView<T>, const DecoderQueryGrads<T>&,     \
                                            Context<T>&);
PCV_INSTANTIATE(float)
PCV_INSTANTIATE(double)
#undef PCV_INSTANTIATE

}  // namespace perceiver
