// Experimental (llm.c's dev/ policy): the streamed latent self-attention's products (8 heads of
// 64 channels, blocks of ~196 query rows, 512-key chunks) on one core, through OpenBLAS as the
// library runs them and through a plain AVX2 + FMA 6 x 16 register-tile kernel whose B is packed
// once and reused by every query block (as the streamed kernel could pack each key chunk once
// per call, not once per product). Nothing here is used by the library; it measures whether such
// a kernel would pay before anyone writes it into backend/cpu/.
//
// Products (one query block of one head):
//  - qk:  S = Q·Kᵀ, 196 x 512 x 64 (NT): K = 64, where OpenBLAS repacks both operands and zeroes
//         C in a scalar pass of its own on every call;
//  - pv:  O += P·V, 196 x 64 x 512 (NN);
//  - dsq: dK += dSᵀ·Q, 512 x 64 x 196 (TN).
// `blas` is one cblas_sgemm call; `tile` packs A per call and reads B packed once (the packing of
// B is outside the timed loop, as it would be shared by the call's query blocks); `tile_packb`
// times B's packing too. Both check their result against OpenBLAS's before timing.
//
// Measured on the 2-core AMD EPYC (Zen 3, one core; medians of 5, two runs, 2026-11-29): qk
// 66-70 GFLOP/s through OpenBLAS, 78-86 on the tile kernel (1.18-1.23x), 76 packing B on every
// call; pv 70-75 against 55-70 and dsq 72-78 against 63-67 (no faster). Only the K = 64 products
// gain, two of the latent attention's seven, or ~1% of the kinetics700 step: not taken into the
// library.
//
// Usage: build/bin/dev_small_k_gemm [Google Benchmark flags]   (x86-64 with AVX2 and FMA)
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>

extern "C" void openblas_set_num_threads(int);

