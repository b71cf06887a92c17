// Fourier position features (spec §3.1, §4.1). No parameters, so no backward.
//   features = [pos (d) | sin(π·pos_j·f_jk) (d·K) | cos(π·pos_j·f_jk) (d·K)],  f_j = linspace(1, r_j/2, K)
// evaluated in float32 in the reference's order (product, then ×π, then sin/cos) so that the
// high audio bands match PyTorch to float rounding.
#pragma once

#include <cstdint>
#include <vector>

namespace perceiver {

/// torch.linspace(start, end, steps) in float32 (computed in double, rounded once).
std::vector<float> linspace_f32(double start, double end, int64_t steps);

/// Encoder grid: every point of the index space `dims` (row-major), coordinates −1 + 2i/(s−1).
/// Returns [prod(dims), d].
std::vector<float> grid_positions(const std::vector<int64_t>& dims);

/// Decoder positions of flat indices into `dims` (row-major unravel), coordinates −1 + 2i/s.
/// Returns [indices.size(), d].
std::vector<float> subsampled_positions(const std::vector<int64_t>& dims, const std::vector<int64_t>& indices);

/// Features of n positions [n, d] with K bands per dimension and max resolutions r [d].
/// Writes [n, d + 2dK] into `out` with row stride `ld` (so they can land inside a wider row).
void fourier_features(const float* pos, int64_t n, int64_t d, int64_t num_bands,
                      const std::vector<int64_t>& max_resolution, float* out, int64_t ld);

inline int64_t fourier_width(int64_t d, int64_t num_bands) { return d + 2 * d * num_bands; }

/// One axis's table [n, 1 + 2K]: row i = [c_i | sin(π·c_i·f_k) | cos(π·c_i·f_k)].
std::vector<float> fourier_axis_table(const std::vector<float>& coords, int64_t num_bands, int64_t max_resolution);

/// fourier_features of grid_positions(dims), assembled from one axis table per dimension (the
/// same values, with d·n instead of 2dK·n sines and cosines); rows of stride `ld`.
void fourier_grid_features(const std::vector<int64_t>& dims, int64_t num_bands,
                           const std::vector<int64_t>& max_resolution, float* out, int64_t ld);

/// The decoder's table of one axis of `size` points (coordinates −1 + 2i/size, spec §4.1): the
/// backend gathers query features from it (op_params.h FourierAxes).
std::vector<float> decoder_axis_table(int64_t size, int64_t num_bands, int64_t max_resolution);

}  // namespace perceiver
