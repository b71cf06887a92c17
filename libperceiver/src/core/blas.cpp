// OpenBLAS setup and the choice of its kernel set by CPU features (DESIGN.md #6).
#include "core/blas.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <mutex>

#include "perceiver/threads.h"

extern "C" void openblas_set_num_threads(int);
extern "C" char* openblas_get_corename(void);

namespace perceiver::blas {
namespace {

// A kernel tier: the CPU features it needs, the sets OpenBLAS may load for it that run its
// fastest SGEMM kernels, and the set to force otherwise (a name OPENBLAS_CORETYPE accepts in
// 0.3.21, where "Cooperlake" is not one).
struct Tier {
  bool (*supported)(const CpuFeatures&);
  std::initializer_list<const char*> good;
  const char* force;
};

// Fastest first. Cooperlake and SapphireRapids differ from SkylakeX only in their bf16 kernels.
const Tier kTiers[] = {
    {[](const CpuFeatures& f) { return f.avx512_core(); }, {"SkylakeX", "Cooperlake", "SapphireRapids"}, "SkylakeX"},
    {[](const CpuFeatures& f) { return f.avx2 && f.fma; }, {"Haswell", "Zen"}, "Haswell"},
};

// The features a decision rests on, for the log line.
std::string basis(const CpuFeatures& f) {
  CpuFeatures shown;
  if (f.avx512_core()) {
    shown.avx512f = shown.avx512bw = shown.avx512dq = shown.avx512vl = true;
    shown.avx512_bf16 = f.avx512_bf16;
    shown.amx_tile = f.amx_tile;
    shown.amx_bf16 = f.amx_bf16;
  } else {
    shown.avx2 = f.avx2;
    shown.fma = f.fma;
  }
  return "CPU features " + shown.names();
}

// OpenBLAS's pthread build starts its own pool of threads when it loads, and an idle pool
// thread spins for about 0.1 s (its thread timeout) before it sleeps: beside our OpenMP pool on
// a 2-core node that stalled the first steps of every process, ~50 ms each (perceiver-bench
// --config tiny: 60 and 48 ms against 3 and 0 with OPENBLAS_NUM_THREADS=1), and every test. We
// call OpenBLAS single-threaded only, so its pool goes; a later threaded call (bench_ops'
// ceiling_sgemm_blas) starts it again. Looked up, not linked: only the pthread build has it.
void shut_down_blas_pool() {
  void* lib = dlopen("libopenblas.so.0", RTLD_LAZY | RTLD_NOLOAD);
  if (!lib) return;
  using Shutdown = int (*)();
  if (auto shutdown = reinterpret_cast<Shutdown>(dlsym(lib, "blas_thread_shutdown_"))) shutdown();
  dlclose(lib);  // the reference RTLD_NOLOAD took; the library stays loaded
}

}  // namespace

void init_blas() {
  static std::once_flag once;
  std::call_once(once, [] {
    openblas_set_num_threads(1);
    shut_down_blas_pool();
  });
}

std::string blas_core() {
  const char* name = openblas_get_corename();
  return name ? name : "unknown";
}

CoreChoice choose_core(const CpuFeatures& features, const std::string& loaded) {
  for (const Tier& tier : kTiers) {
    if (!tier.supported(features)) continue;
    const bool good = std::any_of(tier.good.begin(), tier.good.end(), [&](const char* g) { return loaded == g; });
    return {good ? "" : tier.force, basis(features)};
  }
  return {"", "no AVX2+FMA or AVX-512 on this CPU"};
}

namespace {

// "; SkylakeX would suit CPU features ... (HINT: <how>)" where `choice` calls for another set, else
// empty: the start-up line's suggestion, after the user's set or after OpenBLAS's own pick.
std::string better_set(const CoreChoice& choice, const std::string& how) {
  if (choice.force.empty()) return "";
  return "; " + choice.force + " would suit " + choice.basis + " (HINT: " + how + ")";
}

std::string user_set_hint(const CoreChoice& choice) {
  return better_set(choice, "unset OPENBLAS_CORETYPE, or set it to " + choice.force);
}

}  // namespace

std::string slower_than_needed(const CpuFeatures& features, const std::string& loaded) {
  return user_set_hint(choose_core(features, loaded));
}

std::string kernel_summary() {
  const std::string core = blas_core();
  const char* env = std::getenv("OPENBLAS_CORETYPE");
  const char* own_pick = std::getenv(kOwnPickVariable);
  const CoreChoice choice = choose_core(host_cpu_features(), own_pick ? own_pick : core);
  if (env && own_pick) {
    if (core == env) return core + ", chosen from " + choice.basis + " (OpenBLAS alone picked " + own_pick + ")";
    return core + ": OPENBLAS_CORETYPE=" + env + ", chosen from " + choice.basis + ", was not accepted by this OpenBLAS";
  }
  if (env) return core + ", from OPENBLAS_CORETYPE=" + env + " set by the user" + user_set_hint(choice);
  if (!choice.force.empty())
    return core + ", OpenBLAS's own pick" +
           better_set(choice, "call threads::use_fastest_cpu_kernels first, or set OPENBLAS_CORETYPE=" + choice.force);
  return core + ", OpenBLAS's own pick, kept (" + choice.basis + ")";
}

}  // namespace perceiver::blas

namespace perceiver::threads {

// OpenBLAS reads OPENBLAS_CORETYPE only when it loads, so a better set means setting it and
// re-executing. 0.3.21 (Debian 12) picks by CPU model and misjudges models it does not know:
// SSE3 "Prescott" kernels on some current Xeons, 4-5x slower than SkylakeX there.
void use_fastest_cpu_kernels(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE")) return;  // the user's choice, or we already re-executed
  const std::string core = blas::blas_core();
  const blas::CoreChoice choice = blas::choose_core(host_cpu_features(), core);
  if (choice.force.empty()) return;
  setenv("OPENBLAS_CORETYPE", choice.force.c_str(), 1);
  setenv(blas::kOwnPickVariable, core.c_str(), 1);
  execv("/proc/self/exe", argv);
  unsetenv("OPENBLAS_CORETYPE");
  unsetenv(blas::kOwnPickVariable);
  std::fprintf(stderr, "warning: OpenBLAS chose its '%s' kernels on this CPU and re-executing with "
               "OPENBLAS_CORETYPE=%s failed (%s); HINT: set OPENBLAS_CORETYPE=%s\n",
               core.c_str(), choice.force.c_str(), std::strerror(errno), choice.force.c_str());
}

}  // namespace perceiver::threads
