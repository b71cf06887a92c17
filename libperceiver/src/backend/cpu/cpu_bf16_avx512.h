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

// 32 floats, lo's 16 then hi's, rounded as to_bf16 rounds them, on CPUs with AVX512-BF16 (every one
// with AMX-BF16 has it). VCVTNE2PS2BF16 rounds to nearest even and keeps NaN quiet as to_bf16 does,
// 32 values an instruction where the integer form takes seven for 16, but flushes denormals to ±0:
// where a lane holds one, all 32 are rounded the integer way (a branch taken only then), so the
// bits are to_bf16's. Packing a float B of 512 × 512 for our AMX kernel on one Sapphire Rapids core
// (best of 30, 2026-12-02): K along its rows 0.5–0.7× the integer form's time, K strided 0.85×.
__attribute__((target("avx512f,avx512bw,avx512dq,avx512bf16"))) inline __m512i bf16x32(__m512 lo, __m512 hi) {
  if ((denormal_lanes(lo) | denormal_lanes(hi)) != 0) [[unlikely]] {
    return _mm512_inserti64x4(_mm512_castsi256_si512(bf16x16(lo)), bf16x16(hi), 1);
  }
  return __m512i(_mm512_cvtne2ps_pbh(hi, lo));
}

// 16 floats the same way with VCVTNEPS2BF16, its lanes that hold a denormal redone the integer
// way: two instructions and a branch not taken where bf16x16 takes nine, for the kernels that
// round each vector of results as they make it (cpu_vector_kernels.h, the "with_cvt" forms).
__attribute__((target("avx512f,avx512bw,avx512dq,avx512bf16"))) inline __m256i bf16x16_cvt(__m512 v) {
  const __m256i h = __m256i(_mm512_cvtneps_pbh(v));
  if (const __mmask16 denormal = denormal_lanes(v)) [[unlikely]]
    return _mm256_mask_blend_epi16(denormal, h, bf16x16(v));
  return h;
}

#undef PCV_BF16_AVX512

}  // namespace
}  // namespace perceiver::cpu
#endif
