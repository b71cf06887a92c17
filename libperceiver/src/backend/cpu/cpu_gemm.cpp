// GEMM on CPU: each tile (or K slice) is one single-threaded call, and our OpenMP pool runs them.
// Why not a threaded library: two thread pools on the same cores fight (up to 2.4x lost here,
// DESIGN.md #6), and a library's own split depends on its thread count, which would make results
// depend on the number of threads. float32 calls go to oneDNN's matmul where its JIT kernels run
// (cpu_dnnl.h), else to OpenBLAS, as do float64 ones.
#include <algorithm>

#include <cblas.h>

#include "backend/cpu/cpu_dnnl.h"
#include "backend/cpu/cpu_gemm_tiling.h"
#include "backend/cpu/cpu_kernels.h"

namespace perceiver::cpu {
namespace {

// oneDNN's per-call set-up (a primitive lookup, three memory objects) outweighs its faster
// kernels on very small or very thin products (e.g. N = 3, the pixel postprocessor: 0.8x).
constexpr int64_t kMinDnnlDim = 16;
constexpr int64_t kMinDnnlMacs = int64_t(1) << 15;

CBLAS_TRANSPOSE to_cblas(Transpose t) { return t == Transpose::kYes ? CblasTrans : CblasNoTrans; }

void blas_gemm(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha,
               const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
               int64_t ldc) {
  if (dnnl_float32_products() && std::min({m, n, k}) >= kMinDnnlDim && m * n * k >= kMinDnnlMacs)
    if (dnnl_matmul(MatmulInputs::kFloat32, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)) return;
  cblas_sgemm(CblasRowMajor, to_cblas(ta), to_cblas(tb), int(m), int(n), int(k), alpha, a, int(lda),
              b, int(ldb), beta, c, int(ldc));
}
void blas_gemm(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, double alpha,
               const double* a, int64_t lda, const double* b, int64_t ldb, double beta, double* c,
               int64_t ldc) {
  cblas_dgemm(CblasRowMajor, to_cblas(ta), to_cblas(tb), int(m), int(n), int(k), alpha, a, int(lda),
              b, int(ldb), beta, c, int(ldc));
}

}  // namespace

template <class T>
void gemm_serial(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
                 int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if (tiling::trivial(m, n, k, beta, c, ldc)) return;
  blas_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

template <class T>
void gemm(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
          int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if (m * n * k < tiling::kMinParallelMacs) return gemm_serial(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  tiling::split(gemm_serial<T>, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

template <class T>
void gemm_batched(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
                  int64_t lda, int64_t stride_a, const T* b, int64_t ldb, int64_t stride_b, T beta,
                  T* c, int64_t ldc, int64_t stride_c, int64_t batch) {
  tiling::batched(gemm_serial<T>, gemm<T>, ta, tb, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b, beta, c, ldc,
                  stride_c, batch);
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
