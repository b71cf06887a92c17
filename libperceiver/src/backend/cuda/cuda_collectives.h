// NCCL collectives for data-parallel training, one rank per GPU (perceiver/backend.h
// DeviceCollectives). The communicator is bootstrapped through MPI: rank 0 makes the
// ncclUniqueId, MPI broadcasts it (dist/communicator.cpp), every rank joins with its rank.
#pragma once

#include <cuda_runtime.h>

#include <memory>

#include "perceiver/backend.h"

namespace perceiver::cuda {

inline constexpr size_t kNcclIdBytes = 128;  // sizeof(ncclUniqueId), NCCL_UNIQUE_ID_BYTES

/// rank 0's id for a new communicator (ncclGetUniqueId).
void make_nccl_id(void* id);

/// Joins `world` ranks (blocks until all have), with sums on a stream of their own that waits
/// for `compute` and that `compute` waits for at join().
std::unique_ptr<DeviceCollectives> join_nccl(const void* id, int rank, int world, cudaStream_t compute);

}  // namespace perceiver::cuda
