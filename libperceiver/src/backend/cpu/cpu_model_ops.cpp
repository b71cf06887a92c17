// The model-specific ops on CPU (op_params.h): row gathers, the multimodal input array and its
// backward, decoder queries, reconstruction targets. Sums run in double over fixed row blocks
// (cpu_reduce.h), so results do not depend on the thread count.
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "backend/cpu/cpu_isa.h"
#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_reduce.h"
#include "backend/cpu/cpu_workspace.h"

namespace perceiver::cpu {

template <class T>
void copy(int64_t n, const T* x, T* y) {
  if (n > 0) std::memcpy(static_cast<void*>(y), static_cast<const void*>(x), size_t(n) * sizeof(T));
}

template <class T>
void gather_rows(int64_t batch, int64_t rows, int64_t cols, int64_t row0, int64_t n, const T* src, T* dst) {
  for (int64_t b = 0; b < batch; ++b)
    std::copy(src + (b * rows + row0) * cols, src + (b * rows + row0 + n) * cols, dst + b * n * cols);
}

template <class T>
void scatter_add_rows(int64_t batch, int64_t rows, int64_t cols, int64_t row0, int64_t n, const T* src, T* dst) {
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < n * cols; ++i) dst[(b * rows + row0) * cols + i] += src[b * n * cols + i];
}

template <class T>
void broadcast_rows(int64_t batch, int64_t n, const T* src, T* dst) {
  for (int64_t b = 0; b < batch; ++b) std::copy(src, src + n, dst + b * n);
}

namespace {

// Writes [content | pos | padding] into one row: pos at `from`, then `pad_n` padding values.
template <class T>
void fill_tail(T* row, int64_t from, const float* pos, int64_t npos, const T* pad, int64_t pad_n) {
  for (int64_t j = 0; j < npos; ++j) row[from + j] = T(pos[j]);
  std::copy(pad, pad + pad_n, row + from + npos);
}

// Space-to-depth: token (t, h, w) holds video[t·dt+i, h·sd+j, w·sd+k, c] in (i, j, k, c) order.
template <class T>
void image_patch(const EmbedDims& d, const T* clip, int64_t t, int64_t h, int64_t w, T* row) {
  const int64_t sd = d.spatial_downsample, dt = d.temporal_downsample, H = d.height, W = d.width;
  int64_t o = 0;
  for (int64_t i = 0; i < dt; ++i)
    for (int64_t j = 0; j < sd; ++j) {
      const T* src = clip + (((t * dt + i) * H + h * sd + j) * W + w * sd) * 3;
      for (int64_t k = 0; k < sd * 3; ++k) row[o++] = src[k];
    }
}

// Row bt of x [B·M, C]: [content | pos | padding], or the modality's mask token where masked.
template <class T>
void embed_row(const EmbedDims& d, const EmbedArgs<T>& a, int64_t bt, T* row) {
  const int64_t M = d.tokens, C = d.channels, spp = d.samples_per_patch;
  const int64_t image_begin = d.audio_tokens, label_begin = d.label_begin();
  const int64_t b = bt / M, tok = bt % M;
  if (tok < image_begin) {  // audio
    const T* samples = a.audio + b * d.audio_samples + tok * spp;
    std::copy(samples, samples + spp, row);
    fill_tail(row, spp, a.pos_audio + tok * d.audio_pos, d.audio_pos, a.pad_audio, C - spp - d.audio_pos);
    if (a.mask[bt]) std::copy(a.mask_audio, a.mask_audio + C, row);
  } else if (tok < label_begin) {  // image
    const int64_t i = tok - image_begin, gh = d.grid_h(), gw = d.grid_w();
    image_patch(d, a.video + b * d.frames * d.height * d.width * 3, i / (gh * gw), (i / gw) % gh, i % gw, row);
    fill_tail(row, d.patch_values(), a.pos_image + i * d.image_pos, d.image_pos, a.pad_image,
              C - d.patch_values() - d.image_pos);
    if (a.mask[bt]) std::copy(a.mask_image, a.mask_image + C, row);
  } else {  // label
    std::fill(row, row + d.num_labels, T(0));
    row[a.labels[b]] = T(1);
    std::copy(a.pad_label, a.pad_label + (C - d.num_labels), row + d.num_labels);
    if (a.mask[bt]) std::copy(a.mask_label, a.mask_label + C, row);
  }
}

}  // namespace

