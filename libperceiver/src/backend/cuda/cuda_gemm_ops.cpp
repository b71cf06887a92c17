// The gemm and gemm_batched ops: float32 operands in the backend's memory, through matmul().
#include "backend/cuda/cuda_gemm.h"
#include "backend/cuda/cuda_kernels.h"

namespace perceiver::cuda {

void gemm(void* h, Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  gemm_batched(h, ta, tb, m, n, k, alpha, a, lda, 0, b, ldb, 0, beta, c, ldc, 0, 1);
}

void gemm_batched(void* h, Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                  int64_t lda, int64_t stride_a, const float* b, int64_t ldb, int64_t stride_b, float beta, float* c,
                  int64_t ldc, int64_t stride_c, int64_t batch) {
  Matmul mm;
  mm.ta = ta, mm.tb = tb, mm.m = m, mm.n = n, mm.k = k, mm.alpha = alpha, mm.beta = beta;
  mm.a = {a, ElemType::kF32, lda, stride_a};
  mm.b = {b, ElemType::kF32, ldb, stride_b};
  mm.c = c, mm.ldc = ldc, mm.stride_c = stride_c, mm.batch = batch;
  matmul(handle_of(h), mm);
}

}  // namespace perceiver::cuda
