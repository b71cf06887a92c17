// Thread control (DESIGN.md #6). One OpenMP pool does all compute; OpenBLAS runs single-threaded
// inside it, so two pools never fight over the cores. hwloc reports the topology and can bind
// the pool's threads to distinct cores.
#pragma once

#include <string>
#include <vector>

namespace perceiver::threads {

/// Makes OpenBLAS single-threaded (our pool splits GEMMs). Idempotent; backends call it.
void init_blas();

/// The kernel family OpenBLAS chose at load time ("SkylakeX", "Haswell", ...).
std::string blas_core();

/// OpenBLAS 0.3.21 (Debian 12) does not recognise some current Xeons: it falls back to its
/// "Prescott" SSE3 kernels, 4-5x slower than the AVX-512 ones (30 vs 143 GFLOP/s measured here).
/// It reads OPENBLAS_CORETYPE only when it loads, so the fix is to set it and re-execute. Apps
/// call this first thing in main(); it returns normally when nothing needs fixing, when the user
/// set OPENBLAS_CORETYPE, or when re-executing fails (after one warning line on stderr).
void reexec_with_best_blas_core(char** argv);

/// Sets the OpenMP pool size; n <= 0 means one thread per physical core.
void set_num_threads(int n);
int num_threads();

/// Physical cores and hardware threads of this machine (hwloc), and the process's CPU set.
struct Topology {
  int packages = 0, cores = 0, pus = 0;
  int allowed_pus = 0;  // PUs in this process's CPU set (cgroups, taskset, mpirun --bind-to)
  std::string summary;  // one line for logs
};
Topology topology();

/// Binds OpenMP thread i to the i-th core of `cores` (hwloc logical indices; empty: all allowed
/// cores in order). Returns one line per thread describing the binding, for the start-up log.
std::vector<std::string> bind_compute_threads(const std::vector<int>& cores = {});

}  // namespace perceiver::threads