template <class T>
void embed_forward(const EmbedDims& d, const EmbedArgs<T>& a, int64_t row0, int64_t n, T* x_rows) {
#pragma omp parallel for schedule(static)
  for (int64_t bt = row0; bt < row0 + n; ++bt) embed_row(d, a, bt, x_rows + (bt - row0) * d.channels);
}

namespace {

// A few rows at a time into the thread's scratch, normalised from there while they are in L1
// (32 KB of them): the 52097 × 704 encoder input's rows used to be written out whole, read back by
// the layer norm, its output written again. Per row the same functions as embed_forward and
// layer_norm_forward, so the same bits. Calls normalise(r0, m, x, spare) for each block of m rows
// from row0 + r0, embedded in x, with `spare_cols` more floats a row of the thread's scratch.
template <class T, class Normalise>
void for_embedded_blocks(const EmbedDims& d, const EmbedArgs<T>& a, int64_t row0, int64_t n, int64_t spare_cols,
                         Normalise normalise) {
  const int64_t C = d.channels, per_block = std::max<int64_t>(1, (int64_t(32) << 10) / (C * int64_t(sizeof(T))));
  const ThreadSlices<T> rows(Slot::kEmbedRows, size_t(per_block * (C + spare_cols)));
#pragma omp parallel for schedule(static)
  for (int64_t r0 = 0; r0 < n; r0 += per_block) {
    const int64_t m = std::min(per_block, n - r0);
    T* x = rows.mine();
    for (int64_t i = 0; i < m; ++i) embed_row(d, a, row0 + r0 + i, x + i * C);
    normalise(r0, m, x, x + per_block * C);
  }
}

}  // namespace

// The bf16 rows (y16) are rounded from the block while it is still in L1; without y the
// normalised block stays in the thread's scratch too.
template <class T>
void embed_layer_norm_forward(const EmbedDims& d, const EmbedArgs<T>& a, int64_t row0, int64_t n, const T* gamma,
                              const T* beta, double eps, T* y, uint16_t* y16, T* mean, T* rstd) {
  PCV_CHECK(y || y16, "embed_layer_norm_forward: no output (y and y16 both null)");
  PCV_CHECK(!y16 || (std::is_same_v<T, float>), "embed_layer_norm_forward: bf16 rows (y16) of float64 values");
  const int64_t C = d.channels;
  const VectorKernels<T>& vk = vector_kernels<T>();
  for_embedded_blocks(d, a, row0, n, y ? 0 : C, [&](int64_t r0, int64_t m, const T* x, T* spare) {
    T* out = y ? y + r0 * C : spare;
    vk.layer_norm_forward(m, C, x, gamma, beta, eps, out, mean + r0, rstd + r0);
    if constexpr (std::is_same_v<T, float>) {
      if (y16) vk.to_bf16(m * C, out, y16 + r0 * C);
    }
  });
}

namespace {

// Row bt's modality (0 audio, 1 image, 2 label) and where its content ends.
struct RowKind {
  int modality;
  int64_t content;
};
RowKind row_kind(const EmbedDims& d, int64_t bt) {
  const int64_t tok = bt % d.tokens;
  if (tok < d.audio_tokens) return {0, d.samples_per_patch + d.audio_pos};
  if (tok < d.label_begin()) return {1, d.patch_values() + d.image_pos};
  return {2, d.num_labels};
}

}  // namespace

