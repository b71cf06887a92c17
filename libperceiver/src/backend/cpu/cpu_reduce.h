// Deterministic parallel reductions: fixed-size blocks (independent of the thread count), each
// summed in a fixed order, then the block partials summed in order. Accumulates in double.
//
// Also compiled into the per-level vector kernels (cpu_vector_kernels.h), so everything here is
// a template on the caller's functor (a lambda of the caller's translation unit gives each
// instantiation its own symbol) and keeps its partials in the thread's kernel scratch
// (cpu_workspace.h, a plain function of the baseline build), never in std containers or other
// templates shared by every level.
#pragma once

#include <algorithm>
#include <cstdint>

#include "backend/cpu/cpu_parallel.h"
#include "backend/cpu/cpu_workspace.h"

namespace perceiver::cpu::detail {

inline constexpr int64_t kSumBlock = 8192;  // elements per partial sum
inline constexpr int kLanes = 16;           // independent accumulators in a sum: one zmm of floats
inline constexpr int kRun = 16;             // vectors of terms added in their own precision at a time

/// Σ f(i) for i in [begin, end), returned in double. f gives each term in its own precision
/// (float terms for float data). The terms go into kLanes interleaved accumulators: runs of kRun
/// vectors are added in the terms' precision (16 additions: float keeps about 6 digits of the
/// run), each run into double lanes, and the lanes are added in lane order at the end. Such
/// loops vectorise at every instruction-set level without reordering any lane's additions, so
/// the order of every addition is fixed by the indices alone, and float data is summed at the
/// speed of float arithmetic with the accuracy of double accumulation.
template <class F>
double lane_sum(int64_t begin, int64_t end, F f) {
  using Term = decltype(f(begin));
  double acc[kLanes] = {};
  int64_t i = begin;
  for (; i + kRun * kLanes <= end; i += kRun * kLanes) {
    Term run[kLanes] = {};
    for (int v = 0; v < kRun; ++v)
      for (int l = 0; l < kLanes; ++l) run[l] += f(i + v * kLanes + l);
    // Lane-wise, so `omp simd` reorders nothing; without it GCC 12 widened the lanes one at a time
    // (scalar cvtss2sd and addsd), which left layer norm 1.6-1.7x slower.
#pragma omp simd
    for (int l = 0; l < kLanes; ++l) acc[l] += double(run[l]);
  }
  for (; i + kLanes <= end; i += kLanes) {
#pragma omp simd
    for (int l = 0; l < kLanes; ++l) acc[l] += double(f(i + l));
  }
  for (int l = 0; i + l < end; ++l) acc[l] += double(f(i + l));
  double s = 0.0;
  for (double a : acc) s += a;
  return s;
}

/// Σ_i f(i) for i in [0, n): lane sums of kSumBlock-element blocks, in parallel, added in order.
template <class F>
double blocked_sum(int64_t n, F f) {
  const int64_t blocks = (n + kSumBlock - 1) / kSumBlock;
  double* const partial = static_cast<double*>(thread_scratch(Slot::kSumPartials, size_t(blocks) * sizeof(double)));
  parallel_for(blocks, blocks > 1,
               [&](int64_t b) { partial[b] = lane_sum(b * kSumBlock, std::min(n, (b + 1) * kSumBlock), f); });
  double total = 0.0;
  for (int64_t b = 0; b < blocks; ++b) total += partial[b];
  return total;
}

/// Column reductions over rows: rows split into shape-fixed blocks (at least 16 rows, at most 64
/// blocks); block(r0, r1, part) adds rows [r0, r1) into its own zeroed `width` partials of type
/// P, blocks run in parallel when `parallel`, and the result is Σ part over the blocks in block
/// order, in double: `width` values in the calling thread's scratch, valid until its next call.
template <class P, class F>
const double* blocked_rows(int64_t rows, int64_t width, bool parallel, F block) {
  const int64_t per = std::max<int64_t>(16, (rows + 63) / 64), blocks = (rows + per - 1) / per;
  P* const parts = static_cast<P*>(thread_scratch(Slot::kRowPartials, size_t(width * blocks) * sizeof(P)));
  std::fill_n(parts, width * blocks, P(0));
  parallel_for(blocks, parallel && blocks > 1,
               [&](int64_t b) { block(b * per, std::min(rows, (b + 1) * per), parts + b * width); });
  double* const total = static_cast<double*>(thread_scratch(Slot::kRowTotals, size_t(width) * sizeof(double)));
  std::fill_n(total, width, 0.0);
  for (int64_t b = 0; b < blocks; ++b)
    for (int64_t c = 0; c < width; ++c) total[c] += double(parts[b * width + c]);
  return total;
}

/// out[c] += Σ_r f(r, c) over rows r, for each of `cols` columns.
template <class T, class F>
void blocked_column_sum(int64_t rows, int64_t cols, F f, T* out) {
  const double* total = blocked_rows<double>(rows, cols, true, [&](int64_t r0, int64_t r1, double* part) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = 0; c < cols; ++c) part[c] += f(r, c);
  });
  for (int64_t c = 0; c < cols; ++c) out[c] += T(total[c]);
}

}  // namespace perceiver::cpu::detail
