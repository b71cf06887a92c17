// Deterministic reductions into double (the CPU's cpu_reduce.h with a fixed GPU tree):
//  - blocked_sum: Σ_i f(i) in blocks of kSumBlock elements, each summed by one block of threads
//    (strided per thread, then the block tree), then the partials summed by one block in order;
//  - column_sum: out[c] += Σ_r f(r, c) over row blocks of kRowBlock rows: one thread per (row
//    block, column) adds its rows in order, then one thread per column adds the blocks in order
//    (fixed, so reproducible; the CPU's blocks are max(16, rows/64) rows, so the two agree to
//    double rounding, not bitwise).
// f is a functor with a __device__ operator(); the partials live in Slot::kReduce.
#pragma once

#include "backend/cuda/cuda_device.cuh"

namespace perceiver::cuda {

inline constexpr int64_t kSumBlock = 8192;
inline constexpr int64_t kRowBlock = 256;
inline constexpr int kReduceThreads = 256;

template <class F>
__global__ void __launch_bounds__(kReduceThreads) blocked_partials(int64_t n, F f, double* partial) {
  __shared__ double scratch[32];
  const int64_t begin = int64_t(blockIdx.x) * kSumBlock, end = begin + kSumBlock < n ? begin + kSumBlock : n;
  double s = 0;
  for (int64_t i = begin + threadIdx.x; i < end; i += kReduceThreads) s += f(i);
  s = block_sum<kReduceThreads>(s, scratch);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

/// *out = (Σ partial[0, blocks)) / divisor, summed by one block in a fixed order (cuda_reduce.cu).
void finish_partials(CudaHandle& h, int64_t blocks, const double* partial, double divisor, double* out);

template <class F>
void blocked_sum(CudaHandle& h, int64_t n, F f, double divisor, double* out, const char* what) {
  const int64_t blocks = n > 0 ? (n + kSumBlock - 1) / kSumBlock : 0;
  double* partial = h.ws->get<double>(Slot::kReduce, size_t(blocks > 0 ? blocks : 1));
  if (blocks > 0) {
    blocked_partials<<<unsigned(blocks), kReduceThreads, 0, h.stream>>>(n, f, partial);
    PCV_CUDA_CHECK_LAUNCH(what);
  }
  finish_partials(h, blocks, partial, divisor, out);
}

template <class F>
__global__ void column_partials(int64_t rows, int64_t cols, int64_t blocks, F f, double* partial) {
  for (int64_t t = global_thread(); t < blocks * cols; t += grid_threads()) {
    const int64_t blk = t / cols, c = t % cols;
    const int64_t end = (blk + 1) * kRowBlock < rows ? (blk + 1) * kRowBlock : rows;
    double s = 0;
    for (int64_t r = blk * kRowBlock; r < end; ++r) s += f(r, c);
    partial[t] = s;
  }
}

/// out[c] += Σ_b partial[b·cols + c] in block order (cuda_reduce.cu).
void column_finish(CudaHandle& h, int64_t blocks, int64_t cols, const double* partial, float* out);

template <class F>
void column_sum(CudaHandle& h, int64_t rows, int64_t cols, F f, float* out, const char* what) {
  if (rows == 0 || cols == 0) return;
  const int64_t blocks = (rows + kRowBlock - 1) / kRowBlock;
  double* partial = h.ws->get<double>(Slot::kReduce, size_t(blocks * cols));
  column_partials<<<grid_for(blocks * cols), kThreads, 0, h.stream>>>(rows, cols, blocks, f, partial);
  PCV_CUDA_CHECK_LAUNCH(what);
  column_finish(h, blocks, cols, partial, out);
}

}  // namespace perceiver::cuda
