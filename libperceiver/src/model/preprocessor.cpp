#include "model/preprocessor.h"

#include "model/fourier.h"

namespace perceiver {

std::vector<ParamSpec> preprocessor_param_specs(const ModelConfig& c) {
  const int64_t C = c.input_channels();
  auto emb = [](const char* name, int64_t width) { return ParamSpec{name, Shape{1, width}, ParamRole::kEmbedding, 0}; };
  return {emb("padding.audio", C - c.audio_in_channels()), emb("padding.image", C - c.image_in_channels()),
          emb("padding.label", C - c.num_labels),          emb("mask.audio", C),
          emb("mask.image", C),                              emb("mask.label", C)};
}

template <class T>
PreprocessorParams<T> PreprocessorParams<T>::bind(const ParamBinder<T>& b) {
  return {b.param("padding.audio"), b.param("padding.image"), b.param("padding.label"),
          b.param("mask.audio"),    b.param("mask.image"),    b.param("mask.label")};
}
template <class T>
PreprocessorGrads<T> PreprocessorGrads<T>::bind(const ParamBinder<T>& b) {
  return {b.grad("padding.audio"), b.grad("padding.image"), b.grad("padding.label"),
          b.grad("mask.audio"),    b.grad("mask.image"),    b.grad("mask.label")};
}

PositionTables::PositionTables(Backend& backend, const ModelConfig& c)
    : audio(backend, size_t(c.audio_tokens() * c.audio_pos_channels())),
      image(backend, size_t(c.image_tokens() * c.image_pos_channels())) {
  std::vector<float> host(audio.size());
  fourier_grid_features({c.audio_tokens()}, c.audio_fourier_num_bands, {c.audio_fourier_max_resolution}, host.data(),
                        c.audio_pos_channels());
  audio.upload(host.data(), host.size());
  host.assign(image.size(), 0.f);
  const auto& r = c.image_fourier_max_resolution;
  fourier_grid_features({c.image_grid_t(), c.image_grid_h(), c.image_grid_w()}, c.image_fourier_num_bands,
                        {r[0], r[1], r[2]}, host.data(), c.image_pos_channels());
  image.upload(host.data(), host.size());
}

EmbedDims embed_dims(const ModelConfig& c, int64_t B) {
  EmbedDims d;
  d.batch = B;
  d.tokens = c.input_tokens();
  d.channels = c.input_channels();
  d.audio_tokens = c.audio_tokens();
  d.samples_per_patch = c.samples_per_patch;
  d.audio_samples = c.audio_samples();
  d.audio_pos = c.audio_pos_channels();
  d.image_tokens = c.image_tokens();
  d.frames = c.num_frames;
  d.height = c.frame_height;
  d.width = c.frame_width;
  d.spatial_downsample = c.spatial_downsample;
  d.temporal_downsample = c.temporal_downsample;
  d.image_pos = c.image_pos_channels();
  d.num_labels = c.num_labels;
  return d;
}

namespace {

template <class T>
EmbedArgs<T> embed_args(const PositionTables& pos, const PreprocessorParams<T>& p, const T* video, const T* audio,
                        const int64_t* labels, const uint8_t* mask) {
  EmbedArgs<T> a;
  a.video = video, a.audio = audio, a.labels = labels, a.mask = mask;
  a.pos_audio = pos.audio.data(), a.pos_image = pos.image.data();
  a.pad_audio = p.pad_audio.data, a.pad_image = p.pad_image.data, a.pad_label = p.pad_label.data;
  a.mask_audio = p.mask_audio.data, a.mask_image = p.mask_image.data, a.mask_label = p.mask_label.data;
  return a;
}

// How many rows of x [B·M, C] `rows` holds, from row0 on; they must lie inside x.
template <class T>
int64_t input_rows(const ModelConfig& c, int64_t batch, int64_t row0, TensorView<T> rows) {
  const int64_t n = rows.numel() / c.input_channels();
  PCV_ASSERT(rows.cols() == c.input_channels() && row0 >= 0 && row0 + n <= batch * c.input_tokens());
  return n;
}

}  // namespace

template <class T>
void preprocessor_forward_rows(const ModelConfig& c, const PositionTables& pos, const PreprocessorParams<T>& p,
                               const T* video, const T* audio, const int64_t* labels, const uint8_t* mask,
                               int64_t batch, int64_t row0, TensorView<T> x_rows, Context<T>& ctx) {
  const int64_t n = input_rows(c, batch, row0, x_rows);
  ctx.k.embed_forward(embed_dims(c, batch), embed_args(pos, p, video, audio, labels, mask), row0, n, x_rows.data);
}

template <class T>
void preprocessor_forward_normalised_rows(const ModelConfig& c, const PositionTables& pos,
                                          const PreprocessorParams<T>& p, const T* video, const T* audio,
                                          const int64_t* labels, const uint8_t* mask, int64_t batch, int64_t row0,
                                          const LayerNormParams<T>& p_norm, double eps, TensorView<T> y,
                                          uint16_t* y16, T* mean, T* rstd, Context<T>& ctx) {
  const int64_t n = input_rows(c, batch, row0, y);
  ctx.k.embed_layer_norm_forward(embed_dims(c, batch), embed_args(pos, p, video, audio, labels, mask), row0, n,
                                 p_norm.weight.data, p_norm.bias.data, eps, y.data, y16, mean, rstd);
}

EmbedFactors input_factors(const ModelConfig& c, int64_t batch) {
  const EmbedDims d = embed_dims(c, batch);
  const EmbedFactors f = EmbedFactors::of(d);
  return f.saves(d) ? f : EmbedFactors{};
}

int64_t input_factor_columns(const ModelConfig& c, int64_t batch, int64_t token0, int64_t n) {
  const EmbedDims d = embed_dims(c, batch);
  return EmbedFactors::of(d).columns(d, token0, token0 + n);
}

template <class T>
void preprocessor_forward_factors(const ModelConfig& c, const PositionTables& pos, const PreprocessorParams<T>& p,
                                  const T* video, const T* audio, const int64_t* labels, const uint8_t* mask,
                                  int64_t batch, int64_t row0, double eps, TensorView<T> f, uint16_t* f16, T* mean,
                                  T* rstd, Context<T>& ctx) {
  const EmbedDims d = embed_dims(c, batch);
  const int64_t n = f.numel() / EmbedFactors::of(d).width;
  PCV_ASSERT(f.cols() == EmbedFactors::of(d).width && row0 >= 0 && row0 + n <= batch * c.input_tokens());
  ctx.k.embed_norm_factors(d, embed_args(pos, p, video, audio, labels, mask), row0, n, eps, f.data, f16, mean, rstd);
}

template <class T>
void preprocessor_factor_matrix(const ModelConfig& c, const PreprocessorParams<T>& p, const int64_t* labels,
                                int64_t batch, TensorView<T> m, Context<T>& ctx) {
  const EmbedDims d = embed_dims(c, batch);
  PCV_ASSERT(m.shape == (Shape{batch, EmbedFactors::of(d).width, c.input_channels()}));
  EmbedArgs<T> a;  // the parameters and labels only
  a.labels = labels;
  a.pad_audio = p.pad_audio.data, a.pad_image = p.pad_image.data, a.pad_label = p.pad_label.data;
  a.mask_audio = p.mask_audio.data, a.mask_image = p.mask_image.data, a.mask_label = p.mask_label.data;
  ctx.k.embed_factor_matrix(d, a, m.data);
}

template <class T>
void preprocessor_backward_rows(const ModelConfig& c, int64_t B, const uint8_t* mask, int64_t row0, ConstView<T> dx,
                                const PreprocessorGrads<T>& g, Context<T>& ctx) {
  const EmbedGrads<T> eg{g.pad_audio.data, g.pad_image.data, g.pad_label.data,
                         g.mask_audio.data, g.mask_image.data, g.mask_label.data};
  ctx.k.embed_backward_rows(embed_dims(c, B), mask, row0, dx.rows(), dx.data, eg);
}

void input_grad_groups(const ModelConfig& c, int64_t batch, const std::vector<uint8_t>& mask,
                       std::vector<uint8_t>& ids) {
  const ModalityLayout lay(c);
  const int64_t M = c.input_tokens();
  PCV_CHECK(int64_t(mask.size()) == batch * M, "mask has ", mask.size(), " entries, expected ", batch * M);
  ids.resize(mask.size());
  for (int64_t r = 0; r < batch * M; ++r) {
    const int64_t tok = r % M;
    const int m = tok < lay.image_begin ? 0 : tok < lay.label_begin ? 1 : 2;
    ids[size_t(r)] = uint8_t(m + (mask[size_t(r)] ? 3 : 0));
  }
}

template <class T>
void preprocessor_backward_sums(const ModelConfig& c, ConstView<T> sums, const PreprocessorGrads<T>& g,
                                Context<T>& ctx) {
  const int64_t C = c.input_channels();
  PCV_ASSERT(sums.shape == (Shape{kInputGradGroups, C}));
  const int64_t content[3] = {c.audio_in_channels(), c.image_in_channels(), c.num_labels};
  const TensorView<T> pads[3] = {g.pad_audio, g.pad_image, g.pad_label};
  const TensorView<T> masks[3] = {g.mask_audio, g.mask_image, g.mask_label};
  for (int m = 0; m < 3; ++m) {  // an unmasked row's padding is its channels past the content
    ctx.k.axpy(C - content[m], T(1), sums.data + m * C + content[m], pads[m].data);
    ctx.k.axpy(C, T(1), sums.data + (3 + m) * C, masks[m].data);
  }
}

#define PCV_INSTANTIATE(T)                                                                              \
  template struct PreprocessorParams<T>;                                                                \
  template struct PreprocessorGrads<T>;                                                                 \
  template void preprocessor_forward_rows<T>(const ModelConfig&, const PositionTables&,                 \
                                             const PreprocessorParams<T>&, const T*, const T*,          \
                                             const int64_t*, const uint8_t*, int64_t, int64_t,          \
                                             TensorView<T>, Context<T>&);                               \
  template void preprocessor_forward_normalised_rows<T>(                                                \
      const ModelConfig&, const PositionTables&, const PreprocessorParams<T>&, const T*, const T*,      \
      const int64_t*, const uint8_t*, int64_t, int64_t, const LayerNormParams<T>&, double, TensorView<T>, \
      uint16_t*, T*, T*, Context<T>&);                                                                  \
  template void preprocessor_forward_factors<T>(const ModelConfig&, const PositionTables&,              \
                                                const PreprocessorParams<T>&, const T*, const T*,       \
                                                const int64_t*, const uint8_t*, int64_t, int64_t, double, \
                                                TensorView<T>, uint16_t*, T*, T*, Context<T>&);         \
  template void preprocessor_factor_matrix<T>(const ModelConfig&, const PreprocessorParams<T>&,           \
                                              const int64_t*, int64_t, TensorView<T>, Context<T>&);     \
  template void preprocessor_backward_rows<T>(const ModelConfig&, int64_t, const uint8_t*, int64_t,     \
                                              ConstView<T>, const PreprocessorGrads<T>&, Context<T>&);   \
  template void preprocessor_backward_sums<T>(const ModelConfig&, ConstView<T>, const PreprocessorGrads<T>&, \
                                              Context<T>&);
PCV_INSTANTIATE(float)
PCV_INSTANTIATE(double)
#undef PCV_INSTANTIATE

}  // namespace perceiver
