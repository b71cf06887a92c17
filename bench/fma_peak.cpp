// The machine's single-precision FMA peak, measured: every thread of the OpenMP pool runs
// independent chains of fused multiply-adds on registers (no memory traffic) with the widest
// vectors the CPU has (AVX-512, else AVX2+FMA, else the compiler's default vectors). 2 FLOP per
// lane per FMA. bench/run_model.sh prints the training step's GFLOP/s as a share of this.
// Beside it, the SGEMM ceiling: the CPU backend's own float32 GEMM (the kernels and tiling the
// step's products run on) on a 2048³ square, the best of its rounds. The step cannot run faster
// than its products can, so this says how much of the peak the GEMM library leaves on the table.
//
// Usage: bench_fma_peak [--threads N] [--seconds S]
// Prints one line: fma_peak_gflops=<x> vectors=<avx512|avx2|generic> threads=<n> sgemm_gflops=<y>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "perceiver/backend.h"
#include "perceiver/threads.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace {

// Independent accumulators per thread: enough to cover FMA latency (4 cycles) on two ports.
constexpr int kChains = 8;
constexpr int64_t kIterations = 1 << 22;

struct Kernel {
  const char* name;
  int lanes;                      // floats per vector
  float (*run)(int64_t iterations);  // returns a value that depends on every chain
};

#if defined(__x86_64__)
__attribute__((target("avx512f"))) float run_avx512(int64_t iterations) {
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(float(c));
  const __m512 m = _mm512_set1_ps(0.999999f), a = _mm512_set1_ps(1e-6f);
  for (int64_t i = 0; i < iterations; ++i)
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], m, a);
  alignas(64) float lanes[16];
  float out = 0;
  for (int c = 0; c < kChains; ++c) {
    _mm512_store_ps(lanes, acc[c]);
    for (float v : lanes) out += v;
  }
  return out;
}

__attribute__((target("avx2,fma"))) float run_avx2(int64_t iterations) {
  __m256 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_ps(float(c));
  const __m256 m = _mm256_set1_ps(0.999999f), a = _mm256_set1_ps(1e-6f);
  for (int64_t i = 0; i < iterations; ++i)
    for (int c = 0; c < kChains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], m, a);
  alignas(32) float lanes[8];
  float out = 0;
  for (int c = 0; c < kChains; ++c) {
    _mm256_store_ps(lanes, acc[c]);
    for (float v : lanes) out += v;
  }
  return out;
}
#endif

// The compiler's default vectors (SSE2 on x86-64: multiply and add, still 2 FLOP; NEON on
// arm64, where the compiler contracts them into FMAs).
using Vec4 = float __attribute__((vector_size(16)));
float run_generic(int64_t iterations) {
  Vec4 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = Vec4{} + float(c);
  const Vec4 m = Vec4{} + 0.999999f, a = Vec4{} + 1e-6f;
  for (int64_t i = 0; i < iterations; ++i)
    for (int c = 0; c < kChains; ++c) acc[c] = acc[c] * m + a;
  float out = 0;
  for (int c = 0; c < kChains; ++c) out += acc[c][0] + acc[c][1] + acc[c][2] + acc[c][3];
  return out;
}

Kernel widest() {
  const perceiver::CpuFeatures& f = perceiver::host_cpu_features();
#if defined(__x86_64__)
  if (f.avx512f) return {"avx512", 16, run_avx512};
  if (f.avx2 && f.fma) return {"avx2", 8, run_avx2};
#endif
  (void)f;
  return {"generic", 4, run_generic};
}

// One timed round on every thread at once; returns GFLOP/s.
double round_gflops(const Kernel& k) {
  float sink = 0;
  const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel reduction(+ : sink)
  sink += k.run(kIterations);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (sink == 42.0f) std::puts("");  // keeps the chains alive
  const double flops = 2.0 * k.lanes * kChains * double(kIterations) * omp_get_max_threads();
  return flops / seconds * 1e-9;
}

// The backend's float32 GEMM on an n³ square, best round within `seconds` (at least two rounds).
double sgemm_gflops(double seconds) {
  constexpr int64_t n = 2048;
  const auto backend = perceiver::make_backend("cpu");
  const perceiver::Kernels<float> k = backend->kernels<float>();
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n);
  double best = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int round = 0;; ++round) {
    const auto t0 = std::chrono::steady_clock::now();
    k.gemm(perceiver::Transpose::kNo, perceiver::Transpose::kNo, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f,
           c.data(), n);
    const auto t1 = std::chrono::steady_clock::now();
    best = std::max(best, 2.0 * double(n) * n * n / std::chrono::duration<double>(t1 - t0).count() * 1e-9);
    if (round >= 1 && std::chrono::duration<double>(t1 - start).count() >= seconds) break;
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  // As the apps do: the OpenBLAS kernels the CPU's features call for (may re-exec this program).
  perceiver::threads::use_fastest_cpu_kernels(argv);
  int threads = 0;
  double seconds = 2.0;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--threads") == 0 && i + 1 < argc) threads = std::atoi(argv[++i]);
    else if (std::strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) seconds = std::atof(argv[++i]);
    else {
      std::fprintf(stderr, "usage: bench_fma_peak [--threads N] [--seconds S]\n");
      return 2;
    }
  }
  perceiver::threads::set_num_threads(threads);
  const Kernel k = widest();
  // The best round: the peak is what the cores reach when nothing else runs on them.
  double best = 0;
  const auto start = std::chrono::steady_clock::now();
  do {
    best = std::max(best, round_gflops(k));
  } while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < seconds);
  double sgemm = 0;
  try {
    sgemm = sgemm_gflops(seconds);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_fma_peak: the SGEMM ceiling: %s\n", e.what());
    return 1;
  }
  std::printf("fma_peak_gflops=%.1f vectors=%s threads=%d sgemm_gflops=%.1f\n", best, k.name,
              perceiver::threads::num_threads(), sgemm);
  return 0;
}
