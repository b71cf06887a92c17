#include "model/preprocessor.h"

#include <algorithm>

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

PositionTables::PositionTables(const ModelConfig& c) {
  audio.resize(c.audio_tokens() * c.audio_pos_channels());
  auto apos = grid_positions({c.audio_tokens()});
  fourier_features(apos.data(), c.audio_tokens(), 1, c.audio_fourier_num_bands, {c.audio_fourier_max_resolution},
                   audio.data(), c.audio_pos_channels());
  image.resize(c.image_tokens() * c.image_pos_channels());
  auto ipos = grid_positions({c.image_grid_t(), c.image_grid_h(), c.image_grid_w()});
  const auto& r = c.image_fourier_max_resolution;
  fourier_features(ipos.data(), c.image_tokens(), 3, c.image_fourier_num_bands, {r[0], r[1], r[2]}, image.data(),
                   c.image_pos_channels());
}

namespace {

// Writes [content | pos | padding] into one row of width C.
template <class T>
void fill_tail(T* row, int64_t from, const float* pos, int64_t npos, ConstView<T> pad) {
  for (int64_t j = 0; j < npos; ++j) row[from + j] = T(pos[j]);
  std::copy(pad.data, pad.data + pad.numel(), row + from + npos);
}

// Space-to-depth: token (t, h, w) holds video[t·dt+i, h·sd+j, w·sd+k, c] in (i, j, k, c) order.
template <class T>
void image_patch(const ModelConfig& c, const T* clip, int64_t t, int64_t h, int64_t w, T* row) {
  const int64_t sd = c.spatial_downsample, dt = c.temporal_downsample, H = c.frame_height, W = c.frame_width;
  int64_t o = 0;
  for (int64_t i = 0; i < dt; ++i)
    for (int64_t j = 0; j < sd; ++j) {
      const T* src = clip + (((t * dt + i) * H + h * sd + j) * W + w * sd) * 3;
      for (int64_t k = 0; k < sd * 3; ++k) row[o++] = src[k];
    }
}

}  // namespace

template <class T>
void preprocessor_forward(const ModelConfig& c, const PositionTables& pos, const PreprocessorParams<T>& p,
                          const T* video, const T* audio, const int64_t* labels, const uint8_t* mask,
                          TensorView<T> x) {
  const ModalityLayout lay(c);
  const int64_t B = x.shape[0], M = c.input_tokens(), C = c.input_channels();
  PCV_ASSERT(x.shape[1] == M && x.shape[2] == C);
  const int64_t spp = c.samples_per_patch, gh = c.image_grid_h(), gw = c.image_grid_w();
  const int64_t clip_elems = c.num_frames * c.frame_height * c.frame_width * 3;
  for (int64_t b = 0; b < B; ++b)
    PCV_CHECK(labels[b] >= 0 && labels[b] < c.num_labels, "label ", labels[b], " of example ", b,
              " is outside [0, ", c.num_labels, ")");
#pragma omp parallel for schedule(static)
  for (int64_t bt = 0; bt < B * M; ++bt) {
    const int64_t b = bt / M, tok = bt % M;
    T* row = x.data + bt * C;
    if (tok < lay.image_begin) {  // audio
      const int64_t a = tok - lay.audio_begin;
      std::copy(audio + b * c.audio_samples() + a * spp, audio + b * c.audio_samples() + (a + 1) * spp, row);
      fill_tail(row, spp, pos.audio.data() + a * c.audio_pos_channels(), c.audio_pos_channels(), p.pad_audio);
      if (mask[bt]) std::copy(p.mask_audio.data, p.mask_audio.data + C, row);
    } else if (tok < lay.label_begin) {  // image
      const int64_t i = tok - lay.image_begin;
      image_patch(c, video + b * clip_elems, i / (gh * gw), (i / gw) % gh, i % gw, row);
      fill_tail(row, c.patch_values(), pos.image.data() + i * c.image_pos_channels(), c.image_pos_channels(),
                p.pad_image);
      if (mask[bt]) std::copy(p.mask_image.data, p.mask_image.data + C, row);
    } else {  // label
      std::fill(row, row + c.num_labels, T(0));
      row[labels[b]] = T(1);
      std::copy(p.pad_label.data, p.pad_label.data + p.pad_label.numel(), row + c.num_labels);
      if (mask[bt]) std::copy(p.mask_label.data, p.mask_label.data + C, row);
    }
  }
}

namespace {

// Per-block sums: for each modality (audio, image, label) the padding slice of unmasked rows and
// the whole row of masked rows.
struct RowSums {
  std::vector<double> pad[3], mask[3];
  explicit RowSums(int64_t C) {
    for (int m = 0; m < 3; ++m) pad[m].assign(C, 0.0), mask[m].assign(C, 0.0);
  }
};

}  // namespace

template <class T>
void preprocessor_backward_rows(const ModelConfig& c, const uint8_t* mask, int64_t row0, ConstView<T> dx,
                                const PreprocessorGrads<T>& g) {
  const ModalityLayout lay(c);
  const int64_t M = c.input_tokens(), C = c.input_channels(), n = dx.rows();
  const int64_t pad_from[3] = {c.audio_in_channels(), c.image_in_channels(), c.num_labels};
  constexpr int64_t kBlock = 256;  // fixed, so sums do not depend on the thread count
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<RowSums> partial(blocks, RowSums(C));
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    RowSums& acc = partial[blk];
    for (int64_t r = blk * kBlock; r < std::min(n, (blk + 1) * kBlock); ++r) {
      const int64_t row = row0 + r, tok = row % M;
      const int m = tok < lay.image_begin ? 0 : tok < lay.label_begin ? 1 : 2;
      const T* d = dx.data + r * C;
      if (mask[row]) {
        for (int64_t j = 0; j < C; ++j) acc.mask[m][j] += d[j];
      } else {
        for (int64_t j = pad_from[m]; j < C; ++j) acc.pad[m][j] += d[j];
      }
    }
  }
  TensorView<T> pads[3] = {g.pad_audio, g.pad_image, g.pad_label}, masks[3] = {g.mask_audio, g.mask_image, g.mask_label};
  for (int m = 0; m < 3; ++m)
    for (int64_t j = 0; j < C; ++j) {
      double sp = 0, sm = 0;
      for (const auto& p : partial) sp += p.pad[m][j], sm += p.mask[m][j];
      if (j >= pad_from[m]) pads[m].data[j - pad_from[m]] += T(sp);
      masks[m].data[j] += T(sm);
    }
}

#define PCV_INSTANTIATE(T)                                                                            \
  template struct PreprocessorParams<T>;                                                              \
  template struct PreprocessorGrads<T>;                                                               \
  template void preprocessor_forward<T>(const ModelConfig&, const PositionTables&,                    \
                                        const PreprocessorParams<T>&, const T*, const T*,             \
                                        const int64_t*, const uint8_t*, TensorView<T>);               \
  template void preprocessor_backward_rows<T>(const ModelConfig&, const uint8_t*, int64_t, ConstView<T>, \
                                              const PreprocessorGrads<T>&);
PCV_INSTANTIATE(float)
PCV_INSTANTIATE(double)
#undef PCV_INSTANTIATE

}  // namespace perceiver
