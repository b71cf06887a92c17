// The choice of OpenBLAS's kernel set from CPU features (core/blas.h) and the start-up line that
// says which set runs and why.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "core/blas.h"
#include "core/cpu_features.h"

namespace perceiver::blas {
namespace {

CpuFeatures avx2_fma() {
  CpuFeatures f;
  f.avx2 = f.fma = f.x86_64_v3 = true;
  return f;
}

CpuFeatures avx512() {
  CpuFeatures f = avx2_fma();
  f.avx512f = f.avx512bw = f.avx512dq = f.avx512vl = f.x86_64_v4 = true;
  return f;
}

TEST(BlasCore, Avx512CpusGetAnAvx512KernelSet) {
  CpuFeatures epyc = avx512();
  epyc.avx512_bf16 = true;
  // OpenBLAS 0.3.21's picks on CPUs it misjudges: AVX2 kernels on AVX-512 EPYCs, SSE3 on Xeons.
  for (const char* wrong : {"Haswell", "Zen", "Prescott", "Sandybridge"}) {
    const CoreChoice c = choose_core(epyc, wrong);
    EXPECT_EQ(c.force, "SkylakeX") << wrong;
    EXPECT_EQ(c.basis, "CPU features avx512f,avx512bw,avx512dq,avx512vl,avx512_bf16");
  }
  // The AVX-512 sets with bf16 kernels run the same SGEMM kernels as SkylakeX: kept.
  for (const char* good : {"SkylakeX", "Cooperlake", "SapphireRapids"}) EXPECT_EQ(choose_core(epyc, good).force, "");
}

TEST(BlasCore, Avx2CpusGetHaswellKernels) {
  EXPECT_EQ(choose_core(avx2_fma(), "Prescott").force, "Haswell");
  EXPECT_EQ(choose_core(avx2_fma(), "Sandybridge").force, "Haswell");
  EXPECT_EQ(choose_core(avx2_fma(), "Zen").force, "");  // Zen's SGEMM kernels are Haswell's
  EXPECT_EQ(choose_core(avx2_fma(), "Haswell").basis, "CPU features avx2,fma");
  // AVX-512F alone (Knights Landing) is not enough for the SkylakeX kernels.
  CpuFeatures knl = avx2_fma();
  knl.avx512f = true;
  EXPECT_EQ(choose_core(knl, "Prescott").force, "Haswell");
}

// The user's OPENBLAS_CORETYPE is kept, and the start-up line says when the CPU has better kernels.
TEST(BlasCore, UserChoiceSlowerThanTheCpuIsNamed) {
  CpuFeatures epyc = avx512();
  epyc.avx512_bf16 = true;
  EXPECT_EQ(slower_than_needed(epyc, "Haswell"),
            "; SkylakeX would suit CPU features avx512f,avx512bw,avx512dq,avx512vl,avx512_bf16 (HINT: unset "
            "OPENBLAS_CORETYPE, or set it to SkylakeX)");
  EXPECT_EQ(slower_than_needed(avx2_fma(), "Prescott").rfind("; Haswell would suit CPU features avx2,fma", 0), 0u);
  for (const char* good : {"SkylakeX", "Cooperlake", "SapphireRapids"}) EXPECT_EQ(slower_than_needed(epyc, good), "");
  EXPECT_EQ(slower_than_needed(avx2_fma(), "Zen"), "");
  EXPECT_EQ(slower_than_needed(CpuFeatures{}, "Nehalem"), "");
}

TEST(BlasCore, OlderCpusKeepOpenBlasChoice) {
  const CoreChoice c = choose_core(CpuFeatures{}, "Nehalem");
  EXPECT_EQ(c.force, "");
  EXPECT_EQ(c.basis, "no AVX2+FMA or AVX-512 on this CPU");
}

// The line names the set in use and why, for each way it came about.
TEST(BlasCore, SummarySaysWhy) {
  const std::string core = blas_core();
  const char* user = std::getenv("OPENBLAS_CORETYPE");
  const std::string saved = user ? user : "";
  unsetenv("OPENBLAS_CORETYPE");  // OpenBLAS read it when it loaded; the line reads it now
  const std::string own = kernel_summary();
  EXPECT_EQ(own.rfind(core, 0), 0u) << own;
  EXPECT_NE(own.find("OpenBLAS's own pick"), std::string::npos) << own;
  std::cout << "[ openblas ] " << own << "\n";

  setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
  EXPECT_EQ(kernel_summary(), core + ", from OPENBLAS_CORETYPE=" + core + " set by the user" +
                                 slower_than_needed(host_cpu_features(), core));
  setenv(kOwnPickVariable, "Prescott", 1);  // as after use_fastest_cpu_kernels re-executed
  const std::string chosen = kernel_summary();
  EXPECT_EQ(chosen.rfind(core + ", chosen from CPU features ", 0), 0u) << chosen;
  EXPECT_NE(chosen.find("(OpenBLAS alone picked Prescott)"), std::string::npos) << chosen;
  setenv("OPENBLAS_CORETYPE", "NoSuchCore", 1);
  EXPECT_NE(kernel_summary().find("OPENBLAS_CORETYPE=NoSuchCore, chosen from"), std::string::npos);
  EXPECT_NE(kernel_summary().find("was not accepted by this OpenBLAS"), std::string::npos);
  unsetenv(kOwnPickVariable);
  if (saved.empty()) unsetenv("OPENBLAS_CORETYPE");
  else setenv("OPENBLAS_CORETYPE", saved.c_str(), 1);
}

// Threads of this process now (/proc/self/task).
int process_threads() {
  int n = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) n += entry.is_directory() ? 1 : 0;
  return n;
}

// OpenBLAS's pthread build starts a pool of its own when it loads, whose idle thread spins ~0.1 s
// beside our OpenMP pool; init_blas shuts it down. In a fresh process (a death test's), before
// any OpenMP region: the main thread alone is left.
TEST(BlasCoreDeathTest, InitShutsDownOpenBlasOwnPool) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        const int before = process_threads();
        init_blas();
        const int after = process_threads();
        std::fprintf(stderr, "threads: %d at load, %d after init_blas\n", before, after);
        std::exit(after == 1 ? 0 : 1);
      },
      testing::ExitedWithCode(0), "after init_blas");
}

