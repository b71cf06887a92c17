#include "core/cpu_features.h"

#include <utility>

namespace perceiver {
namespace {

CpuFeatures detect() {
  CpuFeatures f;
#if defined(__x86_64__)
  __builtin_cpu_init();
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  f.x86_64_v3 = __builtin_cpu_supports("x86-64-v3");
  f.avx512f = __builtin_cpu_supports("avx512f");
  f.avx512bw = __builtin_cpu_supports("avx512bw");
  f.avx512dq = __builtin_cpu_supports("avx512dq");
  f.avx512vl = __builtin_cpu_supports("avx512vl");
  f.x86_64_v4 = __builtin_cpu_supports("x86-64-v4");
  f.avx512_bf16 = __builtin_cpu_supports("avx512bf16");
  f.amx_tile = __builtin_cpu_supports("amx-tile");
  f.amx_bf16 = __builtin_cpu_supports("amx-bf16");
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
