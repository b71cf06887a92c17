// Optimizer updates and gradient clipping (op_params.h OptimStep) with the per-element bodies of
// bodies/optim.h. One block per registry chunk (at most 2^14 elements each); LAMB's norms are
// fixed block trees per chunk, then summed per tensor in chunk order by one thread, as on the
// CPU. Every kernel first reads the step's Σg² on the device and does nothing when it is not
// finite, so the host never waits for the norm.
#include "backend/cuda/bodies/optim.h"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_reduce.cuh"

namespace perceiver::cuda {
namespace {

constexpr int kChunkThreads = 256;

__global__ void clip_kernel(int64_t n, float* x, const double* sumsq, double max_norm, double* clipped) {
  const bool clip = body::clip_needed(*sumsq, max_norm);
  if (global_thread() == 0) *clipped = clip ? 1.0 : 0.0;
  if (!clip) return;
  const float norm = float(sqrt(*sumsq)), mf = float(max_norm);
  for (int64_t i = global_thread(); i < n; i += grid_threads()) x[i] = body::clip_value(x[i], norm, mf);
}

__global__ void __launch_bounds__(kChunkThreads) sgd_kernel(body::SgdCoeffs k, const OptimChunk* chunks,
                                                            const double* sumsq, float* p, const float* g,
                                                            float* buf) {
  if (!body::finite_step(*sumsq)) return;
  const OptimChunk ch = chunks[blockIdx.x];
  for (int64_t i = ch.begin + threadIdx.x; i < ch.end; i += kChunkThreads)
    body::sgd_element(k, ch.decayed != 0, p[i], g[i], buf[i]);
}

__global__ void __launch_bounds__(kChunkThreads) adamw_kernel(body::AdamCoeffs k, const OptimChunk* chunks,
                                                              const double* sumsq, float* p, const float* g, float* m,
                                                              float* v) {
  if (!body::finite_step(*sumsq)) return;
  const OptimChunk ch = chunks[blockIdx.x];
  for (int64_t i = ch.begin + threadIdx.x; i < ch.end; i += kChunkThreads)
    body::adamw_element(k, ch.decayed != 0, p[i], g[i], m[i], v[i]);
}

// LAMB pass 1: moments, and per chunk Σp² and Σu² (work[c], work[num_chunks + c]).
__global__ void __launch_bounds__(kChunkThreads) lamb_moments_kernel(body::LambCoeffs k, const OptimChunk* chunks,
                                                                     int64_t num_chunks, const double* sumsq,
                                                                     const float* p, const float* g, float* m,
                                                                     float* v, double* work) {
  __shared__ double scratch[32];
  if (!body::finite_step(*sumsq)) return;
  const OptimChunk ch = chunks[blockIdx.x];
  double sp = 0, su = 0;
  for (int64_t i = ch.begin + threadIdx.x; i < ch.end; i += kChunkThreads) {
    body::lamb_moments(k, g[i], m[i], v[i]);
    const double u = body::lamb_direction(k, m[i], v[i], p[i], ch.decayed != 0);
    sp += double(p[i]) * p[i];
    su += u * u;
  }
  sp = block_sum<kChunkThreads>(sp, scratch);
  su = block_sum<kChunkThreads>(su, scratch);
  if (threadIdx.x == 0) work[blockIdx.x] = sp, work[num_chunks + blockIdx.x] = su;
}

// LAMB pass 2 (one thread): per-tensor sums in chunk order, then the trust ratios.
// work = [Σp² per chunk | Σu² per chunk | ratio per tensor | Σp² per tensor].
__global__ void lamb_ratios_kernel(const OptimChunk* chunks, int64_t num_chunks, int64_t num_tensors,
                                   const double* sumsq, double* work) {
  if (!body::finite_step(*sumsq)) return;
  double *ratio = work + 2 * num_chunks, *tp = ratio + num_tensors;
  for (int64_t t = 0; t < num_tensors; ++t) tp[t] = 0, ratio[t] = 0;
  for (int64_t c = 0; c < num_chunks; ++c) {
    tp[chunks[c].tensor] += work[c];
    ratio[chunks[c].tensor] += work[num_chunks + c];
  }
  for (int64_t t = 0; t < num_tensors; ++t) ratio[t] = body::lamb_ratio(tp[t], ratio[t]);
}

__global__ void __launch_bounds__(kChunkThreads) lamb_apply_kernel(body::LambCoeffs k, float lr,
                                                                   const OptimChunk* chunks, int64_t num_chunks,
                                                                   const double* sumsq, float* p, const float* m,
                                                                   const float* v, const double* work) {
  if (!body::finite_step(*sumsq)) return;
  const OptimChunk ch = chunks[blockIdx.x];
  const float r = float(work[2 * num_chunks + ch.tensor]);
  for (int64_t i = ch.begin + threadIdx.x; i < ch.end; i += kChunkThreads)
    p[i] = body::lamb_apply(p[i], body::lamb_direction(k, m[i], v[i], p[i], ch.decayed != 0), r, lr);
}

void check_chunks(const OptimStep& s) {
  PCV_ASSERT(s.num_chunks >= 0 && s.num_chunks <= INT32_MAX, "optimizer chunks: ", s.num_chunks);
}

}  // namespace

void clip_by_global_norm(void* h, int64_t n, float* x, const double* sumsq, double max_norm, double* clipped) {
  clip_kernel<<<grid_for(n), kThreads, 0, handle_of(h).stream>>>(n, x, sumsq, max_norm, clipped);
  PCV_CUDA_CHECK_LAUNCH("clip_kernel");
}

void sgd_update(void* h, const OptimStep& s, float* params, const float* grads, float* momentum_buf) {
  check_chunks(s);
  if (s.num_chunks == 0) return;
  sgd_kernel<<<unsigned(s.num_chunks), kChunkThreads, 0, handle_of(h).stream>>>(
      body::SgdCoeffs::from(s), s.chunks, s.grad_sumsq, params, grads, momentum_buf);
  PCV_CUDA_CHECK_LAUNCH("sgd_kernel");
}

void adamw_update(void* h, const OptimStep& s, float* params, const float* grads, float* m, float* v) {
  check_chunks(s);
  if (s.num_chunks == 0) return;
  adamw_kernel<<<unsigned(s.num_chunks), kChunkThreads, 0, handle_of(h).stream>>>(
      body::AdamCoeffs::from(s), s.chunks, s.grad_sumsq, params, grads, m, v);
  PCV_CUDA_CHECK_LAUNCH("adamw_kernel");
}

void lamb_update(void* h, const OptimStep& s, float* params, const float* grads, float* m, float* v) {
  check_chunks(s);
  if (s.num_chunks == 0) return;
  cudaStream_t stream = handle_of(h).stream;
  const body::LambCoeffs k = body::LambCoeffs::from(s);
  const unsigned chunks = unsigned(s.num_chunks);
  lamb_moments_kernel<<<chunks, kChunkThreads, 0, stream>>>(k, s.chunks, s.num_chunks, s.grad_sumsq, params, grads, m,
                                                            v, s.work);
  PCV_CUDA_CHECK_LAUNCH("lamb_moments_kernel");
  lamb_ratios_kernel<<<1, 1, 0, stream>>>(s.chunks, s.num_chunks, s.num_tensors, s.grad_sumsq, s.work);
  PCV_CUDA_CHECK_LAUNCH("lamb_ratios_kernel");
  lamb_apply_kernel<<<chunks, kChunkThreads, 0, stream>>>(k, float(s.lr), s.chunks, s.num_chunks, s.grad_sumsq, params,
                                                          m, v, s.work);
  PCV_CUDA_CHECK_LAUNCH("lamb_apply_kernel");
}

}  // namespace perceiver::cuda
