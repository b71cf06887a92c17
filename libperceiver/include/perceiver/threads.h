// Thread control (DESIGN.md #6). One OpenMP pool does all compute; the CPU backend's BLAS runs
// single-threaded inside it, so two pools never fight over the cores. hwloc reports the topology
// and can bind the pool's threads to distinct cores.
#pragma once

#include <string>
#include <vector>

namespace perceiver::threads {

/// Makes sure the CPU backend runs its fastest kernels for this CPU. Some choices can only be
/// made before the process loads its math libraries, so this may re-execute the program once
/// (with the same argv). Call it first thing in main(); it returns normally when nothing needs
/// fixing, when the user made the choice in the environment, or when re-executing fails (after
/// one warning line on stderr).
void use_fastest_cpu_kernels(char** argv);

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

/// Binds the whole process (threads started later inherit it) to the cores `cores` (hwloc
/// logical indices). Returns false, after a warning on stderr, if the binding failed.
bool bind_process(const std::vector<int>& cores);

/// Binds OpenMP thread i to the i-th core of `cores` (hwloc logical indices; empty: all allowed
/// cores in order). Returns one line per thread describing the binding, for the start-up log.
std::vector<std::string> bind_compute_threads(const std::vector<int>& cores = {});

/// Separate cores for compute and data loading (--bind): of `cores`, the last
/// min(loader_threads, cores - 1) go to the loader and the rest to compute. With one core there
/// is nothing to separate and both lists are that core.
struct CorePlacement {
  std::vector<int> compute, loader;
};
CorePlacement split_cores(const std::vector<int>& cores, int loader_threads);

/// Where data loader threads run (--bind): each loader worker binds itself to the union of these
/// cores when it starts. Empty (the default): workers keep the affinity they inherit.
void set_loader_cores(const std::vector<int>& cores);
/// Binds the calling thread to the loader cores, if set (called by loader workers as they start).
void bind_loader_thread();
/// The cores (hwloc logical indices) the calling thread may run on, for logs and tests.
std::vector<int> current_thread_cores();

}  // namespace perceiver::threads
