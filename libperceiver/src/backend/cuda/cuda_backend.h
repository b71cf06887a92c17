// The CUDA backend (--device cuda): device memory from cudaMalloc (one allocation per arena the
// library asks for), every op on one stream (kernels in the .cu files beside this, products
// through cuBLASLt), uploads staged through pinned host memory and copied asynchronously, NCCL
// for the gradient allreduce across GPUs. This header names no CUDA type, so the registry
// (compiled without the CUDA headers) can include it.
#pragma once

#include <memory>

#include "perceiver/backend.h"

namespace perceiver::cuda {

class CudaBackend final : public Backend {
 public:
  /// Opens GPU `options.device_index`, or the MPI local rank's GPU (OMPI_COMM_WORLD_LOCAL_RANK,
  /// MPI_LOCALRANKID, SLURM_LOCALID), or GPU 0. Throws perceiver::Error with a HINT when there
  /// is no driver, no GPU, or not that GPU.
  explicit CudaBackend(const BackendOptions& options);
  ~CudaBackend() override;
  std::string name() const override { return "cuda"; }
  std::string describe() const override;
  Buffer allocate(size_t bytes) override;
  void zero(void* dst, size_t bytes) override;
  void copy_to_device(void* dst, const void* src, size_t bytes) override;
  void copy_to_host(void* dst, const void* src, size_t bytes) override;
  void synchronize() override;
  void* handle() const override;
  Precision precision() const override;
  /// 16384 rows: the CPU's 2048 gave the GPU K/V projections of fewer output tiles than it has
  /// SMs, and ~10 launches per chunk. On an H200, kinetics700 batch 8: +19% (fp32) and +40% (bf16)
  /// examples/s at the same peak memory; 65536 gave 3-9% more for +1 GB (bench/README.md).
  int64_t preferred_row_chunk() const override { return 16384; }
  const KernelTable<float>& kernels_f32() const override;
  std::optional<MemoryStats> memory_stats() const override;
  size_t collectives_id_bytes() const override;
  void make_collectives_id(void* id) const override;
  std::unique_ptr<DeviceCollectives> join_collectives(const void* id, int rank, int world) override;

  /// The GPU ordinal this backend runs on.
  int device() const;

  struct State;  // the stream, library handles, staging and counters (cuda_backend.cpp)

 private:
  std::unique_ptr<State> s_;
};

/// The filled op table (cuda_table.cpp): untimed_kernel_table(), or its timed copy under
/// PERCEIVER_CUDA_PROFILE (cuda_profile.h).
const KernelTable<float>& kernel_table();
const KernelTable<float>& untimed_kernel_table();

/// The GPU ordinal for `options` (device_index, else the local-rank environment, else 0), or a
/// negative value when none is named. Exposed for tests.
int requested_device(const BackendOptions& options);

}  // namespace perceiver::cuda