// The features read from cpuid agree with the kernel's view of this CPU (/proc/cpuinfo).
TEST(CpuFeatures, AgreeWithTheKernel) {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  std::set<std::string> flags;
  while (std::getline(in, line))
    if (line.rfind("flags", 0) == 0) {
      std::istringstream words(line.substr(line.find(':') + 1));
      for (std::string w; words >> w;) flags.insert(w);
      break;
    }
  if (flags.empty()) GTEST_SKIP() << "no x86 flags line in /proc/cpuinfo";
  const CpuFeatures& f = host_cpu_features();
  const auto has = [&](const char* name) { return flags.count(name) != 0; };
  EXPECT_EQ(f.avx2, has("avx2"));
  EXPECT_EQ(f.fma, has("fma"));
  EXPECT_EQ(f.avx512f, has("avx512f"));
  EXPECT_EQ(f.avx512bw, has("avx512bw"));
  EXPECT_EQ(f.avx512dq, has("avx512dq"));
  EXPECT_EQ(f.avx512vl, has("avx512vl"));
  EXPECT_EQ(f.avx512_bf16, has("avx512_bf16"));
  EXPECT_EQ(f.amx_tile, has("amx_tile"));
  EXPECT_EQ(f.amx_bf16, has("amx_bf16"));
  EXPECT_EQ(f.x86_64_v3, has("avx2") && has("fma") && has("bmi1") && has("bmi2") && has("f16c") && has("movbe") &&
                             has("abm"));
  EXPECT_EQ(f.x86_64_v4, f.x86_64_v3 && has("avx512f") && has("avx512bw") && has("avx512cd") && has("avx512dq") &&
                             has("avx512vl"));
}

}  // namespace
}  // namespace perceiver::blas
