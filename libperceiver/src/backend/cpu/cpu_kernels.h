// CPU reference kernels (Eigen + OpenBLAS + OpenMP), templated on the scalar so that a double
// instance exists for gradient checks. Signatures are KernelTable<T>'s (perceiver/backend.h)
// without the handle, and reductions return their double; cpu_backend.cpp adapts them.
//
// Determinism: every sum is split into partitions that depend only on the problem shape, never on
// the thread count, and partial sums are combined in a fixed order; a split that follows the
// thread count (float32 row tiles, cpu_gemm_tiling.h) leaves every sum as one call would make it.
// So results are bitwise identical at 1 and N threads (tests/backend checks this).
#pragma once

#include <cstdint>

#include "perceiver/backend.h"

namespace perceiver::cpu {

// One BLAS call on the calling thread (safe inside our own parallel regions).
template <class T>
void gemm_serial(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
                 int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc);

// Splits C into pieces computed by the OpenMP pool with single-threaded BLAS (cpu_gemm_tiling.h):
// K slices and most tiles by shape; float32 row tiles one per thread where the kernels keep the bits.
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
// The optional KernelTable::scale_columns, column_dots and attention_backward_key_sums.
template <class T>
void scale_columns(int64_t rows, int64_t cols, const T* x, const T* s, const T* b, T* y);
template <class T>
void column_dots(int64_t rows, int64_t cols, const T* a, const T* b, T* out);
template <class T>
void attention_backward_key_sums(const AttentionDims& d, const T* q, const T* x, const T* o, const T* saved,
                                 const T* dout, const uint8_t* key_group, const T* key_scale, int64_t groups, T* dq,
                                 T* q_sums, T* key_sums);

// Model-specific ops (cpu_model_ops.cpp; op_params.h).
template <class T>
void copy(int64_t n, const T* x, T* y);
template <class T>
void gather_rows(int64_t batch, int64_t rows, int64_t cols, int64_t row0, int64_t n, const T* src, T* dst);
template <class T>
void scatter_add_rows(int64_t batch, int64_t rows, int64_t cols, int64_t row0, int64_t n, const T* src, T* dst);
template <class T>
void broadcast_rows(int64_t batch, int64_t n, const T* src, T* dst);
template <class T>
void embed_forward(const EmbedDims& d, const EmbedArgs<T>& a, int64_t row0, int64_t n, T* x_rows);
template <class T>
void embed_layer_norm_forward(const EmbedDims& d, const EmbedArgs<T>& a, int64_t row0, int64_t n, const T* gamma,
                              const T* beta, double eps, T* y, uint16_t* y16, T* mean, T* rstd);
template <class T>
void embed_norm_factors(const EmbedDims& d, const EmbedArgs<T>& a, int64_t row0, int64_t n, double eps, T* y,
                        uint16_t* y16, T* mean, T* rstd);
template <class T>
void embed_factor_matrix(const EmbedDims& d, const EmbedArgs<T>& a, T* m);
template <class T>
void embed_backward_rows(const EmbedDims& d, const uint8_t* mask, int64_t row0, int64_t n, const T* dx_rows,
                         const EmbedGrads<T>& g);
template <class T>
void queries_forward(const QueryDims& d, const QueryArgs<T>& a, T* q);
template <class T>
void queries_backward(const QueryDims& d, const T* dq, const QueryGrads<T>& g);
template <class T>
void gather_targets(const TargetDims& d, const int64_t* image_points, const int64_t* audio_points, const T* video,
                    const T* audio, T* image_targets, T* audio_targets);

// Optimizer ops (cpu_optim.cpp).
template <class T>
void clip_by_global_norm(int64_t n, T* x, const double* sumsq, double max_norm, double* clipped);
template <class T>
void sgd_update(const OptimStep& s, T* params, const T* grads, T* momentum_buf);
template <class T>
void adamw_update(const OptimStep& s, T* params, const T* grads, T* m, T* v);
template <class T>
void lamb_update(const OptimStep& s, T* params, const T* grads, T* m, T* v);

/// The filled table for T (float or double): these kernels behind the table's signatures.
template <class T>
const KernelTable<T>& kernel_table();

}  // namespace perceiver::cpu
