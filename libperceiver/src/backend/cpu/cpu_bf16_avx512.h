// to_bf16 (cpu_bf16_round.h) on AVX-512 registers, for the two places that round floats there:
// the x86-64-v4 vector kernels (cpu_vector_kernels.h) and our AMX kernel's packing
// (cpu_amx_gemm.cpp, whose file is compiled for the baseline with its kernel's functions given
// target attributes). So these carry their own target attribute, which both callers' targets
// include, and internal linkage: each translation unit keeps its own copy, compiled for its own
// level, and no symbol is shared across levels (cpu_vector_kernels.h, "One definition rule").
#pragma once

#if defined(__x86_64__)
#include <immintrin.h>

namespace perceiver::cpu {
namespace {

#define PCV_BF16_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq")))

// 16 floats rounded as to_bf16 rounds one: to nearest even, NaN kept quiet, denormals kept. The
// integer form, for the lanes that AVX512-BF16's VCVTNE2PS2BF16, which flushes denormals to ±0,
// cannot round (denormal_lanes).
PCV_BF16_AVX512 inline __m256i bf16x16(__m512 v) {
  const __m512i u = _mm512_castps_si512(v), high = _mm512_srli_epi32(u, 16);
  const __m512i lsb = _mm512_and_si512(high, _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), 16);
  const __mmask16 nan =
      _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  return _mm512_cvtepi32_epi16(_mm512_mask_or_epi32(rounded, nan, high, _mm512_set1_epi32(0x40)));
}

// The lanes of v that hold a float denormal (VFPCLASSPS category 0x20: nonzero, below the
// smallest normal in magnitude, either sign).
PCV_BF16_AVX512 inline __mmask16 denormal_lanes(__m512 v) { return _mm512_fpclass_ps_mask(v, 0x20); }

#undef PCV_BF16_AVX512

}  // namespace
}  // namespace perceiver::cpu
#endif