// embed_layer_norm_forward's rows with gain 1 and shift 0 (the same functions, so the same X̂,
// mean and rstd), a block in the thread's scratch at a time, then as factors (EmbedFactors):
// audio and image content copied to their factors, the padding's two factors set (rstd·v −
// mean·rstd where the rows hold (v − mean)·rstd: the same to float rounding).
template <class T>
void embed_norm_factors(const EmbedDims& d, const EmbedArgs<T>& a, int64_t row0, int64_t n, double eps, T* y,
                        uint16_t* y16, T* mean, T* rstd) {
  PCV_CHECK(y || y16, "embed_norm_factors: no output (y and y16 both null)");
  PCV_CHECK(!y16 || (std::is_same_v<T, float>), "embed_norm_factors: bf16 rows (y16) of float64 values");
  const EmbedFactors f = EmbedFactors::of(d);
  const int64_t C = d.channels, W = f.width;
  T* const unit = scratch<T>(Slot::kEmbedUnit, size_t(2 * C));  // the layer norm's gain and shift
  std::fill_n(unit, C, T(1));
  std::fill_n(unit + C, C, T(0));
  const VectorKernels<T>& vk = vector_kernels<T>();
  for_embedded_blocks(d, a, row0, n, C + (y ? 0 : W), [&](int64_t r0, int64_t m, const T* x, T* xhat) {
    T* out = y ? y + r0 * W : xhat + m * C;
    vk.layer_norm_forward(m, C, x, unit, unit + C, eps, xhat, mean + r0, rstd + r0);
    for (int64_t i = 0; i < m; ++i) {
      const int64_t bt = row0 + r0 + i;
      const RowKind kind = row_kind(d, bt);
      const bool masked = a.mask[bt] != 0;  // all mask token
      const int64_t content = masked || kind.modality == 2 ? 0 : kind.content;
      const T* xr = xhat + i * C;
      T* fr = out + i * W;
      std::fill(fr, fr + W, T(0));
      std::copy(xr, xr + std::min(content, f.narrow), fr);
      if (content > f.narrow) std::copy(xr + f.narrow, xr + content, fr + f.content(f.narrow));
      const int64_t pair = f.pair(kind.modality, masked);
      fr[pair] = rstd[r0 + i];
      fr[pair + 1] = -mean[r0 + i] * rstd[r0 + i];
      if (kind.modality == 2 && !masked) fr[f.label_content()] = rstd[r0 + i];
    }
    if constexpr (std::is_same_v<T, float>) {
      if (y16) vk.to_bf16(m * W, out, y16 + r0 * W);
    }
  });
}

// M_b [width, C] of EmbedFactors for each item b: a one for each content channel; per
// modality, its padding over the channels past its content (and ones there: over all channels
// for the label, whose content is not among the factors), its mask token over all (and ones);
// the item's label channel for the label content.
template <class T>
void embed_factor_matrix(const EmbedDims& d, const EmbedArgs<T>& a, T* m) {
  const EmbedFactors f = EmbedFactors::of(d);
  const int64_t C = d.channels, per_item = f.width * C;
  std::fill_n(m, per_item, T(0));
  for (int64_t c = 0; c < f.wide; ++c) m[f.content(c) * C + c] = T(1);
  const T* pads[3] = {a.pad_audio, a.pad_image, a.pad_label};
  const T* masks[3] = {a.mask_audio, a.mask_image, a.mask_label};
  for (int modality = 0; modality < 3; ++modality) {
    const int64_t content = row_kind(d, modality == 0 ? 0 : modality == 1 ? d.audio_tokens : d.label_begin()).content;
    T* row = m + f.pair(modality, false) * C;
    std::copy(pads[modality], pads[modality] + (C - content), row + content);
    std::fill(row + C + (modality == 2 ? 0 : content), row + 2 * C, T(1));
    row = m + f.pair(modality, true) * C;
    std::copy(masks[modality], masks[modality] + C, row);
    std::fill(row + C, row + 2 * C, T(1));
  }
  for (int64_t b = 1; b < d.batch; ++b) std::copy(m, m + per_item, m + b * per_item);
  for (int64_t b = 0; b < d.batch; ++b) m[b * per_item + f.label_content() * C + a.labels[b]] = T(1);
}

