#include "backend/cpu/cpu_workspace.h"

#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <atomic>
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

Buffer host_buffer(size_t bytes) {
  void* p = allocate_host(bytes);
  PCV_CHECK(p || !bytes, "cpu: out of memory allocating ", bytes, " bytes");
  return Buffer(p, bytes, [bytes](void* q) { free_host(q, bytes); });
}

namespace {

// Each thread's regions, and per slot the most any thread asked for inside a parallel region.
thread_local std::array<Region, size_t(Slot::kCount)> t_regions;
std::array<std::atomic<size_t>, size_t(Slot::kCount)> g_parallel_peak{};
std::atomic<bool> g_uneven{false};  // a peak rose since the last even_out_thread_scratch
std::atomic<int> g_evened_team{1};  // the team size that last call grew

// False, with the region empty, when the memory is not there.
bool grow(Region& r, size_t bytes) {
  free_host(r.memory, r.bytes);  // before the new one: the peak is the larger buffer, not both
  const size_t rounded = (bytes + 63) / 64 * 64;
  r.memory = allocate_host(rounded);
  r.bytes = r.memory ? rounded : 0;
  return r.memory != nullptr;
}

// Also when this thread's region is already big enough: another thread may get this item later.
void note_parallel_request(Slot slot, size_t bytes) {
  std::atomic<size_t>& peak = g_parallel_peak[size_t(slot)];
  size_t seen = peak.load(std::memory_order_relaxed);
  if (seen >= bytes) return;
  while (seen < bytes && !peak.compare_exchange_weak(seen, bytes, std::memory_order_relaxed)) {
  }
  g_uneven.store(true, std::memory_order_relaxed);
}

}  // namespace

void* thread_scratch(Slot slot, size_t bytes) {
  if (omp_in_parallel()) note_parallel_request(slot, bytes);
  Region& r = t_regions[size_t(slot)];
  if (r.bytes < bytes) PCV_CHECK(grow(r, bytes), "cpu: out of memory allocating ", bytes, " bytes of kernel scratch");
  return r.memory;
}

void even_out_thread_scratch() {
  // Only from the host thread's top level: a nested team would grow threads that are not the pool.
  if (omp_get_level() != 0) return;
  const int team = omp_get_max_threads();
  if (!g_uneven.load(std::memory_order_relaxed) && team <= g_evened_team.load(std::memory_order_relaxed)) return;
  g_uneven.store(false, std::memory_order_relaxed);
  g_evened_team.store(team, std::memory_order_relaxed);
  std::atomic<size_t> missing{0};  // an exception may not leave a parallel region
#pragma omp parallel
  for (size_t s = 0; s < size_t(Slot::kCount); ++s) {
    const size_t peak = g_parallel_peak[s].load(std::memory_order_relaxed);
    if (t_regions[s].bytes < peak && !grow(t_regions[s], peak)) missing.store(peak, std::memory_order_relaxed);
  }
  PCV_CHECK(missing.load() == 0, "cpu: out of memory allocating ", missing.load(), " bytes of kernel scratch");
}

}  // namespace perceiver::cpu
