// The bf16 dot product's rate against the FMAs' (cpu_bf16_rate.h).
#include "backend/cpu/cpu_bf16_rate.h"

#include "perceiver/error.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include <algorithm>
#include <chrono>

#include "core/cpu_features.h"
#endif

namespace perceiver::cpu {

#if defined(__x86_64__)

namespace {

// Every lane of `count` vectors, summed.
__attribute__((target("avx512f"))) float sum_lanes(const __m512* acc, int count) {
  alignas(64) float lanes[16];
  float out = 0;
  for (int c = 0; c < count; ++c) {
    _mm512_store_ps(lanes, acc[c]);
    for (float v : lanes) out += v;
  }
  return out;
}

// FLOP per second of `run` over `iterations` steps of `flops_per_step`: the best of three rounds.
double rate(float (*run)(int64_t), int64_t iterations, double flops_per_step) {
  double best = 0;
  for (int round = 0; round < 3; ++round) {
    const auto t0 = std::chrono::steady_clock::now();
    volatile float sink = run(iterations);
    (void)sink;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, flops_per_step * double(iterations) / s);
  }
  return best;
}

template <int kChains>
__attribute__((target("avx512f"))) float fma_chains(int64_t iterations) {
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(float(c));
  const __m512 m = _mm512_set1_ps(0.999999f), a = _mm512_set1_ps(1e-6f);
  for (int64_t i = 0; i < iterations; ++i)
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], m, a);
  return sum_lanes(acc, kChains);
}

}  // namespace

float avx512_fma_chains(int64_t iterations) { return fma_chains<kFmaChains>(iterations); }
float avx512_fma_chains_doubled(int64_t iterations) { return fma_chains<2 * kFmaChains>(iterations); }

__attribute__((target("avx512f,avx512bf16"))) float bf16_dot_chains(int64_t iterations) {
  __m512 acc[kDotChains];
  for (int c = 0; c < kDotChains; ++c) acc[c] = _mm512_set1_ps(float(c));
  const __m512bh x = (__m512bh)_mm512_set1_epi32(0x3f803f80);  // bf16 ones: the sums stay finite
  for (int64_t i = 0; i < iterations; ++i)
    for (int c = 0; c < kDotChains; ++c) acc[c] = _mm512_dpbf16_ps(acc[c], x, x);
  return sum_lanes(acc, kDotChains);
}

double bf16_dot_rate() {
  static const double ratio = [] {
    const CpuFeatures& f = host_cpu_features();
    if (!f.avx512f || !f.avx512_bf16) return 0.0;
    // Rounds of ~0.3-0.6 ms at 3.5 GHz (2 FMAs a cycle; a dot product every one or two cycles).
    const double fma = rate(avx512_fma_chains, int64_t(1) << 18, 2.0 * 16 * kFmaChains);
    const double dot = rate(bf16_dot_chains, int64_t(1) << 16, 4.0 * 16 * kDotChains);
    return dot / fma;
  }();
  return ratio;
}

#else  // not x86-64

float avx512_fma_chains(int64_t) { PCV_FAIL("avx512_fma_chains: AVX-512 is an x86-64 feature"); }
float avx512_fma_chains_doubled(int64_t) { PCV_FAIL("avx512_fma_chains_doubled: AVX-512 is an x86-64 feature"); }
float bf16_dot_chains(int64_t) { PCV_FAIL("bf16_dot_chains: AVX512-BF16 is an x86-64 feature"); }
double bf16_dot_rate() { return 0.0; }

#endif

}  // namespace perceiver::cpu
