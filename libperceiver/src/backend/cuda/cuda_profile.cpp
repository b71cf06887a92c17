#include "backend/cuda/cuda_profile.h"

#include <cuda_runtime.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_context.h"
#include "backend/profile/op_profile.h"

namespace perceiver::cuda {
namespace {

// One op's span on the GPU: events on the backend's stream around it, waited for at once.
struct CudaEventTimer {
  static constexpr const char* kTitle =
      "PERCEIVER_CUDA_PROFILE: GPU time by op and shape, every step (warm-up included)";
  static const KernelTable<float>& inner() { return untimed_kernel_table(); }
  template <class F>
  static double time(void* h, F&& call) {
    static thread_local cudaEvent_t start = nullptr, stop = nullptr;
    if (!start) {
      PCV_CUDA_CHECK(cudaEventCreate(&start));
      PCV_CUDA_CHECK(cudaEventCreate(&stop));
    }
    const cudaStream_t stream = handle_of(h).stream;
    PCV_CUDA_CHECK(cudaEventRecord(start, stream));
    call();
    PCV_CUDA_CHECK(cudaEventRecord(stop, stream));
    PCV_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    PCV_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    return ms;
  }
};

}  // namespace

bool profiling_requested() {
  static const bool on = profile::requested("PERCEIVER_CUDA_PROFILE");
  return on;
}

KernelTable<float> profiled_table() { return profile::timed_table<CudaEventTimer>(); }

}  // namespace perceiver::cuda
