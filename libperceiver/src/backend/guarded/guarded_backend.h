// The "guarded" backend: the CPU kernels, but its memory can only be touched by its own ops and
// copies. Every allocation is its own mapping, kept PROT_NONE except while an op or a copy of
// this backend runs, so any host code that reads or writes tensor data behind the backend's back
// (the mistake a GPU would turn into garbage or a crash much later) is a segfault at the spot.
// Results are bitwise those of the cpu backend. Slow (two mprotect calls per allocation and op):
// for tests and for checking a new code path before it meets a device (--device guarded).
#pragma once

#include <memory>

#include "perceiver/backend.h"

namespace perceiver::guarded {

class GuardedBackend final : public Backend {
 public:
  GuardedBackend();
  ~GuardedBackend() override;
  std::string name() const override { return "guarded"; }
  std::string describe() const override;
  Buffer allocate(size_t bytes) override;
  void zero(void* dst, size_t bytes) override;
  void copy_to_device(void* dst, const void* src, size_t bytes) override;
  void copy_to_host(void* dst, const void* src, size_t bytes) override;
  void synchronize() override {}
  void* handle() const override;
  bool keeps_attention_scores() const override { return true; }  // the cpu kernels'
  bool merges_attention_chunks() const override { return true; }
  const KernelTable<float>& kernels_f32() const override;
  const KernelTable<double>* kernels_f64() const override;

  struct State;  // the mappings and their lock (guarded_backend.cpp)

 private:
  std::unique_ptr<State> state_;
};

}  // namespace perceiver::guarded
