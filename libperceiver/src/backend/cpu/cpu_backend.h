// The CPU backend: host memory, the reference kernels of cpu_kernels.h, float and double.
#pragma once

#include "perceiver/backend.h"

namespace perceiver::cpu {

class CpuBackend final : public Backend {
 public:
  CpuBackend();
  std::string name() const override { return "cpu"; }
  std::string describe() const override;
  Buffer allocate(size_t bytes) override;
  void zero(void* dst, size_t bytes) override;
  void copy_to_device(void* dst, const void* src, size_t bytes) override;
  void copy_to_host(void* dst, const void* src, size_t bytes) override;
  void synchronize() override {}
  bool host_accessible() const override { return true; }
  const KernelTable<float>& kernels_f32() const override;
  const KernelTable<double>* kernels_f64() const override;
};

}  // namespace perceiver::cpu
