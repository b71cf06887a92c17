// Experimental (llm.c's dev/ policy): other ways to split the model's GEMMs over the OpenMP pool,
// measured against the library's cpu::gemm at the same shapes. Nothing here is used by the
// library; a variant that wins moves into backend/cpu/cpu_gemm.cpp with tests.
//
// Variants (all call single-threaded OpenBLAS from our pool unless named otherwise):
//  - library:   ops().gemm (cpu_gemm_tiling.h: K in 8 slices when K >= 2·max(m,n) and 2048,
//               else output tiles: float32 rows one per thread where OpenBLAS keeps their bits,
//               otherwise the larger output dim in <=16 tiles of >=64).
//  - ksplit:    always split K into 8 slices, each a full-output GEMM into its own partial C,
//               then sum the partials in slice order: the library's K split below its threshold.
//  - ksplit4, ksplit2: the same in 4 and 2 slices (fewer partials to add, less parallelism). On
//               the 2-core Zen 3 the encoder's chunk dW (704x704x2048) ran at 142 (library, 8),
//               160 (4) and 167 (2) GFLOP/s; not adopted, since the slices are fixed by the shape
//               and 2 or 4 would leave a 16-core node's threads idle on it.
//  - sStRxC:     K in S slices, each slice's output in an R x C grid of tiles (S·R·C serial calls;
//               partials summed in slice order when S > 1). Chunk dW, 2 threads, medians of six
//               interleaved rounds on a busy day: s1t2x2 133, blas_mt 130, s4t2x1 127, library 122,
//               ksplit 114 GFLOP/s: inside this machine's noise, and four pieces would idle a
//               big node, so the library's split stays.
//  - *_fused:   the K and V projections of a chunk as one product against both weights
//               (n or k = 1408): slower than two (125-145 against 152 GFLOP/s, 2 threads).
//  - bigtiles:  the library's split with tiles of >=256 rows/cols (fewer, larger BLAS calls).
//  - blas_mt:   one call to OpenBLAS with its own N threads, from outside any parallel region
//               (what PyTorch does); the reference for what OpenBLAS can reach at that shape.
//
// Shapes as in bench_ops.cpp (M 52097, C 704, N 784, D 512). Usage as bench_ops: --threads N.
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "perceiver/backend.h"
#include "perceiver/threads.h"

extern "C" void openblas_set_num_threads(int);

namespace {

using perceiver::Transpose;

constexpr int64_t kM = 52097, kC = 704, kN = 784, kD = 512;

CBLAS_TRANSPOSE cb(Transpose t) { return t == Transpose::kYes ? CblasTrans : CblasNoTrans; }

struct Gemm {
  Transpose ta, tb;
  int64_t m, n, k;
  const float *a, *b;
  float* c;
  int64_t lda() const { return ta == Transpose::kNo ? k : m; }
  int64_t ldb() const { return tb == Transpose::kNo ? n : k; }
  // op(A) rows [r0, r0+rows) × op(B) cols [c0, c0+cols) over K range [k0, k0+kk) into out (ldo).
  void tile(int64_t r0, int64_t rows, int64_t c0, int64_t cols, int64_t k0, int64_t kk, float beta,
            float* out, int64_t ldo) const {
    const float* pa = ta == Transpose::kNo ? a + r0 * lda() + k0 : a + k0 * lda() + r0;
    const float* pb = tb == Transpose::kNo ? b + k0 * ldb() + c0 : b + c0 * ldb() + k0;
    cblas_sgemm(CblasRowMajor, cb(ta), cb(tb), int(rows), int(cols), int(kk), 1.0f, pa, int(lda()), pb,
                int(ldb()), beta, out, int(ldo));
  }
};

// Output-tiled split as in cpu_gemm.cpp, with a configurable minimum tile.
void tiled(const Gemm& g, int64_t min_tile) {
  const bool rows = g.m >= g.n;
  const int64_t extent = rows ? g.m : g.n;
  int64_t tile = (extent + 15) / 16;
  tile = std::max<int64_t>((tile + 15) / 16 * 16, min_tile);
  const int64_t tiles = (extent + tile - 1) / tile;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t b0 = t * tile, cnt = std::min(tile, extent - b0);
    if (rows) g.tile(b0, cnt, 0, g.n, 0, g.k, 0.0f, g.c + b0 * g.n, g.n);
    else g.tile(0, g.m, b0, cnt, 0, g.k, 0.0f, g.c + b0, g.n);
  }
}

// K split into kChunks slices, partials summed in slice order.
void ksplit(const Gemm& g, std::vector<float>& partial, int64_t kChunks = 8) {
  const int64_t mn = g.m * g.n;
  partial.resize(size_t(kChunks * mn));
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t t = 0; t < kChunks; ++t) {
    const int64_t k0 = t * g.k / kChunks, k1 = (t + 1) * g.k / kChunks;
    g.tile(0, g.m, 0, g.n, k0, k1 - k0, 0.0f, partial.data() + t * mn, g.n);
  }
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < mn; ++i) {
    float s = partial[size_t(i)];
    for (int64_t t = 1; t < kChunks; ++t) s += partial[size_t(t * mn + i)];
    g.c[i] = s;
  }
}

