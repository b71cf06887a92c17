// Loops over the OpenMP pool that open no parallel region where they run serially.
//
// Not `omp parallel for if (...)`: a region whose if clause is false is still a one-thread region,
// set up on every call (the fused embedding + LN_kv once opened ~4,700 a kinetics700 step that
// way, one per 11-row block), and products inside one open nested teams, which libgomp staffs with
// a newly made thread each time. Templates on the caller's functor, so they are also fit for the
// per-level vector kernels (cpu_vector_kernels.h: every instantiation is the caller's own symbol).
#pragma once

#include <algorithm>
#include <cstdint>

namespace perceiver::cpu::detail {

/// f(i) for every i in [0, n): statically over the pool when `parallel`, else in order on the
/// calling thread.
template <class F>
void parallel_for(int64_t n, bool parallel, F f) {
  if (!parallel) {
    for (int64_t i = 0; i < n; ++i) f(i);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) f(i);
}

inline constexpr int64_t kSpan = 4096;  // elements per task of an elementwise loop (16 KB of floats)

/// f(begin, end) over consecutive spans of kSpan elements that cover [0, n), over the pool when
/// `parallel`: elementwise loops keep a plain inner loop for the compiler to vectorise.
template <class F>
void for_spans(int64_t n, bool parallel, F f) {
  parallel_for((n + kSpan - 1) / kSpan, parallel, [=](int64_t s) { f(s * kSpan, std::min(n, (s + 1) * kSpan)); });
}

}  // namespace perceiver::cpu::detail
