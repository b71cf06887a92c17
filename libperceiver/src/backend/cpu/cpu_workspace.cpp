#include "backend/cpu/cpu_workspace.h"

#include <array>
#include <cstdlib>
#include <memory>

#include "perceiver/error.h"

namespace perceiver::cpu {

namespace {

struct Free {
  void operator()(void* p) const { std::free(p); }
};

struct Region {
  std::unique_ptr<void, Free> memory;
  size_t bytes = 0;
};

}  // namespace

void* thread_scratch(Slot slot, size_t bytes) {
  thread_local std::array<Region, size_t(Slot::kCount)> regions;
  Region& r = regions[size_t(slot)];
  if (r.bytes < bytes) {
    const size_t rounded = (bytes + 63) / 64 * 64;
    r.memory.reset();  // before the new one: the peak is the larger buffer, not both
    r.memory.reset(std::aligned_alloc(64, rounded));
    PCV_CHECK(r.memory, "cpu: out of memory allocating ", bytes, " bytes of kernel scratch");
    r.bytes = rounded;
  }
  return r.memory.get();
}

}  // namespace perceiver::cpu
