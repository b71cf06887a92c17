#include "core/cpu_features.h"

#include <cstdint>
#include <utility>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace perceiver {
namespace {

#if defined(__x86_64__)
// Read from cpuid and xgetbv directly (GCC's and clang's __builtin_cpu_supports know different
// feature names: clang 14 has no "x86-64-v3" or "amx-tile").
struct Cpuid {
  unsigned a = 0, b = 0, c = 0, d = 0;
};

Cpuid cpuid(unsigned leaf, unsigned subleaf = 0) {
  Cpuid r;
  if (!__get_cpuid_count(leaf, subleaf, &r.a, &r.b, &r.c, &r.d)) return {};
  return r;
}

bool bit(unsigned word, int n) { return (word >> n) & 1u; }

// The register state the OS saves on a context switch (XCR0); 0 without OSXSAVE.
uint64_t os_saved_state(const Cpuid& leaf1) {
  if (!bit(leaf1.c, 27)) return 0;
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t(hi) << 32) | lo;
}
#endif

CpuFeatures detect() {
  CpuFeatures f;
#if defined(__x86_64__)
  const Cpuid l1 = cpuid(1), l7 = cpuid(7, 0), l7s1 = cpuid(7, 1), ext = cpuid(0x80000001);
  const uint64_t xcr0 = os_saved_state(l1);
  const bool ymm = (xcr0 & 0x6) == 0x6;           // SSE and AVX state
  const bool zmm = ymm && (xcr0 & 0xe0) == 0xe0;  // opmask and the upper/extra ZMM state
  const bool tiles = (xcr0 & 0x60000) == 0x60000;  // AMX tile config and data
  const bool avx = ymm && bit(l1.c, 28);
  f.avx2 = avx && bit(l7.b, 5);
  f.fma = avx && bit(l1.c, 12);
  f.x86_64_v3 = f.avx2 && f.fma && bit(l7.b, 3) && bit(l7.b, 8) && bit(l1.c, 29) && bit(l1.c, 22) && bit(ext.c, 5);
  f.avx512f = zmm && bit(l7.b, 16);
  f.avx512dq = f.avx512f && bit(l7.b, 17);
  f.avx512bw = f.avx512f && bit(l7.b, 30);
  f.avx512vl = f.avx512f && bit(l7.b, 31);
  f.x86_64_v4 = f.x86_64_v3 && f.avx512_core() && bit(l7.b, 28);  // and AVX512CD
  f.avx512_bf16 = f.avx512f && bit(l7s1.a, 5);
  f.amx_tile = tiles && bit(l7.d, 24);
  f.amx_bf16 = f.amx_tile && bit(l7.d, 22);
#endif
  return f;
}

}  // namespace

std::string CpuFeatures::names() const {
  const std::pair<bool, const char*> flags[] = {
      {avx2, "avx2"},         {fma, "fma"},           {avx512f, "avx512f"},         {avx512bw, "avx512bw"},
      {avx512dq, "avx512dq"}, {avx512vl, "avx512vl"}, {avx512_bf16, "avx512_bf16"}, {amx_tile, "amx_tile"},
      {amx_bf16, "amx_bf16"}};
  std::string out;
  for (const auto& [present, name] : flags)
    if (present) out += (out.empty() ? "" : ",") + std::string(name);
  return out;
}

const CpuFeatures& host_cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

}  // namespace perceiver
