// The CPU backend: host memory, the reference kernels of cpu_kernels.h, float and double. With
// precision bf16 its float table multiplies bf16 operands (cpu_bf16.h); make_backend checks first
// that the build and the CPU can.
#pragma once

#include "perceiver/backend.h"

namespace perceiver::cpu {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(Precision precision = Precision::kFp32);
  std::string name() const override { return "cpu"; }
  std::string describe() const override;
  Buffer allocate(size_t bytes) override;
  void zero(void* dst, size_t bytes) override;
  void discard(void* data, size_t bytes) override;
  void copy_to_device(void* dst, const void* src, size_t bytes) override;
  void copy_to_host(void* dst, const void* src, size_t bytes) override;
  // Both even out the kernels' per-thread scratch (cpu_workspace.h): the host reads results
  // between steps.
  void synchronize() override;
  bool host_accessible() const override { return true; }
  Precision precision() const override { return precision_; }
  // In float32 only: with bf16 products the backward recomputes Q·Kᵀ for less than it costs to
  // write and read back the kept scores (kinetics700 on a Sapphire Rapids, AMX: batch 4 1.25-1.26
  // against 1.17-1.18 examples/s, peak RSS 1365 against 1988 MB; batch 1 the same speed, 522
  // against 678 MB); in float32 keeping them is 5% faster (batch 1: 0.46-0.47 against 0.44-0.45).
  bool keeps_attention_scores() const override { return precision_ == Precision::kFp32; }
  bool merges_attention_chunks() const override { return true; }
  const KernelTable<float>& kernels_f32() const override;
  const KernelTable<double>* kernels_f64() const override;

 private:
  Precision precision_;
};

}  // namespace perceiver::cpu