namespace {

constexpr int kMr = 6, kNr = 16;

struct Shape {
  const char* name;
  bool ta, tb;  // op(A) = Aᵀ, op(B) = Bᵀ
  int m, n, k;
};
constexpr Shape kShapes[] = {{"qk", false, true, 196, 512, 64},
                             {"pv", false, false, 196, 64, 512},
                             {"dsq", true, false, 512, 64, 196}};

// Element (i, p) of op(A) for A stored row-major [m, k] (or [k, m] when ta), and (p, j) of op(B).
float at_a(const Shape& s, const float* a, int i, int p) { return s.ta ? a[p * s.m + i] : a[i * s.k + p]; }
float at_b(const Shape& s, const float* b, int p, int j) { return s.tb ? b[j * s.k + p] : b[p * s.n + j]; }

// op(B) in panels of 16 columns, each k x 16 contiguous (n is a multiple of 16 here).
void pack_b(const Shape& s, const float* b, float* out) {
  for (int j0 = 0; j0 < s.n; j0 += kNr)
    for (int p = 0; p < s.k; ++p)
      for (int j = 0; j < kNr; ++j) out[j0 * s.k + p * kNr + j] = at_b(s, b, p, j0 + j);
}

// op(A) in panels of 6 rows, each k x 6 contiguous, zero rows past m.
void pack_a(const Shape& s, const float* a, float* out) {
  for (int i0 = 0; i0 < s.m; i0 += kMr)
    for (int p = 0; p < s.k; ++p)
      for (int i = 0; i < kMr; ++i) out[i0 * s.k + p * kMr + i] = i0 + i < s.m ? at_a(s, a, i0 + i, p) : 0.0f;
}

// C[6 x 16] = A panel · B panel over k, into c (rows ldc apart; `rows` of them are stored). Twelve
// named accumulators: as an array, GCC 12 kept them in memory.
__attribute__((target("avx2,fma"))) void tile_6x16(int k, const float* ap, const float* bp, float* c, int ldc,
                                                   int rows) {
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00, c31 = c00,
         c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  for (int p = 0; p < k; ++p, ap += kMr, bp += kNr) {
    const __m256 b0 = _mm256_load_ps(bp), b1 = _mm256_load_ps(bp + 8);
    __m256 a = _mm256_broadcast_ss(ap);
    c00 = _mm256_fmadd_ps(a, b0, c00), c01 = _mm256_fmadd_ps(a, b1, c01);
    a = _mm256_broadcast_ss(ap + 1);
    c10 = _mm256_fmadd_ps(a, b0, c10), c11 = _mm256_fmadd_ps(a, b1, c11);
    a = _mm256_broadcast_ss(ap + 2);
    c20 = _mm256_fmadd_ps(a, b0, c20), c21 = _mm256_fmadd_ps(a, b1, c21);
    a = _mm256_broadcast_ss(ap + 3);
    c30 = _mm256_fmadd_ps(a, b0, c30), c31 = _mm256_fmadd_ps(a, b1, c31);
    a = _mm256_broadcast_ss(ap + 4);
    c40 = _mm256_fmadd_ps(a, b0, c40), c41 = _mm256_fmadd_ps(a, b1, c41);
    a = _mm256_broadcast_ss(ap + 5);
    c50 = _mm256_fmadd_ps(a, b0, c50), c51 = _mm256_fmadd_ps(a, b1, c51);
  }
  // All six rows: into C, or into a buffer for a last panel's fewer rows.
  alignas(32) float edge[kMr * kNr];
  float* out = rows == kMr ? c : edge;
  const int ld = rows == kMr ? ldc : kNr;
  const __m256 rows_out[kMr][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
  for (int i = 0; i < kMr; ++i) {
    _mm256_storeu_ps(out + i * ld, rows_out[i][0]);
    _mm256_storeu_ps(out + i * ld + 8, rows_out[i][1]);
  }
  if (rows < kMr)
    for (int i = 0; i < rows; ++i) std::copy_n(edge + i * kNr, kNr, c + i * ldc);
}

void tile_gemm(const Shape& s, const float* a, const float* packed_b, float* packed_a, float* c) {
  pack_a(s, a, packed_a);
  for (int i0 = 0; i0 < s.m; i0 += kMr)  // an A panel stays in L1 while B's panels (L2) pass
    for (int j0 = 0; j0 < s.n; j0 += kNr)
      tile_6x16(s.k, packed_a + i0 * s.k, packed_b + j0 * s.k, c + i0 * s.n + j0, s.n, std::min(kMr, s.m - i0));
}

void blas_gemm(const Shape& s, const float* a, const float* b, float* c) {
  cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans, s.m, s.n, s.k, 1.0f,
              a, s.ta ? s.m : s.k, b, s.tb ? s.k : s.n, 0.0f, c, s.n);
}

float* aligned_floats(size_t count) {  // aligned_alloc wants a whole number of alignments
  return static_cast<float*>(std::aligned_alloc(64, (count * 4 + 63) / 64 * 64));
}

struct Operands {
  std::vector<float> a, b, c;
  float *packed_a, *packed_b;
  explicit Operands(const Shape& s)
      : a(size_t(s.m) * s.k), b(size_t(s.k) * s.n), c(size_t(s.m) * s.n),
        packed_a(aligned_floats(size_t(s.m + kMr) * s.k)), packed_b(aligned_floats(size_t(s.k) * s.n)) {
    uint32_t x = 12345;
    auto next = [&x] { return float((x = x * 1664525u + 1013904223u) >> 8) / float(1 << 24) - 0.5f; };
    for (float& v : a) v = next();
    for (float& v : b) v = next();
    pack_b(s, b.data(), packed_b);
  }
  ~Operands() { std::free(packed_a), std::free(packed_b); }
};

void check_tile(const Shape& s, Operands& o, benchmark::State& state) {
  std::vector<float> want(o.c.size());
  blas_gemm(s, o.a.data(), o.b.data(), want.data());
  tile_gemm(s, o.a.data(), o.packed_b, o.packed_a, o.c.data());
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, double(std::fabs(want[i] - o.c[i])));
  if (worst > 1e-4 * s.k) state.SkipWithError("the tile kernel disagrees with OpenBLAS");
}

void run(benchmark::State& state, const Shape& s, int variant) {
  Operands o(s);
  if (variant > 0) check_tile(s, o, state);
  for (auto _ : state) {
    if (variant == 0) blas_gemm(s, o.a.data(), o.b.data(), o.c.data());
    if (variant == 2) pack_b(s, o.b.data(), o.packed_b);
    if (variant > 0) tile_gemm(s, o.a.data(), o.packed_b, o.packed_a, o.c.data());
    benchmark::DoNotOptimize(o.c.data());
  }
  const double gflop = 2.0 * s.m * s.n * s.k * 1e-9;
  state.counters["GFLOP"] = benchmark::Counter(gflop, benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

int main(int argc, char** argv) {
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
    std::fprintf(stderr, "dev_small_k_gemm: this CPU has no AVX2 and FMA\n");
    return 77;
  }
  openblas_set_num_threads(1);
  const char* names[] = {"blas", "tile", "tile_packb"};
  for (const Shape& s : kShapes)
    for (int v = 0; v < 3; ++v)
      benchmark::RegisterBenchmark((std::string(s.name) + "/" + names[v]).c_str(),
                                   [&s, v](benchmark::State& st) { run(st, s, v); });
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  return 0;
}
#else
int main() {
  std::fprintf(stderr, "dev_small_k_gemm: x86-64 only\n");
  return 77;
}
#endif
