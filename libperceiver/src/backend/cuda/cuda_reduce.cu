// The second stage of the deterministic reductions (cuda_reduce.cuh).
#include "backend/cuda/cuda_reduce.cuh"

namespace perceiver::cuda {
namespace {

__global__ void __launch_bounds__(kReduceThreads) finish_partials_kernel(int64_t blocks, const double* partial,
                                                                         double divisor, double* out) {
  __shared__ double scratch[32];
  double s = 0;
  for (int64_t b = threadIdx.x; b < blocks; b += kReduceThreads) s += partial[b];
  s = block_sum<kReduceThreads>(s, scratch);
  if (threadIdx.x == 0) *out = s / divisor;
}

__global__ void column_finish_kernel(int64_t blocks, int64_t cols, const double* partial, float* out) {
  for (int64_t c = global_thread(); c < cols; c += grid_threads()) {
    double s = 0;
    for (int64_t b = 0; b < blocks; ++b) s += partial[b * cols + c];
    out[c] += float(s);
  }
}

}  // namespace

void finish_partials(CudaHandle& h, int64_t blocks, const double* partial, double divisor, double* out) {
  finish_partials_kernel<<<1, kReduceThreads, 0, h.stream>>>(blocks, partial, divisor, out);
  PCV_CUDA_CHECK_LAUNCH("finish_partials_kernel");
}

void column_finish(CudaHandle& h, int64_t blocks, int64_t cols, const double* partial, float* out) {
  column_finish_kernel<<<grid_for(cols), kThreads, 0, h.stream>>>(blocks, cols, partial, out);
  PCV_CUDA_CHECK_LAUNCH("column_finish_kernel");
}

}  // namespace perceiver::cuda
