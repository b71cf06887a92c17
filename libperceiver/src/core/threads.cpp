#include "perceiver/threads.h"

#include "core/blas.h"

#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <sstream>

#include <hwloc.h>

#include "perceiver/error.h"

namespace perceiver::threads {
namespace {

struct TopologyDeleter {
  void operator()(hwloc_topology_t t) const { hwloc_topology_destroy(t); }
};
using TopologyPtr = std::unique_ptr<std::remove_pointer_t<hwloc_topology_t>, TopologyDeleter>;

TopologyPtr load_topology() {
  hwloc_topology_t t = nullptr;
  PCV_CHECK(hwloc_topology_init(&t) == 0, "hwloc_topology_init failed");
  TopologyPtr owner(t);
  PCV_CHECK(hwloc_topology_load(t) == 0, "hwloc_topology_load failed");
  return owner;
}

int count(hwloc_topology_t t, hwloc_obj_type_t type) {
  int n = hwloc_get_nbobjs_by_type(t, type);
  return n > 0 ? n : 0;
}

struct BitmapDeleter {
  void operator()(hwloc_bitmap_t b) const { hwloc_bitmap_free(b); }
};
using BitmapPtr = std::unique_ptr<std::remove_pointer_t<hwloc_bitmap_t>, BitmapDeleter>;

// The PUs of the given cores (hwloc logical indices; ones that do not exist are left out).
BitmapPtr cpuset_of(hwloc_topology_t t, const std::vector<int>& cores) {
  BitmapPtr set(hwloc_bitmap_alloc());
  PCV_CHECK(set, "hwloc_bitmap_alloc failed");
  for (int c : cores)
    if (hwloc_obj_t o = hwloc_get_obj_by_type(t, HWLOC_OBJ_CORE, unsigned(c))) hwloc_bitmap_or(set.get(), set.get(), o->cpuset);
  return set;
}

}  // namespace

void set_num_threads(int n) {
  blas::init_blas();
  if (n <= 0) n = std::max(1, topology().cores);
  omp_set_num_threads(n);
}

int num_threads() { return omp_get_max_threads(); }

Topology topology() {
  TopologyPtr t = load_topology();
  Topology out;
  out.packages = count(t.get(), HWLOC_OBJ_PACKAGE);
  out.cores = count(t.get(), HWLOC_OBJ_CORE);
  out.pus = count(t.get(), HWLOC_OBJ_PU);
  hwloc_bitmap_t set = hwloc_bitmap_alloc();
  if (hwloc_get_cpubind(t.get(), set, HWLOC_CPUBIND_PROCESS) == 0)
    out.allowed_pus = hwloc_bitmap_weight(set);
  else
    out.allowed_pus = out.pus;
  hwloc_bitmap_free(set);
  std::ostringstream os;
  os << out.packages << " package(s), " << out.cores << " core(s), " << out.pus
     << " hardware thread(s), " << out.allowed_pus << " usable by this process, "
     << num_threads() << " compute thread(s)";
  out.summary = os.str();
  return out;
}

bool bind_process(const std::vector<int>& cores) {
  TopologyPtr t = load_topology();
  const BitmapPtr set = cpuset_of(t.get(), cores);
  const bool ok = !hwloc_bitmap_iszero(set.get()) && hwloc_set_cpubind(t.get(), set.get(), HWLOC_CPUBIND_PROCESS) == 0;
  if (!ok) std::fprintf(stderr, "warning: could not bind the process to its cores\n");
  return ok;
}

std::vector<std::string> bind_compute_threads(const std::vector<int>& cores) {
  TopologyPtr t = load_topology();
  std::vector<int> use = cores;
  if (use.empty()) {
    for (int i = 0; i < count(t.get(), HWLOC_OBJ_CORE); ++i) use.push_back(i);
  }
  PCV_CHECK(!use.empty(), "no cores to bind to");
  const int n = num_threads();
  std::vector<std::string> lines(n);
  std::vector<std::string> errors(n);
#pragma omp parallel num_threads(n)
  {
    const int i = omp_get_thread_num();
    const int core_index = use[i % use.size()];
    hwloc_obj_t core = hwloc_get_obj_by_type(t.get(), HWLOC_OBJ_CORE, unsigned(core_index));
    if (!core) {
      errors[i] = "core " + std::to_string(core_index) + " does not exist";
    } else if (hwloc_set_cpubind(t.get(), core->cpuset, HWLOC_CPUBIND_THREAD) != 0) {
      errors[i] = "hwloc_set_cpubind failed for core " + std::to_string(core_index);
    } else {
      lines[i] = "compute thread " + std::to_string(i) + " -> core L#" + std::to_string(core_index);
    }
  }
  for (const auto& e : errors) PCV_CHECK(e.empty(), "thread binding: ", e);
  return lines;
}

CorePlacement split_cores(const std::vector<int>& cores, int loader_threads) {
  PCV_CHECK(!cores.empty(), "split_cores: no cores");
  if (cores.size() == 1) return {cores, cores};
  const size_t loader = size_t(std::clamp(loader_threads, 1, int(cores.size()) - 1));
  return {{cores.begin(), cores.end() - long(loader)}, {cores.end() - long(loader), cores.end()}};
}

namespace {

std::mutex g_loader_mutex;
std::vector<int> g_loader_cores;  // guarded by g_loader_mutex

}  // namespace

void set_loader_cores(const std::vector<int>& cores) {
  std::lock_guard lock(g_loader_mutex);
  g_loader_cores = cores;
}

void bind_loader_thread() {
  std::vector<int> cores;
  {
    std::lock_guard lock(g_loader_mutex);
    cores = g_loader_cores;
  }
  if (cores.empty()) return;
  TopologyPtr t = load_topology();
  const BitmapPtr set = cpuset_of(t.get(), cores);
  const bool ok = !hwloc_bitmap_iszero(set.get()) && hwloc_set_cpubind(t.get(), set.get(), HWLOC_CPUBIND_THREAD) == 0;
  if (!ok) std::fprintf(stderr, "warning: could not bind a loader thread to its cores\n");
}

std::vector<int> current_thread_cores() {
  TopologyPtr t = load_topology();
  const BitmapPtr set(hwloc_bitmap_alloc());
  std::vector<int> out;
  if (set && hwloc_get_cpubind(t.get(), set.get(), HWLOC_CPUBIND_THREAD) == 0) {
    const int n = count(t.get(), HWLOC_OBJ_CORE);
    for (int i = 0; i < n; ++i) {
      hwloc_obj_t core = hwloc_get_obj_by_type(t.get(), HWLOC_OBJ_CORE, unsigned(i));
      if (core && hwloc_bitmap_intersects(set.get(), core->cpuset)) out.push_back(i);
    }
  }
  return out;
}

}  // namespace perceiver::threads
