// The entry point of libperceiver_cuda.so, the CUDA backend's own library in a shared build. The
// registry dlopens it the first time --device cuda is asked for (backend/registry.cpp), so a run
// on the CPU never loads the CUDA runtime, cuBLASLt or NCCL: cuBLASLt alone adds ~150 MB of
// resident memory to a process the moment it is loaded.
#include "backend/cuda/cuda_backend.h"

extern "C" __attribute__((visibility("default"))) perceiver::Backend* perceiver_cuda_make_backend(
    const perceiver::BackendOptions* options) {
  return new perceiver::cuda::CudaBackend(*options);
}
