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
  void synchronize() override {}
  bool host_accessible() const override { return true; }
  Precision precision() const override { return precision_; }
  bool keeps_attention_scores() const override { return true; }
  bool merges_attention_chunks() const override { return true; }
  const KernelTable<float>& kernels_f32() const override;
  const KernelTable<double>* kernels_f64() const override;

 private:
  Precision precision_;
};

}  // namespace perceiver::cpu
