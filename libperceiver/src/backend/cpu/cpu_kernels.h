// CPU reference kernels (Eigen + OpenBLAS + OpenMP), templated on the scalar so that a double
// instance exists for gradient checks. Signatures match KernelTable<T> (perceiver/backend.h).
//
// Determinism: work is split into partitions that depend only on the problem shape, never on the
// thread count, and partial sums are combined in a fixed order. So results are bitwise identical
// at 1 and N threads (tests/backend checks this).
#pragma once

#include <cstdint>

#include "perceiver/backend.h"

namespace perceiver::cpu {

// One BLAS call on the calling thread (safe inside our own parallel regions).
template <class T>
void gemm_serial(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
                 int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc);

// Splits C into shape-determined tiles computed by the OpenMP pool with single-threaded BLAS.
template <class T>
void gemm(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
          int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc);

template <class T>
void gemm_batched(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
                  int64_t lda, int64_t stride_a, const T* b, int64_t ldb, int64_t stride_b, T beta,
                  T* c, int64_t ldc, int64_t stride_c, int64_t batch);

template <class T>
void layer_norm_forward(int64_t rows, int64_t cols, const T* x, const T* gamma, const T* beta,
                        double eps, T* y, T* mean, T* rstd);
template <class T>
void layer_norm_backward(int64_t rows, int64_t cols, const T* x, const T* gamma, const T* mean,
                         const T* rstd, const T* dy, T* dx, T* dgamma, T* dbeta);

template <class T>
void softmax_forward(int64_t rows, int64_t cols, const T* x, T* y);
template <class T>
void softmax_backward(int64_t rows, int64_t cols, const T* y, const T* dy, T* dx);

template <class T>
void gelu_forward(GeluKind kind, int64_t n, const T* x, T* y);
template <class T>
void gelu_backward(GeluKind kind, int64_t n, const T* x, const T* dy, T* dx);

template <class T>
void bias_forward(int64_t rows, int64_t cols, const T* bias, T* y);
template <class T>
void bias_backward(int64_t rows, int64_t cols, const T* dy, T* dbias);

template <class T>
void add(int64_t n, const T* a, const T* b, T* y);
template <class T>
void axpy(int64_t n, T alpha, const T* x, T* y);
template <class T>
void scale(int64_t n, T alpha, T* x);
template <class T>
void fill(int64_t n, T value, T* x);
template <class T>
double sum(int64_t n, const T* x);
template <class T>
double sum_squares(int64_t n, const T* x);

template <class T>
double l1_forward(int64_t n, const T* pred, const T* target);
template <class T>
void l1_backward(int64_t n, const T* pred, const T* target, double weight, T* dpred);
template <class T>
double mse_forward(int64_t n, const T* pred, const T* target);
template <class T>
void mse_backward(int64_t n, const T* pred, const T* target, double weight, T* dpred);
template <class T>
double softmax_ce_forward(int64_t rows, int64_t cols, const T* logits, const int64_t* labels);
template <class T>
void softmax_ce_backward(int64_t rows, int64_t cols, const T* logits, const int64_t* labels,
                         double weight, T* dlogits);

template <class T>
void attention_forward(const AttentionDims& d, const T* q, const T* k, const T* v, T* o, T* saved);
template <class T>
void attention_backward(const AttentionDims& d, const T* q, const T* k, const T* v, const T* o,
                        const T* saved, const T* dout, T* dq, T* dk, T* dv);

/// The filled table for T (float or double).
template <class T>
const KernelTable<T>& kernel_table();

}  // namespace perceiver::cpu
