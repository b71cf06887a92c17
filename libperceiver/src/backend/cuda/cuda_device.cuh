// Device-side helpers of the CUDA kernels: launch shapes and deterministic warp and block
// reductions. A reduction's tree is fixed by the block size (a compile-time constant of each
// kernel), never by the GPU, so results are reproducible run to run.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_context.h"

namespace perceiver::cuda {

inline constexpr int kThreads = 256;

/// Blocks for a grid-stride loop over n elements (at least 1, at most 2^20: every block loops).
inline unsigned grid_for(int64_t n, int threads = kThreads) {
  const int64_t blocks = (n + threads - 1) / threads;
  return unsigned(blocks < 1 ? 1 : blocks > (int64_t(1) << 20) ? (int64_t(1) << 20) : blocks);
}

/// Grid-stride loop index helpers.
__device__ __forceinline__ int64_t global_thread() { return int64_t(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ __forceinline__ int64_t grid_threads() { return int64_t(gridDim.x) * blockDim.x; }

/// Σ over the warp's lanes; every lane gets the same value (the xor butterfly adds the same
/// pairs in every lane, and a + b == b + a exactly).
template <class T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

template <class T>
__device__ __forceinline__ T warp_max(T v) {
  for (int o = 16; o > 0; o >>= 1) {
    const T w = __shfl_xor_sync(0xffffffffu, v, o);
    v = w > v ? w : v;
  }
  return v;
}

/// Σ over a block of `Threads` threads (a multiple of 32, at most 1024); every thread gets the
/// result. `scratch` is 32 values of shared memory; the call ends with a barrier so the same
/// scratch can serve the next reduction.
template <int Threads, class T>
__device__ __forceinline__ T block_sum(T v, T* scratch) {
  static_assert(Threads % 32 == 0 && Threads <= 1024, "block reductions need whole warps");
  constexpr int kWarps = Threads / 32;
  v = warp_sum(v);
  if constexpr (kWarps == 1) return v;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T s = lane < kWarps ? scratch[lane] : T(0);
  s = warp_sum(s);
  __syncthreads();
  return s;
}

template <int Threads, class T>
__device__ __forceinline__ T block_max(T v, T* scratch) {
  static_assert(Threads % 32 == 0 && Threads <= 1024, "block reductions need whole warps");
  constexpr int kWarps = Threads / 32;
  v = warp_max(v);
  if constexpr (kWarps == 1) return v;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T s = lane < kWarps ? scratch[lane] : scratch[0];
  s = warp_max(s);
  __syncthreads();
  return s;
}

/// Stores float results as float or bfloat16 (the next product's operand).
__device__ __forceinline__ void store(float* p, float v) { *p = v; }
__device__ __forceinline__ void store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

}  // namespace perceiver::cuda
