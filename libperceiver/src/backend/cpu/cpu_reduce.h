// Deterministic parallel reductions: fixed-size blocks (independent of the thread count), each
// summed in order, then the block partials summed in order. Accumulates in double.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace perceiver::cpu::detail {

inline constexpr int64_t kSumBlock = 8192;   // elements per partial sum
inline constexpr int64_t kRowBlock = 256;    // rows per partial column sum

/// Σ_i f(i) for i in [0, n).
template <class F>
double blocked_sum(int64_t n, F f) {
  const int64_t blocks = (n + kSumBlock - 1) / kSumBlock;
  std::vector<double> partial(blocks, 0.0);
#pragma omp parallel for schedule(static) if (blocks > 1)
  for (int64_t b = 0; b < blocks; ++b) {
    double s = 0.0;
    const int64_t end = std::min(n, (b + 1) * kSumBlock);
    for (int64_t i = b * kSumBlock; i < end; ++i) s += f(i);
    partial[b] = s;
  }
  double total = 0.0;
  for (double p : partial) total += p;
  return total;
}

/// out[c] += Σ_r f(r, c) over rows r, for each of `cols` columns.
template <class T, class F>
void blocked_column_sum(int64_t rows, int64_t cols, F f, T* out) {
  const int64_t blocks = (rows + kRowBlock - 1) / kRowBlock;
  std::vector<double> partial(blocks * cols, 0.0);
#pragma omp parallel for schedule(static) if (blocks > 1)
  for (int64_t b = 0; b < blocks; ++b) {
    double* p = partial.data() + b * cols;
    const int64_t end = std::min(rows, (b + 1) * kRowBlock);
    for (int64_t r = b * kRowBlock; r < end; ++r)
      for (int64_t c = 0; c < cols; ++c) p[c] += f(r, c);
  }
  for (int64_t c = 0; c < cols; ++c) {
    double s = 0.0;
    for (int64_t b = 0; b < blocks; ++b) s += partial[b * cols + c];
    out[c] += T(s);
  }
}

}  // namespace perceiver::cpu::detail
