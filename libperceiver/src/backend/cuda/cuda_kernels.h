// The CUDA backend's ops: KernelTable<float>'s signatures (perceiver/backend.h), implemented in
// the .cu file named beside each group; cuda_table.cpp puts them in the table. `h` is the
// backend's CudaHandle (cuda_context.h). Every op is enqueued on the handle's stream and
// returns without waiting; results of reductions and losses stay in device doubles.
//
// Accumulation follows the CPU reference: backward ops add (+=) into parameter and input
// gradients, except where AttentionDims::kv_grad_in_place asks for "=" (dK, dV over K, V).
// Determinism: no floating-point atomics; every sum has a fixed partition and order, so a
// result is bitwise reproducible run to run on the same GPU (products: see cuda_gemm.h).
#pragma once

#include <cstdint>

#include "perceiver/backend.h"

namespace perceiver::cuda {

// cuda_gemm_ops.cpp
void gemm(void* h, Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
void gemm_batched(void* h, Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                  int64_t lda, int64_t stride_a, const float* b, int64_t ldb, int64_t stride_b, float beta, float* c,
                  int64_t ldc, int64_t stride_c, int64_t batch);

// cuda_norm.cu
void layer_norm_forward(void* h, int64_t rows, int64_t cols, const float* x, const float* gamma, const float* beta,
                        double eps, float* y, float* mean, float* rstd);
void layer_norm_backward(void* h, int64_t rows, int64_t cols, const float* x, const float* gamma, const float* mean,
                         const float* rstd, const float* dy, float* dx, float* dgamma, float* dbeta);
void softmax_forward(void* h, int64_t rows, int64_t cols, const float* x, float* y);
void softmax_backward(void* h, int64_t rows, int64_t cols, const float* y, const float* dy, float* dx);

// cuda_elementwise.cu
void gelu_forward(void* h, GeluKind kind, int64_t n, const float* x, float* y);
void gelu_backward(void* h, GeluKind kind, int64_t n, const float* x, const float* dy, float* dx);
void bias_forward(void* h, int64_t rows, int64_t cols, const float* bias, float* y);
void bias_backward(void* h, int64_t rows, int64_t cols, const float* dy, float* dbias);
void add(void* h, int64_t n, const float* a, const float* b, float* y);
void axpy(void* h, int64_t n, float alpha, const float* x, float* y);
void scale(void* h, int64_t n, float alpha, float* x);
void fill(void* h, int64_t n, float value, float* x);
void copy(void* h, int64_t n, const float* x, float* y);
void sum(void* h, int64_t n, const float* x, double* out);
void sum_squares(void* h, int64_t n, const float* x, double* out);

// cuda_loss.cu
void l1_forward(void* h, int64_t n, const float* pred, const float* target, double* out);
void l1_backward(void* h, int64_t n, const float* pred, const float* target, double weight, float* dpred);
void mse_forward(void* h, int64_t n, const float* pred, const float* target, double* out);
void mse_backward(void* h, int64_t n, const float* pred, const float* target, double weight, float* dpred);
void softmax_ce_forward(void* h, int64_t rows, int64_t cols, const float* logits, const int64_t* labels, double* out);
void softmax_ce_backward(void* h, int64_t rows, int64_t cols, const float* logits, const int64_t* labels,
                         double weight, float* dlogits);

// cuda_attention.cu
void attention_forward(void* h, const AttentionDims& d, const float* q, const float* k, const float* v, float* o,
                       float* saved);
void attention_backward(void* h, const AttentionDims& d, const float* q, const float* k, const float* v,
                        const float* o, const float* saved, const float* dout, float* dq, float* dk, float* dv);

// cuda_model_ops.cu
void gather_rows(void* h, int64_t batch, int64_t rows, int64_t cols, int64_t row0, int64_t n, const float* src,
                 float* dst);
void scatter_add_rows(void* h, int64_t batch, int64_t rows, int64_t cols, int64_t row0, int64_t n, const float* src,
                      float* dst);
void broadcast_rows(void* h, int64_t batch, int64_t n, const float* src, float* dst);
void embed_forward(void* h, const EmbedDims& d, const EmbedArgs<float>& a, int64_t row0, int64_t n, float* x_rows);
void embed_backward_rows(void* h, const EmbedDims& d, const uint8_t* mask, int64_t row0, int64_t n,
                         const float* dx_rows, const EmbedGrads<float>& g);
void queries_forward(void* h, const QueryDims& d, const QueryArgs<float>& a, float* q);
void queries_backward(void* h, const QueryDims& d, const float* dq, const QueryGrads<float>& g);
void gather_targets(void* h, const TargetDims& d, const int64_t* image_points, const int64_t* audio_points,
                    const float* video, const float* audio, float* image_targets, float* audio_targets);

// cuda_optim.cu
void clip_by_global_norm(void* h, int64_t n, float* x, const double* sumsq, double max_norm, double* clipped);
void sgd_update(void* h, const OptimStep& s, float* params, const float* grads, float* momentum_buf);
void adamw_update(void* h, const OptimStep& s, float* params, const float* grads, float* m, float* v);
void lamb_update(void* h, const OptimStep& s, float* params, const float* grads, float* m, float* v);

/// Throws perceiver::Error with a HINT when this build has no kernels that run on the current
/// GPU (its compute capability is not among CMAKE_CUDA_ARCHITECTURES). cuda_elementwise.cu.
void check_kernel_image(const char* gpu_name, int major, int minor);

}  // namespace perceiver::cuda
