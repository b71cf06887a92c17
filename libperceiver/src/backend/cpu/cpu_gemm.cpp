// GEMM on CPU: OpenBLAS does each tile (or K slice) single-threaded; our OpenMP pool runs them.
// Why not threaded OpenBLAS: two thread pools on the same cores fight (up to 2.4x lost here,
// DESIGN.md #6), and OpenBLAS's own split depends on its thread count, which would make results
// depend on the number of threads.
#include <algorithm>

#include <cblas.h>

#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_workspace.h"

namespace perceiver::cpu {
namespace {

CBLAS_TRANSPOSE to_cblas(Transpose t) { return t == Transpose::kYes ? CblasTrans : CblasNoTrans; }

void blas_gemm(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha,
               const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
               int64_t ldc) {
  cblas_sgemm(CblasRowMajor, to_cblas(ta), to_cblas(tb), int(m), int(n), int(k), alpha, a, int(lda),
              b, int(ldb), beta, c, int(ldc));
}
void blas_gemm(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, double alpha,
               const double* a, int64_t lda, const double* b, int64_t ldb, double beta, double* c,
               int64_t ldc) {
  cblas_dgemm(CblasRowMajor, to_cblas(ta), to_cblas(tb), int(m), int(n), int(k), alpha, a, int(lda),
              b, int(ldb), beta, c, int(ldc));
}

// Below this many multiply-adds a single call is cheaper than waking the pool.
constexpr int64_t kMinParallelMacs = int64_t(1) << 18;
// Target number of tiles for a large GEMM: enough to balance 2..16 threads.
constexpr int64_t kTargetTiles = 16;
// K-split: used when K is at least this many times the larger output dimension...
constexpr int64_t kKSplitRatio = 4;
// ...in K slices of at least this depth (shallower ones waste OpenBLAS's K blocking)...
constexpr int64_t kMinSliceDepth = 256;
// ...and this many of them: enough to balance 2..8 threads with few partial products to add.
constexpr int64_t kKSlices = 8;

int64_t tile_size(int64_t extent) {
  int64_t t = (extent + kTargetTiles - 1) / kTargetTiles;
  t = (t + 15) / 16 * 16;  // multiples of 16 keep BLAS micro-kernels on their fast path
  return std::max<int64_t>(t, 64);
}

// The encoder's reductions over its 52k input rows (P·V, dQ = dS·K, dW = dYᵀ·X, also per 4096-row
// chunk) have a small output and a large K. Tiling the output re-packs the whole K extent of the
// shared operand once per tile (0.6-0.8x PyTorch in bench_ops; 61 against 94 GFLOP/s for the
// 704x704x4096 chunk dW on one thread, dev_gemm_tiling); slicing K packs each operand once. Each
// slice is one BLAS call into its own partial product, and the partials are added in slice
// order, so the result does not depend on the thread count (it differs from the unsplit sum in
// rounding).
template <class T>
void gemm_split_k(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
                  const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  const int64_t mn = m * n;
  T* const partial = scratch<T>(Slot::kGemmSlices, size_t(kKSlices * mn));  // every element is written
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t s = 0; s < kKSlices; ++s) {
    const int64_t k0 = s * k / kKSlices, k1 = (s + 1) * k / kKSlices;
    const T* a_slice = ta == Transpose::kNo ? a + k0 : a + k0 * lda;
    const T* b_slice = tb == Transpose::kNo ? b + k0 * ldb : b + k0;
    gemm_serial(ta, tb, m, n, k1 - k0, alpha, a_slice, lda, b_slice, ldb, T(0), partial + s * mn, n);
  }
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < m; ++i) {
    T* total = partial + i * n;  // row i of slice 0, into which the others are added in order
    for (int64_t s = 1; s < kKSlices; ++s) {
      const T* p = partial + s * mn + i * n;
      for (int64_t j = 0; j < n; ++j) total[j] += p[j];
    }
    T* ci = c + i * ldc;
    if (beta == T(0)) {  // C is not read, as in BLAS
      for (int64_t j = 0; j < n; ++j) ci[j] = total[j];
    } else {
      for (int64_t j = 0; j < n; ++j) ci[j] = beta * ci[j] + total[j];
    }
  }
}

}  // namespace

template <class T>
void gemm_serial(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
                 int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {  // BLAS leaves C untouched for k == 0 only if beta == 1; do it explicitly
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == T(0) ? T(0) : beta * c[i * ldc + j];
    return;
  }
  blas_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

template <class T>
void gemm(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
          int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if (m * n * k < kMinParallelMacs) return gemm_serial(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  if (k >= kKSplitRatio * std::max(m, n) && k >= kKSlices * kMinSliceDepth)
    return gemm_split_k(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  // Split the larger output dimension; K is not split, so every element is one BLAS
  // dot-product chain whatever the tiling.
  const bool split_rows = m >= n;
  const int64_t extent = split_rows ? m : n;
  const int64_t tile = tile_size(extent);
  const int64_t tiles = (extent + tile - 1) / tile;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t begin = t * tile, count = std::min(tile, extent - begin);
    if (split_rows) {
      const T* a_tile = ta == Transpose::kNo ? a + begin * lda : a + begin;
      gemm_serial(ta, tb, count, n, k, alpha, a_tile, lda, b, ldb, beta, c + begin * ldc, ldc);
    } else {
      const T* b_tile = tb == Transpose::kNo ? b + begin : b + begin * ldb;
      gemm_serial(ta, tb, m, count, k, alpha, a, lda, b_tile, ldb, beta, c + begin, ldc);
    }
  }
}

template <class T>
void gemm_batched(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
                  int64_t lda, int64_t stride_a, const T* b, int64_t ldb, int64_t stride_b, T beta,
                  T* c, int64_t ldc, int64_t stride_c, int64_t batch) {
  // Many problems: one per task. Few large ones: tile each. The choice depends on shape only.
  if (batch >= 4) {
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t i = 0; i < batch; ++i)
      gemm_serial(ta, tb, m, n, k, alpha, a + i * stride_a, lda, b + i * stride_b, ldb, beta,
                  c + i * stride_c, ldc);
  } else {
    for (int64_t i = 0; i < batch; ++i)
      gemm(ta, tb, m, n, k, alpha, a + i * stride_a, lda, b + i * stride_b, ldb, beta,
           c + i * stride_c, ldc);
  }
}

#define PCV_INSTANTIATE(T)                                                                         \
  template void gemm_serial<T>(Transpose, Transpose, int64_t, int64_t, int64_t, T, const T*,       \
                               int64_t, const T*, int64_t, T, T*, int64_t);                        \
  template void gemm<T>(Transpose, Transpose, int64_t, int64_t, int64_t, T, const T*, int64_t,     \
                        const T*, int64_t, T, T*, int64_t);                                        \
  template void gemm_batched<T>(Transpose, Transpose, int64_t, int64_t, int64_t, T, const T*,      \
                                int64_t, int64_t, const T*, int64_t, int64_t, T, T*, int64_t,      \
                                int64_t, int64_t);
PCV_INSTANTIATE(float)
PCV_INSTANTIATE(double)
#undef PCV_INSTANTIATE

}  // namespace perceiver::cpu
