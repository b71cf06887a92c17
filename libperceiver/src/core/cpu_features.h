// What the CPU this process runs on can execute, read once. Both kernel choices start here: the
// OpenBLAS kernel set (core/blas.h) and the level of the project's own vector kernels
// (backend/cpu/cpu_isa.h). On x86-64 the flags come from cpuid, each only where the OS also saves
// the registers it needs (xgetbv); on other architectures all are false.
#pragma once

#include <string>

namespace perceiver {

struct CpuFeatures {
  bool avx2 = false, fma = false;
  bool x86_64_v3 = false;  // AVX, AVX2, BMI1/2, F16C, FMA, LZCNT, MOVBE (the psABI level)
  bool avx512f = false, avx512bw = false, avx512dq = false, avx512vl = false;
  bool x86_64_v4 = false;  // x86-64-v3 plus AVX-512 F, BW, CD, DQ, VL
  bool avx512_bf16 = false;
  bool amx_tile = false, amx_bf16 = false;

  /// The AVX-512 subsets OpenBLAS's SkylakeX kernels and our v4 kernels use.
  bool avx512_core() const { return avx512f && avx512bw && avx512dq && avx512vl; }
  /// The present flags, comma-separated in /proc/cpuinfo spelling ("avx2,fma,avx512f,...").
  std::string names() const;
};

/// This machine's features (computed on first use).
const CpuFeatures& host_cpu_features();

}  // namespace perceiver