// K split into `slices`, each slice's output in a tr × tc grid of tiles: slices·tr·tc serial
// calls, partials summed in slice order (slices == 1: straight into C, nothing to add).
void grid(const Gemm& g, std::vector<float>& partial, int64_t slices, int64_t tr, int64_t tc) {
  const int64_t mn = g.m * g.n;
  if (slices > 1) partial.resize(size_t(slices * mn));
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t p = 0; p < slices * tr * tc; ++p) {
    const int64_t s = p / (tr * tc), i = p / tc % tr, j = p % tc;
    const int64_t k0 = s * g.k / slices, k1 = (s + 1) * g.k / slices;
    const int64_t r0 = i * g.m / tr, r1 = (i + 1) * g.m / tr, c0 = j * g.n / tc, c1 = (j + 1) * g.n / tc;
    float* out = slices > 1 ? partial.data() + s * mn : g.c;
    g.tile(r0, r1 - r0, c0, c1 - c0, k0, k1 - k0, 0.0f, out + r0 * g.n + c0, g.n);
  }
  if (slices == 1) return;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < mn; ++i) {
    float s = partial[size_t(i)];
    for (int64_t t = 1; t < slices; ++t) s += partial[size_t(t * mn + i)];
    g.c[i] = s;
  }
}

std::vector<float>& storage(const std::string& name, int64_t n) {
  static std::vector<std::pair<std::string, std::vector<float>>> store;
  for (auto& [k, v] : store)
    if (k == name && int64_t(v.size()) == n) return v;
  store.emplace_back(name, std::vector<float>(size_t(n)));
  auto& v = store.back().second;
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = float((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
  return v;
}

int g_threads = 0;

void add(const std::string& id, Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k) {
  for (std::string variant : {"library", "ksplit", "ksplit4", "ksplit2", "s2t2x2", "s4t2x1", "s1t2x2", "s1t4x4",
                              "s2t4x4", "bigtiles", "blas_mt"}) {
    benchmark::RegisterBenchmark((id + "/" + variant).c_str(), [=](benchmark::State& state) {
      Gemm g{ta, tb, m, n, k, storage("a", m * k).data(), storage("b", k * n).data(),
             storage("c", m * n).data()};
      std::vector<float> partial;
      std::function<void()> op;
      if (variant == "library")
        op = [&] {
          perceiver::cpu_backend().kernels<float>().gemm(ta, tb, m, n, k, 1.0f, g.a, g.lda(), g.b,
                                                         g.ldb(), 0.0f, g.c, n);
        };
      else if (variant == "ksplit") op = [&] { ksplit(g, partial); };
      else if (variant == "ksplit4") op = [&] { ksplit(g, partial, 4); };
      else if (variant == "ksplit2") op = [&] { ksplit(g, partial, 2); };
      else if (variant == "s2t2x2") op = [&] { grid(g, partial, 2, 2, 2); };
      else if (variant == "s4t2x1") op = [&] { grid(g, partial, 4, 2, 1); };
      else if (variant == "s1t2x2") op = [&] { grid(g, partial, 1, 2, 2); };
      else if (variant == "s1t4x4") op = [&] { grid(g, partial, 1, 4, 4); };
      else if (variant == "s2t4x4") op = [&] { grid(g, partial, 2, 4, 4); };
      else if (variant == "bigtiles") op = [&] { tiled(g, 256); };
      else
        op = [&] {
          openblas_set_num_threads(g_threads);
          g.tile(0, m, 0, n, 0, k, 0.0f, g.c, n);
          openblas_set_num_threads(1);
        };
      op();  // warm-up
      for (auto _ : state) op();
      state.counters["GFLOP"] = benchmark::Counter(2e-9 * double(m) * double(n) * double(k),
                                                   benchmark::Counter::kIsIterationInvariantRate);
    })->UseRealTime()->Unit(benchmark::kMillisecond);
  }
}

}  // namespace

int main(int argc, char** argv) {
  perceiver::threads::use_fastest_cpu_kernels(argv);
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--threads") == 0 && i + 1 < argc) g_threads = std::atoi(argv[++i]);
    else args.push_back(argv[i]);
  }
  perceiver::threads::set_num_threads(g_threads);
  g_threads = perceiver::threads::num_threads();
  constexpr auto N = Transpose::kNo;
  constexpr auto T = Transpose::kYes;
  add("gemm_kv_proj", N, T, kM, kC, kC);
  add("gemm_kv_proj_dw", T, N, kC, kC, kM);
  add("gemm_kv_proj_dw_chunk", T, N, kC, kC, 4096);
  add("gemm_kv_chunk_dw", T, N, kC, kC, 2048);
  add("gemm_kv_chunk_fwd", N, T, 2048, kC, kC);
  add("gemm_kv_chunk_dx", N, N, 2048, kC, kC);
  add("gemm_kv_chunk_fwd_fused", N, T, 2048, 2 * kC, kC);
  add("gemm_kv_chunk_dx_fused", N, N, 2048, kC, 2 * kC);
  add("gemm_kv_chunk_dw_fused", T, N, 2 * kC, kC, 2048);
  add("gemm_latent_proj_dw_b4", T, N, kD, kD, 4 * kN);  // batch 4: K/M = 6
  add("gemm_latent_proj_dw_b2", T, N, kD, kD, 2 * kN);  // batch 2: K/M = 3
  add("gemm_q_proj", N, T, kN, kC, kD);
  add("gemm_latent_proj", N, T, kN, kD, kD);
  add("gemm_qk", N, T, kN, kM, kC);
  add("gemm_pv", N, N, kN, kC, kM);
  add("gemm_dk", T, N, kM, kC, kN);
  int n = int(args.size());
  args.push_back(nullptr);
  benchmark::Initialize(&n, args.data());
  if (benchmark::ReportUnrecognizedArguments(n, args.data())) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
