#include "backend/cpu/cpu_workspace.h"

#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <cstdlib>

#include "perceiver/error.h"

namespace perceiver::cpu {

namespace {

constexpr size_t kMapBytes = size_t(1) << 20;  // from here on: mmap

struct Region {
  void* memory = nullptr;
  size_t bytes = 0;
  ~Region() { free_host(memory, bytes); }
};

}  // namespace

void* allocate_host(size_t bytes) {
  if (bytes == 0) return nullptr;
  if (bytes < kMapBytes) return std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : p;  // page-aligned
}

void discard_host(void* p, size_t bytes) {
  const auto page = uintptr_t(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (uintptr_t(p) + page - 1) / page * page, end = (uintptr_t(p) + bytes) / page * page;
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

void free_host(void* p, size_t bytes) {
  if (!p) return;
  if (bytes < kMapBytes) return std::free(p);
  munmap(p, bytes);
}

void* thread_scratch(Slot slot, size_t bytes) {
  thread_local std::array<Region, size_t(Slot::kCount)> regions;
  Region& r = regions[size_t(slot)];
  if (r.bytes < bytes) {
    free_host(r.memory, r.bytes);  // before the new one: the peak is the larger buffer, not both
    r.bytes = (bytes + 63) / 64 * 64;
    r.memory = allocate_host(r.bytes);
    PCV_CHECK(r.memory, "cpu: out of memory allocating ", bytes, " bytes of kernel scratch");
  }
  return r.memory;
}

}  // namespace perceiver::cpu
