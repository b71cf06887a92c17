// The handle every CUDA kernel receives as KernelTable's `void* h`: the backend's stream, the
// cuBLASLt handle and its workspace, the precision of the matrix products, and the kernels'
// device scratch. Host code (g++) and kernels (nvcc) both include this header.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <array>
#include <cstddef>
#include <memory>

#include "perceiver/backend.h"

namespace perceiver::cuda {

/// What a kernel's scratch memory is for. Each op uses its own slots, and every op runs on the
/// one stream, so an op never sees another op's slot in use.
enum class Slot : int {
  kGemmA,       // bf16 copy of a GEMM's A operand
  kGemmB,       // bf16 copy of a GEMM's B operand
  kReduce,      // double partial sums of reductions and column sums
  kAttnS,       // attention scores / probabilities of one key chunk (or a head's P ⊙ mask)
  kAttnDP,      // attention dP / dS of one key chunk
  kAttnS16,     // the same in bf16, the next GEMM's operand
  kAttnDP16,
  kAttnQ16,     // bf16 Q (and dO) of one attention call, reused by every key chunk
  kAttnDO16,
  kAttnStats,   // per-row running max / delta of one attention call
  kAttnStats2,  // per-row running sum
  kCount
};

/// Device scratch by slot. A slot grows to the largest size asked for (during the first step;
/// the backend's MemoryStats count it), so later steps allocate nothing.
class Workspace {
 public:
  Workspace(Backend& backend, cudaStream_t stream) : backend_(&backend), stream_(stream) {}
  /// At least `bytes` of the slot's memory, valid until the next get() of the same slot.
  void* get(Slot slot, size_t bytes);
  template <class T>
  T* get(Slot slot, size_t count) {
    return static_cast<T*>(get(slot, count * sizeof(T)));
  }

 private:
  Backend* backend_;
  cudaStream_t stream_;
  std::array<Buffer, size_t(Slot::kCount)> slots_;
};

class GemmPlans;  // cuda_gemm.h: cuBLASLt algorithms by problem

struct CudaHandle {
  cudaStream_t stream = nullptr;
  cublasLtHandle_t lt = nullptr;
  void* lt_workspace = nullptr;     // cuBLASLt's own workspace (fixed size: reproducible results)
  size_t lt_workspace_bytes = 0;
  Precision precision = Precision::kFp32;
  int sm_count = 1;
  Workspace* ws = nullptr;
  GemmPlans* plans = nullptr;
};

inline CudaHandle& handle_of(void* h) { return *static_cast<CudaHandle*>(h); }

}  // namespace perceiver::cuda
