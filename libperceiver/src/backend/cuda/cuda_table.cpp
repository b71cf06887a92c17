// The CUDA backend's op table: every slot of PCV_KERNEL_OPS, checked complete; each op timed
// when PERCEIVER_CUDA_PROFILE is set (cuda_profile.h).
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_profile.h"

namespace perceiver::cuda {

const KernelTable<float>& untimed_kernel_table() {
  static const KernelTable<float> table = [] {
    KernelTable<float> t;
#define PCV_CUDA_OP(op) t.op = &cuda::op;
    PCV_KERNEL_OPS(PCV_CUDA_OP)
#undef PCV_CUDA_OP
    check_complete(t, "cuda");
    return t;
  }();
  return table;
}

const KernelTable<float>& kernel_table() {
  static const KernelTable<float> table = profiling_requested() ? profiled_table() : untimed_kernel_table();
  return table;
}

}  // namespace perceiver::cuda