// Per block of 256 rows and per modality (audio, image, label): the sum of the padding slice of
// unmasked rows and of the whole row of masked rows; the blocks are then summed in order.
template <class T>
void embed_backward_rows(const EmbedDims& d, const uint8_t* mask, int64_t row0, int64_t n, const T* dx,
                         const EmbedGrads<T>& g) {
  const int64_t M = d.tokens, C = d.channels, image_begin = d.audio_tokens, label_begin = d.label_begin();
  const int64_t pad_from[3] = {d.samples_per_patch + d.audio_pos, d.patch_values() + d.image_pos, d.num_labels};
  constexpr int64_t kBlock = 256;  // fixed, so sums do not depend on the thread count
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  // [blocks][pad|mask][modality][C]
  const size_t need = size_t(blocks) * 6 * size_t(C);
  double* part = scratch<double>(Slot::kEmbedPartials, need);
  std::fill_n(part, need, 0.0);
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    double* acc = part + blk * 6 * C;
    for (int64_t r = blk * kBlock; r < std::min(n, (blk + 1) * kBlock); ++r) {
      const int64_t row = row0 + r, tok = row % M;
      const int m = tok < image_begin ? 0 : tok < label_begin ? 1 : 2;
      const T* dr = dx + r * C;
      if (mask[row]) {
        double* s = acc + (3 + m) * C;
        for (int64_t j = 0; j < C; ++j) s[j] += dr[j];
      } else {
        double* s = acc + m * C;
        for (int64_t j = pad_from[m]; j < C; ++j) s[j] += dr[j];
      }
    }
  }
  T* pads[3] = {g.pad_audio, g.pad_image, g.pad_label};
  T* masks[3] = {g.mask_audio, g.mask_image, g.mask_label};
  for (int m = 0; m < 3; ++m)
    for (int64_t j = 0; j < C; ++j) {
      double sp = 0, sm = 0;
      for (int64_t blk = 0; blk < blocks; ++blk) {
        sp += part[(blk * 6 + m) * C + j];
        sm += part[(blk * 6 + 3 + m) * C + j];
      }
      if (j >= pad_from[m]) pads[m][j - pad_from[m]] += T(sp);
      masks[m][j] += T(sm);
    }
}

namespace {

// The Fourier features of one output point, assembled from the axis tables (FourierAxes).
template <class T>
void fourier_row(const FourierAxes& ax, const float* const* tables, int64_t point, T* row) {
  const int64_t d = ax.d, K = ax.bands, tw = 1 + 2 * K;
  int64_t coord[3] = {0, 0, 0};
  for (int64_t j = d - 1, rest = point; j >= 0; --j) {
    coord[j] = rest % ax.dims[j];
    rest /= ax.dims[j];
  }
  for (int64_t j = 0; j < d; ++j) {
    const float* t = tables[j] + coord[j] * tw;
    row[j] = T(t[0]);
    for (int64_t k = 0; k < K; ++k) {
      row[d + j * K + k] = T(t[1 + k]);
      row[d + d * K + j * K + k] = T(t[1 + K + k]);
    }
  }
}

}  // namespace

template <class T>
void queries_forward(const QueryDims& d, const QueryArgs<T>& a, T* q) {
  const int64_t E = d.channels, O = d.rows(), na = d.num_audio, ni = d.num_image;
  const int64_t wa = d.audio.width(), wi = d.image.width(), lc = d.label_channels;
  const float* audio_tables[1] = {a.audio_axis};
  for (int64_t i = 0; i < na; ++i) {  // batch item 0; the others are copies
    T* row = q + i * E;
    fourier_row(d.audio, audio_tables, a.audio_points[i], row);
    std::copy(a.pad_audio, a.pad_audio + (E - wa), row + wa);
  }
  for (int64_t i = 0; i < ni; ++i) {
    T* row = q + (na + i) * E;
    fourier_row(d.image, a.image_axes, a.image_points[i], row);
    std::copy(a.pad_image, a.pad_image + (E - wi), row + wi);
  }
  T* label = q + (O - 1) * E;
  std::copy(a.label_query, a.label_query + lc, label);
  std::copy(a.pad_label, a.pad_label + (E - lc), label + lc);
  for (int64_t b = 1; b < d.batch; ++b) std::copy(q, q + O * E, q + b * O * E);
}

