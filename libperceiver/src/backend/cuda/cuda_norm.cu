// Layer norm (one warp per row, statistics in double as on the CPU) and row softmax (one block
// per row). Parameter gradients go through the ordered column sums of cuda_reduce.cuh.
#include "backend/cuda/bodies/pointwise.h"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_reduce.cuh"

namespace perceiver::cuda {
namespace {

constexpr int kRowsPerBlock = kThreads / 32;  // layer norm: a warp per row
constexpr int kSoftmaxThreads = 256;          // softmax: a block per row

__global__ void __launch_bounds__(kThreads) layer_norm_forward_kernel(int64_t rows, int64_t cols, const float* x,
                                                                      const float* gamma, const float* beta,
                                                                      double eps, float* y, float* mean, float* rstd) {
  const int64_t r = int64_t(blockIdx.x) * kRowsPerBlock + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (r >= rows) return;  // the whole warp leaves together
  const float* xr = x + r * cols;
  double s = 0;
  for (int64_t c = lane; c < cols; c += 32) s += xr[c];
  const double mu = warp_sum(s) / double(cols);
  double v = 0;
  for (int64_t c = lane; c < cols; c += 32) v += (xr[c] - mu) * (xr[c] - mu);
  const double rs = 1.0 / sqrt(warp_sum(v) / double(cols) + eps);
  float* yr = y + r * cols;
  for (int64_t c = lane; c < cols; c += 32) yr[c] = body::layer_norm_y(xr[c], mu, rs, gamma[c], beta[c]);
  if (lane == 0) mean[r] = float(mu), rstd[r] = float(rs);
}

__global__ void __launch_bounds__(kThreads) layer_norm_backward_kernel(int64_t rows, int64_t cols, const float* x,
                                                                       const float* gamma, const float* mean,
                                                                       const float* rstd, const float* dy, float* dx) {
  const int64_t r = int64_t(blockIdx.x) * kRowsPerBlock + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (r >= rows) return;
  const float *xr = x + r * cols, *dyr = dy + r * cols;
  const double mu = mean[r], rs = rstd[r];
  double sg = 0, sgx = 0;
  for (int64_t c = lane; c < cols; c += 32) {
    const double g = body::layer_norm_g(dyr[c], gamma[c]);
    sg += g;
    sgx += g * body::layer_norm_xhat(xr[c], mu, rs);
  }
  const double mean_g = warp_sum(sg) / double(cols), mean_gx = warp_sum(sgx) / double(cols);
  float* dxr = dx + r * cols;
  for (int64_t c = lane; c < cols; c += 32) dxr[c] += body::layer_norm_dx(xr[c], dyr[c], gamma[c], mu, rs, mean_g, mean_gx);
}

struct DgammaTerm {
  int64_t cols;
  const float *x, *dy, *mean, *rstd;
  __device__ double operator()(int64_t r, int64_t c) const {
    return body::layer_norm_dgamma_term(x[r * cols + c], dy[r * cols + c], mean[r], rstd[r]);
  }
};
struct DbetaTerm {
  int64_t cols;
  const float* dy;
  __device__ double operator()(int64_t r, int64_t c) const { return double(dy[r * cols + c]); }
};

// y = softmax(x) per row; in place when y == x.
__global__ void __launch_bounds__(kSoftmaxThreads) softmax_forward_kernel(int64_t cols, const float* x, float* y) {
  __shared__ float scratch[32];
  const float* xr = x + int64_t(blockIdx.x) * cols;
  float* yr = y + int64_t(blockIdx.x) * cols;
  float m = -INFINITY;
  for (int64_t c = threadIdx.x; c < cols; c += kSoftmaxThreads) m = fmaxf(m, xr[c]);
  m = block_max<kSoftmaxThreads>(m, scratch);
  float s = 0;
  for (int64_t c = threadIdx.x; c < cols; c += kSoftmaxThreads) {
    const float e = body::hd_exp(xr[c] - m);
    yr[c] = e;
    s += e;
  }
  s = block_sum<kSoftmaxThreads>(s, scratch);
  for (int64_t c = threadIdx.x; c < cols; c += kSoftmaxThreads) yr[c] /= s;
}

__global__ void __launch_bounds__(kSoftmaxThreads) softmax_backward_kernel(int64_t cols, const float* y,
                                                                           const float* dy, float* dx) {
  __shared__ float scratch[32];
  const int64_t base = int64_t(blockIdx.x) * cols;
  float dot = 0;
  for (int64_t c = threadIdx.x; c < cols; c += kSoftmaxThreads) dot += y[base + c] * dy[base + c];
  dot = block_sum<kSoftmaxThreads>(dot, scratch);
  for (int64_t c = threadIdx.x; c < cols; c += kSoftmaxThreads)
    dx[base + c] += body::softmax_dx(y[base + c], dy[base + c], dot);
}

unsigned row_blocks(int64_t rows) { return unsigned((rows + kRowsPerBlock - 1) / kRowsPerBlock); }

}  // namespace

void layer_norm_forward(void* h, int64_t rows, int64_t cols, const float* x, const float* gamma, const float* beta,
                        double eps, float* y, float* mean, float* rstd) {
  if (rows == 0) return;
  layer_norm_forward_kernel<<<row_blocks(rows), kThreads, 0, handle_of(h).stream>>>(rows, cols, x, gamma, beta, eps, y,
                                                                                    mean, rstd);
  PCV_CUDA_CHECK_LAUNCH("layer_norm_forward_kernel");
}

void layer_norm_backward(void* h, int64_t rows, int64_t cols, const float* x, const float* gamma, const float* mean,
                         const float* rstd, const float* dy, float* dx, float* dgamma, float* dbeta) {
  if (rows == 0) return;
  CudaHandle& hh = handle_of(h);
  layer_norm_backward_kernel<<<row_blocks(rows), kThreads, 0, hh.stream>>>(rows, cols, x, gamma, mean, rstd, dy, dx);
  PCV_CUDA_CHECK_LAUNCH("layer_norm_backward_kernel");
  column_sum(hh, rows, cols, DgammaTerm{cols, x, dy, mean, rstd}, dgamma, "layer_norm_backward dgamma");
  column_sum(hh, rows, cols, DbetaTerm{cols, dy}, dbeta, "layer_norm_backward dbeta");
}

void softmax_forward(void* h, int64_t rows, int64_t cols, const float* x, float* y) {
  if (rows == 0 || cols == 0) return;
  PCV_ASSERT(rows <= INT32_MAX, "softmax over ", rows, " rows");
  softmax_forward_kernel<<<unsigned(rows), kSoftmaxThreads, 0, handle_of(h).stream>>>(cols, x, y);
  PCV_CUDA_CHECK_LAUNCH("softmax_forward_kernel");
}

void softmax_backward(void* h, int64_t rows, int64_t cols, const float* y, const float* dy, float* dx) {
  if (rows == 0 || cols == 0) return;
  PCV_ASSERT(rows <= INT32_MAX, "softmax over ", rows, " rows");
  softmax_backward_kernel<<<unsigned(rows), kSoftmaxThreads, 0, handle_of(h).stream>>>(cols, y, dy, dx);
  PCV_CUDA_CHECK_LAUNCH("softmax_backward_kernel");
}

}  // namespace perceiver::cuda
