// OpenBLAS process setup (internal: the public API names no BLAS). The CPU backend calls
// init_blas(); threads::use_fastest_cpu_kernels picks the kernel set from the CPU's features;
// start-up logs print kernel_summary(), which names the set and says why it was chosen.
#pragma once

#include <string>

#include "core/cpu_features.h"

namespace perceiver::blas {

/// Makes OpenBLAS single-threaded (our OpenMP pool splits GEMMs). Idempotent.
void init_blas();

/// The kernel family OpenBLAS runs ("SkylakeX", "Haswell", ...).
std::string blas_core();

/// The decision for a CPU with `features` on which OpenBLAS loaded the kernel set `loaded`:
/// `force` is the OPENBLAS_CORETYPE to re-execute with (empty: keep `loaded`); `basis` names the
/// CPU features the decision rests on, for the start-up line. Only the CPU's features count, never its vendor or
/// model name: AVX-512 F/BW/DQ/VL → an AVX-512 set (SkylakeX; Cooperlake and SapphireRapids
/// share its SGEMM kernels and are kept), AVX2+FMA → Haswell (or Zen, the same kernels).
struct CoreChoice {
  std::string force;
  std::string basis;
};
CoreChoice choose_core(const CpuFeatures& features, const std::string& loaded);

/// Where the user's OPENBLAS_CORETYPE loaded `loaded` and the CPU's features call for a faster set:
/// "; SkylakeX would suit CPU features ... (HINT: ...)", for the start-up line; empty otherwise.
/// (A stale OPENBLAS_CORETYPE=Haswell on a Zen 5 halved OpenBLAS's SGEMM: 209 against 402 GFLOP/s.)
std::string slower_than_needed(const CpuFeatures& features, const std::string& loaded);

/// "SkylakeX, chosen from CPU features avx512f,avx512bw,... (OpenBLAS alone picked Prescott)".
std::string kernel_summary();

/// Set in the environment of the re-executed process; holds the set OpenBLAS picked on its own.
inline constexpr const char* kOwnPickVariable = "PERCEIVER_OPENBLAS_OWN_PICK";

}  // namespace perceiver::blas
