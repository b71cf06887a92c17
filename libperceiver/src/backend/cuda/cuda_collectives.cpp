#include "backend/cuda/cuda_collectives.h"

#include <nccl.h>

#include <cstring>

#include "backend/cuda/cuda_check.h"

#define PCV_NCCL_CHECK(call)                                                                              \
  do {                                                                                                    \
    const ncclResult_t pcv_nr_ = (call);                                                                  \
    if (pcv_nr_ != ncclSuccess)                                                                           \
      ::perceiver::detail::throw_error(__FILE__, __LINE__, "", #call, " failed: ", ncclGetErrorString(pcv_nr_), \
                                       " (", ncclGetLastError(nullptr), ")");                            \
  } while (0)

namespace perceiver::cuda {
namespace {

static_assert(sizeof(ncclUniqueId) == kNcclIdBytes, "NCCL's unique id changed size");

// Sums run on their own stream: a bucket's allreduce overlaps the backward pass that is still
// computing earlier layers' gradients on the compute stream (dist/communicator.h buckets).
class NcclCollectives final : public DeviceCollectives {
 public:
  NcclCollectives(const void* id, int rank, int world, cudaStream_t compute) : compute_(compute) {
    ncclUniqueId uid;
    std::memcpy(&uid, id, sizeof uid);
    PCV_CUDA_CHECK(cudaStreamCreateWithFlags(&comm_stream_, cudaStreamNonBlocking));
    PCV_CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
    PCV_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
    PCV_NCCL_CHECK(ncclCommInitRank(&comm_, world, uid, rank));
  }
  ~NcclCollectives() override {
    if (comm_) {
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      if (async == ncclSuccess) {
        cudaStreamSynchronize(comm_stream_);
        ncclCommDestroy(comm_);
      } else {
        ncclCommAbort(comm_);  // a failed communicator cannot be destroyed cleanly
      }
    }
    cudaEventDestroy(ready_);
    cudaEventDestroy(done_);
    cudaStreamDestroy(comm_stream_);
  }
  NcclCollectives(const NcclCollectives&) = delete;
  NcclCollectives& operator=(const NcclCollectives&) = delete;

  void start_sum(float* x, int64_t n) override {
    PCV_CUDA_CHECK(cudaEventRecord(ready_, compute_));
    PCV_CUDA_CHECK(cudaStreamWaitEvent(comm_stream_, ready_, 0));
    PCV_NCCL_CHECK(ncclAllReduce(x, x, size_t(n), ncclFloat, ncclSum, comm_, comm_stream_));
    recorded_ = false;
  }

  bool done() override {
    ncclResult_t async = ncclSuccess;
    PCV_NCCL_CHECK(ncclCommGetAsyncError(comm_, &async));
    PCV_CHECK(async == ncclSuccess, "NCCL allreduce failed: ", ncclGetErrorString(async), " (",
              ncclGetLastError(comm_), ")");
    if (!recorded_) {
      PCV_CUDA_CHECK(cudaEventRecord(done_, comm_stream_));
      recorded_ = true;
    }
    const cudaError_t q = cudaEventQuery(done_);
    if (q == cudaErrorNotReady) return false;
    PCV_CUDA_CHECK(q);
    return true;
  }

  void join() override {
    if (!recorded_) {
      PCV_CUDA_CHECK(cudaEventRecord(done_, comm_stream_));
      recorded_ = true;
    }
    PCV_CUDA_CHECK(cudaStreamWaitEvent(compute_, done_, 0));
  }

 private:
  cudaStream_t compute_ = nullptr, comm_stream_ = nullptr;
  cudaEvent_t ready_ = nullptr, done_ = nullptr;
  ncclComm_t comm_ = nullptr;
  bool recorded_ = false;
};

}  // namespace

void make_nccl_id(void* id) {
  ncclUniqueId uid;
  PCV_NCCL_CHECK(ncclGetUniqueId(&uid));
  std::memcpy(id, &uid, sizeof uid);
}

std::unique_ptr<DeviceCollectives> join_nccl(const void* id, int rank, int world, cudaStream_t compute) {
  return std::make_unique<NcclCollectives>(id, rank, world, compute);
}

}  // namespace perceiver::cuda
