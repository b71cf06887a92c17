#include "model/fourier.h"

#include <algorithm>
#include <cmath>

#include "perceiver/error.h"

namespace perceiver {

std::vector<float> linspace_f32(double start, double end, int64_t steps) {
  std::vector<float> v(steps);
  if (steps == 1) {
    v[0] = float(start);
    return v;
  }
  for (int64_t i = 0; i < steps; ++i) v[i] = float(start + (end - start) * double(i) / double(steps - 1));
  return v;
}

std::vector<float> grid_positions(const std::vector<int64_t>& dims) {
  const int64_t d = int64_t(dims.size());
  int64_t n = 1;
  for (int64_t s : dims) n *= s;
  std::vector<std::vector<float>> axes;
  for (int64_t s : dims) axes.push_back(linspace_f32(-1.0, 1.0, s));
  std::vector<float> pos(n * d);
  for (int64_t i = 0; i < n; ++i) {
    int64_t rest = i;
    for (int64_t j = d - 1; j >= 0; --j) {
      pos[i * d + j] = axes[j][rest % dims[j]];
      rest /= dims[j];
    }
  }
  return pos;
}

std::vector<float> subsampled_positions(const std::vector<int64_t>& dims, const std::vector<int64_t>& indices) {
  const int64_t d = int64_t(dims.size());
  int64_t total = 1;
  for (int64_t s : dims) total *= s;
  std::vector<float> pos(indices.size() * d);
  for (size_t i = 0; i < indices.size(); ++i) {
    PCV_CHECK(indices[i] >= 0 && indices[i] < total, "output index ", indices[i], " outside [0, ", total, ")");
    int64_t rest = indices[i];
    for (int64_t j = d - 1; j >= 0; --j) {
      // HF: -1 + 2 * idx / dim, computed on float tensors.
      pos[i * d + j] = -1.0f + 2.0f * float(rest % dims[j]) / float(dims[j]);
      rest /= dims[j];
    }
  }
  return pos;
}

void fourier_features(const float* pos, int64_t n, int64_t d, int64_t num_bands,
                      const std::vector<int64_t>& max_resolution, float* out, int64_t ld) {
  PCV_ASSERT(int64_t(max_resolution.size()) == d);
  std::vector<float> freqs;  // [d, K], row-major (dim j, band k)
  for (int64_t r : max_resolution) {
    auto f = linspace_f32(1.0, double(r) / 2.0, num_bands);
    freqs.insert(freqs.end(), f.begin(), f.end());
  }
  const float pi = float(M_PI);
  const int64_t dk = d * num_bands;
  for (int64_t i = 0; i < n; ++i) {
    float* row = out + i * ld;
    for (int64_t j = 0; j < d; ++j) row[j] = pos[i * d + j];
    for (int64_t j = 0; j < d; ++j)
      for (int64_t k = 0; k < num_bands; ++k) {
        const float arg = pi * (pos[i * d + j] * freqs[j * num_bands + k]);
        row[d + j * num_bands + k] = float(std::sin(double(arg)));
        row[d + dk + j * num_bands + k] = float(std::cos(double(arg)));
      }
  }
}

std::vector<float> fourier_axis_table(const std::vector<float>& coords, int64_t num_bands, int64_t max_resolution) {
  const int64_t n = int64_t(coords.size()), w = fourier_width(1, num_bands);
  std::vector<float> table(size_t(n * w));
  fourier_features(coords.data(), n, 1, num_bands, {max_resolution}, table.data(), w);
  return table;
}

void fourier_grid_features(const std::vector<int64_t>& dims, int64_t num_bands,
                           const std::vector<int64_t>& max_resolution, float* out, int64_t ld) {
  const int64_t d = int64_t(dims.size()), K = num_bands, tw = fourier_width(1, K);
  PCV_ASSERT(int64_t(max_resolution.size()) == d && d <= 3, "grid of ", d, " dimensions");
  // Each feature depends on one coordinate: compute per axis, then assemble every grid point.
  std::vector<std::vector<float>> axes;
  int64_t n = 1;
  for (int64_t j = 0; j < d; ++j) {
    axes.push_back(fourier_axis_table(linspace_f32(-1.0, 1.0, dims[j]), K, max_resolution[j]));
    n *= dims[j];
  }
  for (int64_t i = 0; i < n; ++i) {
    float* row = out + i * ld;
    for (int64_t j = d - 1, rest = i; j >= 0; rest /= dims[j], --j) {
      const float* t = axes[size_t(j)].data() + (rest % dims[j]) * tw;
      row[j] = t[0];
      std::copy(t + 1, t + 1 + K, row + d + j * K);
      std::copy(t + 1 + K, t + 1 + 2 * K, row + d + d * K + j * K);
    }
  }
}

std::vector<float> decoder_axis_table(int64_t size, int64_t num_bands, int64_t max_resolution) {
  std::vector<int64_t> all(static_cast<size_t>(size));
  for (int64_t i = 0; i < size; ++i) all[size_t(i)] = i;
  return fourier_axis_table(subsampled_positions({size}, all), num_bands, max_resolution);
}

}  // namespace perceiver
