// Losses (spec §9): L1 and MSE as means over elements (ordered blocked sums in double), softmax
// cross-entropy as the mean over rows of (log-sum-exp − logit of the label), one block per row.
// Labels are validated on the host before upload (EmbedArgs); a label outside [0, cols) that
// reaches the device anyway gives a NaN loss and NaN gradients, which the trainer's non-finite
// guard reports, instead of reading out of bounds.
#include <cmath>

#include "backend/cuda/bodies/pointwise.h"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_reduce.cuh"

namespace perceiver::cuda {
namespace {

constexpr int kRowThreads = 256;

struct L1Term {
  const float *p, *t;
  __device__ double operator()(int64_t i) const { return body::l1_term(p[i], t[i]); }
};
struct MseTerm {
  const float *p, *t;
  __device__ double operator()(int64_t i) const { return body::mse_term(p[i], t[i]); }
};

__global__ void l1_backward_kernel(int64_t n, const float* p, const float* t, float g, float* dp) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) dp[i] += body::l1_grad(p[i], t[i], g);
}
__global__ void mse_backward_kernel(int64_t n, const float* p, const float* t, float g, float* dp) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) dp[i] += body::mse_grad(p[i], t[i], g);
}

// log Σ_c exp(x_c) of one row in double (max first), shared by every thread of the block.
__device__ double row_logsumexp(int64_t cols, const float* x, double* scratch) {
  double m = -INFINITY;
  for (int64_t c = threadIdx.x; c < cols; c += kRowThreads) m = fmax(m, double(x[c]));
  m = block_max<kRowThreads>(m, scratch);
  double s = 0;
  for (int64_t c = threadIdx.x; c < cols; c += kRowThreads) s += exp(double(x[c]) - m);
  return m + log(block_sum<kRowThreads>(s, scratch));
}

__global__ void __launch_bounds__(kRowThreads) ce_rows_kernel(int64_t cols, const float* logits,
                                                              const int64_t* labels, double* row_loss) {
  __shared__ double scratch[32];
  const int64_t r = blockIdx.x, label = labels[r];
  const double lse = row_logsumexp(cols, logits + r * cols, scratch);
  if (threadIdx.x == 0) row_loss[r] = (label >= 0 && label < cols) ? lse - double(logits[r * cols + label]) : NAN;
}

// Σ rows in row order (the CPU's), then the mean.
__global__ void ordered_mean_kernel(int64_t rows, const double* row_loss, double* out) {
  double total = 0;
  for (int64_t r = 0; r < rows; ++r) total += row_loss[r];
  *out = total / double(rows);
}

__global__ void __launch_bounds__(kRowThreads) ce_backward_kernel(int64_t cols, const float* logits,
                                                                  const int64_t* labels, double g, float* dlogits) {
  __shared__ double scratch[32];
  const int64_t r = blockIdx.x, label = labels[r];
  const float* x = logits + r * cols;
  const double lse = (label >= 0 && label < cols) ? row_logsumexp(cols, x, scratch) : NAN;
  for (int64_t c = threadIdx.x; c < cols; c += kRowThreads)
    dlogits[r * cols + c] += body::softmax_ce_grad(x[c], lse, c == label, g);
}

}  // namespace

void l1_forward(void* h, int64_t n, const float* pred, const float* target, double* out) {
  PCV_CHECK(n > 0, "L1 loss over zero elements");
  blocked_sum(handle_of(h), n, L1Term{pred, target}, double(n), out, "l1_forward");
}

void l1_backward(void* h, int64_t n, const float* pred, const float* target, double weight, float* dpred) {
  if (n <= 0) return;
  l1_backward_kernel<<<grid_for(n), kThreads, 0, handle_of(h).stream>>>(n, pred, target, float(weight / double(n)),
                                                                        dpred);
  PCV_CUDA_CHECK_LAUNCH("l1_backward_kernel");
}

void mse_forward(void* h, int64_t n, const float* pred, const float* target, double* out) {
  PCV_CHECK(n > 0, "MSE loss over zero elements");
  blocked_sum(handle_of(h), n, MseTerm{pred, target}, double(n), out, "mse_forward");
}

void mse_backward(void* h, int64_t n, const float* pred, const float* target, double weight, float* dpred) {
  if (n <= 0) return;
  mse_backward_kernel<<<grid_for(n), kThreads, 0, handle_of(h).stream>>>(n, pred, target,
                                                                         float(2.0 * weight / double(n)), dpred);
  PCV_CUDA_CHECK_LAUNCH("mse_backward_kernel");
}

void softmax_ce_forward(void* h, int64_t rows, int64_t cols, const float* logits, const int64_t* labels, double* out) {
  PCV_CHECK(rows > 0 && cols > 0, "cross-entropy over an empty batch");
  CudaHandle& hh = handle_of(h);
  double* row_loss = hh.ws->get<double>(Slot::kReduce, size_t(rows));
  ce_rows_kernel<<<unsigned(rows), kRowThreads, 0, hh.stream>>>(cols, logits, labels, row_loss);
  PCV_CUDA_CHECK_LAUNCH("ce_rows_kernel");
  ordered_mean_kernel<<<1, 1, 0, hh.stream>>>(rows, row_loss, out);
  PCV_CUDA_CHECK_LAUNCH("ordered_mean_kernel");
}

void softmax_ce_backward(void* h, int64_t rows, int64_t cols, const float* logits, const int64_t* labels,
                         double weight, float* dlogits) {
  if (rows <= 0) return;
  ce_backward_kernel<<<unsigned(rows), kRowThreads, 0, handle_of(h).stream>>>(cols, logits, labels,
                                                                              weight / double(rows), dlogits);
  PCV_CUDA_CHECK_LAUNCH("ce_backward_kernel");
}

}  // namespace perceiver::cuda