template <class T>
void queries_backward(const QueryDims& d, const T* dq, const QueryGrads<T>& g) {
  const int64_t B = d.batch, O = d.rows(), E = d.channels, na = d.num_audio, ni = d.num_image;
  const int64_t wa = d.audio.width(), wi = d.image.width(), lc = d.label_channels;
  // Rows [row0, row0+n) of every batch item, columns [from, from+width).
  auto sum_rows = [&](int64_t row0, int64_t n, int64_t from, int64_t width, T* out) {
    detail::blocked_column_sum(
        B * n, width, [&](int64_t r, int64_t j) { return double(dq[((r / n) * O + row0 + r % n) * E + from + j]); },
        out);
  };
  sum_rows(0, na, wa, E - wa, g.pad_audio);
  sum_rows(na, ni, wi, E - wi, g.pad_image);
  sum_rows(O - 1, 1, lc, E - lc, g.pad_label);
  sum_rows(O - 1, 1, 0, lc, g.label_query);
}

template <class T>
void gather_targets(const TargetDims& d, const int64_t* image_points, const int64_t* audio_points, const T* video,
                    const T* audio, T* image_targets, T* audio_targets) {
  const int64_t clip = d.pixels * 3, pi = d.num_image, pa = d.num_audio, spp = d.samples_per_patch;
  for (int64_t b = 0; b < d.batch; ++b) {
    for (int64_t i = 0; i < pi; ++i)
      std::copy_n(video + b * clip + image_points[i] * 3, 3, image_targets + (b * pi + i) * 3);
    for (int64_t i = 0; i < pa; ++i)
      std::copy_n(audio + b * d.audio_samples + audio_points[i] * spp, spp, audio_targets + (b * pa + i) * spp);
  }
}

#define PCV_INSTANTIATE(T)                                                                                     \
  template void copy<T>(int64_t, const T*, T*);                                                                \
  template void gather_rows<T>(int64_t, int64_t, int64_t, int64_t, int64_t, const T*, T*);                     \
  template void scatter_add_rows<T>(int64_t, int64_t, int64_t, int64_t, int64_t, const T*, T*);                \
  template void broadcast_rows<T>(int64_t, int64_t, const T*, T*);                                             \
  template void embed_forward<T>(const EmbedDims&, const EmbedArgs<T>&, int64_t, int64_t, T*);                \
  template void embed_layer_norm_forward<T>(const EmbedDims&, const EmbedArgs<T>&, int64_t, int64_t, const T*,       \
                                            const T*, double, T*, uint16_t*, T*, T*);                           \
  template void embed_norm_factors<T>(const EmbedDims&, const EmbedArgs<T>&, int64_t, int64_t, double, T*, uint16_t*, \
                                      T*, T*);                                                                   \
  template void embed_factor_matrix<T>(const EmbedDims&, const EmbedArgs<T>&, T*);                                \
  template void embed_backward_rows<T>(const EmbedDims&, const uint8_t*, int64_t, int64_t, const T*,            \
                                       const EmbedGrads<T>&);                                                  \
  template void queries_forward<T>(const QueryDims&, const QueryArgs<T>&, T*);                                 \
  template void queries_backward<T>(const QueryDims&, const T*, const QueryGrads<T>&);                         \
  template void gather_targets<T>(const TargetDims&, const int64_t*, const int64_t*, const T*, const T*, T*, T*);
PCV_INSTANTIATE(float)
PCV_INSTANTIATE(double)
#undef PCV_INSTANTIATE

}  // namespace perceiver::cpu
