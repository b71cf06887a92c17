#include "backend/cpu/cpu_isa.h"

#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "core/cpu_features.h"
#include "perceiver/error.h"

namespace perceiver::cpu {

// Each level's table, defined by its own translation unit (cpu_isa_<level>.cpp).
namespace isa_baseline {
template <class T>
VectorKernels<T> table();
}
#if defined(__x86_64__)
namespace isa_v3 {
template <class T>
VectorKernels<T> table();
}
namespace isa_v4 {
template <class T>
VectorKernels<T> table();
}
#endif

namespace {

constexpr Isa kAll[] = {Isa::kBaseline, Isa::kV3, Isa::kV4};

const char* describe(Isa isa) {
  switch (isa) {
    case Isa::kV3: return "x86-64-v3 (AVX2, FMA)";
    case Isa::kV4: return "x86-64-v4 (AVX-512)";
    default: break;
  }
#if defined(__x86_64__)
  return "x86-64 baseline (SSE2)";
#else
  return "baseline";
#endif
}

Isa best_supported() {
  Isa best = Isa::kBaseline;
  for (Isa isa : kAll)
    if (isa_supported(isa)) best = isa;
  return best;
}

struct Choice {
  Isa isa;
  std::string why;
};

// PERCEIVER_CPU_ISA if it names a level this CPU runs, else the best level (with a warning for
// a bad request: the kernels run inside parallel regions, where an exception cannot escape).
Choice choose() {
  const char* env = std::getenv("PERCEIVER_CPU_ISA");
  if (!env || !*env) return {best_supported(), "the best this CPU runs"};
  for (Isa isa : kAll) {
    if (std::string_view(env) != isa_name(isa)) continue;
    if (isa_supported(isa)) return {isa, std::string("forced by PERCEIVER_CPU_ISA=") + env};
    const Isa best = best_supported();
    std::fprintf(stderr, "warning: PERCEIVER_CPU_ISA=%s: this CPU or build cannot run %s kernels; using %s\n", env,
                 describe(isa), describe(best));
    return {best, std::string("the best this CPU runs (PERCEIVER_CPU_ISA=") + env + " is not supported)"};
  }
  const Isa best = best_supported();
  std::fprintf(stderr, "warning: PERCEIVER_CPU_ISA=%s is not one of baseline, v3, v4; using %s\n", env, describe(best));
  return {best, std::string("the best this CPU runs (PERCEIVER_CPU_ISA=") + env + " is unknown)"};
}

const Choice& choice() {
  static const Choice c = choose();
  return c;
}

}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kV3: return "v3";
    case Isa::kV4: return "v4";
    default: return "baseline";
  }
}

bool isa_supported(Isa isa) {
  [[maybe_unused]] const CpuFeatures& f = host_cpu_features();
  switch (isa) {
    case Isa::kBaseline: return true;
#if defined(__x86_64__)
    case Isa::kV3: return f.x86_64_v3;
    case Isa::kV4: return f.x86_64_v4;
#endif
    default: return false;
  }
}

std::vector<Isa> supported_isas() {
  std::vector<Isa> out;
  for (Isa isa : kAll)
    if (isa_supported(isa)) out.push_back(isa);
  return out;
}

Isa active_isa() { return choice().isa; }

std::string isa_summary() { return std::string(describe(choice().isa)) + ", " + choice().why; }

template <class T>
const VectorKernels<T>& vector_kernels(Isa isa) {
  PCV_ASSERT(isa_supported(isa), "vector kernels for ", isa_name(isa), " requested on a CPU that cannot run them");
  // Each level's table is built by code compiled for that level, so only when asked for: building
  // the x86-64-v4 one on a CPU without AVX-512 stops the process with SIGILL.
#if defined(__x86_64__)
  if (isa == Isa::kV4) {
    static const VectorKernels<T> v4 = isa_v4::table<T>();
    return v4;
  }
  if (isa == Isa::kV3) {
    static const VectorKernels<T> v3 = isa_v3::table<T>();
    return v3;
  }
#endif
  static const VectorKernels<T> baseline = isa_baseline::table<T>();
  return baseline;
}
template const VectorKernels<float>& vector_kernels<float>(Isa);
template const VectorKernels<double>& vector_kernels<double>(Isa);

}  // namespace perceiver::cpu
