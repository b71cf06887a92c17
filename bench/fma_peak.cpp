// The machine's single-precision FMA peak, measured: every thread of the OpenMP pool runs
// independent chains of fused multiply-adds on registers (no memory traffic) with the widest
// vectors the CPU has (AVX-512, else AVX2+FMA, else the compiler's default vectors). 2 FLOP per
// lane per FMA. bench/run_model.sh prints the training step's GFLOP/s as a share of this.
// Beside it, the SGEMM ceiling: the CPU backend's own float32 GEMM (the kernels and tiling the
// step's products run on) on a 2048³ square, the best of its rounds. The step cannot run faster
// than its products can, so this says how much of the peak the GEMM library leaves on the table.
// Where the backend runs bf16 products (--precision bf16), their ceiling the same way: how much
// a bf16 step could gain over float32 if its products were all it did.
// Where the CPU has them, the bf16 peaks too, measured the same way: AVX512-BF16's dot product
// (VDPBF16PS, 4 FLOP per float32 lane) and AMX's tile product (TDPBF16PS, 16 × 16 × 32 multiply-
// adds). They say what --precision bf16 can gain over float32 on this CPU: a Sapphire Rapids runs
// VDPBF16PS at half its FMA rate in FLOPs (one every two cycles) and AMX at several times it.
//
// Usage: bench_fma_peak [--threads N] [--seconds S]
// Prints one line: fma_peak_gflops=<x> vectors=<avx512|avx2|generic> threads=<n> sgemm_gflops=<y>
// [bf16_gemm_gflops=<v>] [bf16_dot_peak_gflops=<z>] [amx_peak_gflops=<w>]
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

#include "backend/cpu/cpu_amx_gemm.h"
#include "backend/cpu/cpu_bf16_rate.h"
#include "core/cpu_features.h"
#include "perceiver/backend.h"
#include "perceiver/error.h"
#include "perceiver/threads.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace {

// Independent accumulators per thread: enough to cover FMA latency on two ports (cpu_bf16_rate.h).
constexpr int kChains = perceiver::cpu::kFmaChains;
constexpr int64_t kIterations = 1 << 22;

struct Kernel {
  const char* name;
  int lanes;                      // floats per vector
  float (*run)(int64_t iterations);  // returns a value that depends on every chain
};

#if defined(__x86_64__)
// The library's register-only chains (cpu_bf16_rate.h), the dot product at half the steps so that
// a round takes about as long.
float run_avx512(int64_t iterations) { return perceiver::cpu::avx512_fma_chains(iterations); }
float run_dpbf16(int64_t iterations) { return perceiver::cpu::bf16_dot_chains(iterations / 2); }

// The library's tile chains (cpu_amx_gemm.h): four TDPBF16PS a step, a 64th of the steps.
float run_amx(int64_t iterations) { return perceiver::cpu::amx_tile_chains(iterations / 64); }

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

// One timed round of `run` on every thread at once, `flops` each; returns GFLOP/s.
double round_gflops(float (*run)(int64_t), double flops) {
  float sink = 0;
  const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel reduction(+ : sink)
  sink += run(kIterations);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (sink == 42.0f) std::puts("");  // keeps the chains alive
  return flops * omp_get_max_threads() / seconds * 1e-9;
}

// The best round within `seconds`: a peak is what the cores reach when nothing else runs on them.
double peak_gflops(float (*run)(int64_t), double flops, double seconds) {
  double best = 0;
  const auto start = std::chrono::steady_clock::now();
  do {
    best = std::max(best, round_gflops(run, flops));
  } while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < seconds);
  return best;
}

// The backend's GEMM (float32, or bf16 products with float32 accumulation) on an n³ square, best
// round within `seconds` (at least two rounds). Throws where the backend refuses the precision.
double gemm_ceiling_gflops(perceiver::Precision precision, double seconds) {
  constexpr int64_t n = 2048;
  const auto backend = perceiver::make_backend("cpu", {precision});
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
  const double best = peak_gflops(k.run, 2.0 * k.lanes * kChains * double(kIterations), seconds);
  std::string bf16_peaks;  // " key=value" fields where the CPU has them
#if defined(__x86_64__)
  const perceiver::CpuFeatures& f = perceiver::host_cpu_features();
  char field[64];
  if (f.avx512_bf16 && f.avx512f) {
    std::snprintf(field, sizeof field, " bf16_dot_peak_gflops=%.1f",
                  peak_gflops(run_dpbf16, 4.0 * 16 * perceiver::cpu::kDotChains * double(kIterations / 2), seconds / 2));
    bf16_peaks += field;
  }
  if (perceiver::cpu::amx_available()) {  // asks Linux for the tiles first
    std::snprintf(field, sizeof field, " amx_peak_gflops=%.1f",
                  peak_gflops(run_amx, 4.0 * 2 * 16 * 16 * 32 * double(kIterations / 64), seconds / 2));
    bf16_peaks += field;
  }
#endif
  double sgemm = 0;
  try {
    sgemm = gemm_ceiling_gflops(perceiver::Precision::kFp32, seconds);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_fma_peak: the SGEMM ceiling: %s\n", e.what());
    return 1;
  }
  std::string bf16_gemm;  // where this CPU and build run bf16 products
  try {
    char field[64];
    std::snprintf(field, sizeof field, " bf16_gemm_gflops=%.1f", gemm_ceiling_gflops(perceiver::Precision::kBf16, seconds));
    bf16_gemm = field;
  } catch (const perceiver::Error&) {
  }
  std::printf("fma_peak_gflops=%.1f vectors=%s threads=%d sgemm_gflops=%.1f%s%s\n", best, k.name,
              perceiver::threads::num_threads(), sgemm, bf16_gemm.c_str(), bf16_peaks.c_str());
  return 0;
}
