// Experimental (llm.c's dev/ policy): our own float32 kernel (backend/cpu/cpu_isa_v3_sgemm.cpp)
// against OpenBLAS on the kinetics700 step's products, with the pieces the library runs, and on the
// demo model's attention products.
//
// Whole products (over the pool): row tiles one per thread, each one call (`blas`: OpenBLAS on
// 12-row multiples, as the library ran it before; `own`: ours, each tile packing all of B),
// and `own_shared`: B packed once over the pool for all tiles (what cpu::gemm now does).
// Attention pieces (the streamed attention's per-task products): every thread runs its own copy
// at once, as the attention's tasks do (`blas`, `own`; `own_packed`: B packed once beforehand,
// as the attention could for its key and value chunks).
//
// --cold flushes the caches before each call, so that the operands come from memory. The variants
// alternate within each of --rounds rounds; each keeps its fastest round, and the
// table gives GFLOP/s and the ratio to OpenBLAS. On a shared VM whose speed drifts, read the
// ratios, not the rates. Needs a CPU with AVX2 and FMA.
//
//   cmake --build build --target dev_own_gemm && build/bin/dev_own_gemm [--threads N] [--rounds R] [--cold]
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/cpu_isa.h"
#include "backend/cpu/cpu_sgemm.h"

#if defined(__x86_64__)
extern "C" void openblas_set_num_threads(int);

namespace {

using perceiver::Transpose;
namespace cpu = perceiver::cpu;
constexpr Transpose N = Transpose::kNo, T = Transpose::kYes;

struct Shape {
  const char* what;
  Transpose ta, tb;
  int64_t m, n, k;
  bool piece;  // an attention task's product: one per thread at once
};
const Shape kShapes[] = {
    {"latent projection", N, T, 784, 512, 512, false},   {"its dX", N, N, 784, 512, 512, false},
    {"its dW", T, N, 512, 512, 784, false},              {"decoder projection", N, T, 1025, 1026, 1026, false},
    {"its dX", N, N, 1025, 1026, 1026, false},           {"its dW", T, N, 1026, 1026, 1025, false},
    {"encoder query", N, T, 784, 704, 704, false},       {"encoder S = Q.K^T", N, T, 196, 512, 256, true},
    {"encoder O += P.V", N, N, 196, 256, 512, true},     {"encoder dQ += dS.K", N, N, 196, 416, 512, true},
    {"latent S = Q.K^T", N, T, 196, 512, 64, true},      {"latent O += P.V", N, N, 196, 64, 512, true},
    {"latent dK += dS^T.Q", T, N, 512, 64, 196, true},
    // The demo model (configs/demo.yaml), whose attention is materialised: whole products per task.
    {"demo encoder S = Q.K^T", N, T, 128, 2289, 151, true}, {"demo encoder O = P.V", N, N, 128, 151, 2289, true},
    {"demo encoder dK = dS^T.Q", T, N, 2289, 151, 128, true}, {"demo latent S = Q.K^T", N, T, 128, 128, 16, true},
    {"demo latent O = P.V", N, N, 128, 16, 128, true},     {"demo latent dK = dS^T.Q", T, N, 128, 16, 128, true},
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct Operands {
  std::vector<float> a, b, c;
  int64_t lda, ldb;
  Operands(const Shape& s, int copies) : lda(s.ta == N ? s.k : s.m), ldb(s.tb == N ? s.n : s.k) {
    a.resize(size_t(s.m * s.k * copies)), b.resize(size_t(s.k * s.n * copies)), c.resize(size_t(s.m * s.n * copies));
    uint32_t x = 12345;
    const auto next = [&x] { return float((x = x * 1664525u + 1013904223u) >> 8) * 0x1p-24f - 0.5f; };
    std::generate(a.begin(), a.end(), next), std::generate(b.begin(), b.end(), next);
  }
};

void blas(const Shape& s, const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t m) {
  cblas_sgemm(CblasRowMajor, s.ta == N ? CblasNoTrans : CblasTrans, s.tb == N ? CblasNoTrans : CblasTrans, int(m),
              int(s.n), int(s.k), 1.0f, a, int(lda), b, int(ldb), 0.0f, c, int(s.n));
}

const float* rows_of_a(const Shape& s, const float* a, int64_t lda, int64_t r0) {
  return s.ta == N ? a + r0 * lda : a + r0;
}

// One whole product in row tiles over the pool: variant 0 OpenBLAS, 1 ours, 2 ours on shared B.
void whole(const Shape& s, Operands& o, int variant, float* shared) {
  const int threads = omp_get_max_threads();
  const int64_t align = variant == 0 ? 12 : cpu::kOwnGemmRows;
  cpu::OwnPackedB packed;
  if (variant == 2) packed = cpu::isa_v3::pack_b(s.tb, s.k, s.n, o.b.data(), o.ldb, shared, true);
#pragma omp parallel for schedule(static, 1)
  for (int t = 0; t < threads; ++t) {
    const int64_t r0 = t * s.m / threads / align * align, r1 = t + 1 == threads ? s.m : (t + 1) * s.m / threads / align * align;
    const float* a = rows_of_a(s, o.a.data(), o.lda, r0);
    float* c = o.c.data() + r0 * s.n;
    if (variant == 0) blas(s, a, o.lda, o.b.data(), o.ldb, c, r1 - r0);
    if (variant == 1) cpu::isa_v3::sgemm(s.ta, s.tb, r1 - r0, s.n, s.k, 1.0f, a, o.lda, o.b.data(), o.ldb, 0.0f, c, s.n);
    if (variant == 2) cpu::isa_v3::sgemm_packed_b(s.ta, r1 - r0, s.n, s.k, 1.0f, a, o.lda, packed, 0, 0, 0.0f, c, s.n);
  }
}

// Every thread its own piece at once: variant 0 OpenBLAS, 1 ours, 2 ours on B packed beforehand.
void pieces(const Shape& s, Operands& o, int variant, const std::vector<cpu::OwnPackedB>& packed) {
#pragma omp parallel
  {
    const int t = omp_get_thread_num();
    const float *a = o.a.data() + t * s.m * s.k, *b = o.b.data() + t * s.k * s.n;
    float* c = o.c.data() + t * s.m * s.n;
    if (variant == 0) blas(s, a, o.lda, b, o.ldb, c, s.m);
    if (variant == 1) cpu::isa_v3::sgemm(s.ta, s.tb, s.m, s.n, s.k, 1.0f, a, o.lda, b, o.ldb, 0.0f, c, s.n);
    if (variant == 2) cpu::isa_v3::sgemm_packed_b(s.ta, s.m, s.n, s.k, 1.0f, a, o.lda, packed[size_t(t)], 0, 0, 0.0f, c, s.n);
  }
}

// Writes a buffer twice the size of the caches, so that the next product's operands come from memory
// (as in a training step, where other layers ran in between).
void evict(std::vector<float>& flush) {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < flush.size(); i += 16) flush[i] += 1.0f;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, rounds = 15;
  bool cold = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--cold")) cold = true;
    else if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) threads = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = std::atoi(argv[++i]);
  }
  std::vector<float> flush(size_t(16) << 20);  // 64 MB: twice the L3 here
  if (!cpu::isa_supported(cpu::Isa::kV3)) {
    std::fprintf(stderr, "dev_own_gemm: this CPU has no AVX2 and FMA\n");
    return 77;
  }
  openblas_set_num_threads(1);
  omp_set_num_threads(threads);
  std::printf("threads %d, best of %d interleaved rounds%s\n\n", threads, rounds,
              cold ? ", operands from memory (the caches flushed before each call)" : ", operands in cache");
  std::printf("| product | shape | OpenBLAS GFLOP/s | ours | ours, B packed once | ours / OpenBLAS | packed / OpenBLAS |\n");
  std::printf("|---|---|---:|---:|---:|---:|---:|\n");
  for (const Shape& s : kShapes) {
    Operands o(s, s.piece ? threads : 1);
    std::vector<float> shared(size_t(cpu::isa_v3::packed_b_size(s.k, s.n) + 16) * (s.piece ? threads : 1));
    float* panels = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(shared.data()) + 63) / 64 * 64);
    std::vector<cpu::OwnPackedB> packed;
    for (int t = 0; s.piece && t < threads; ++t)
      packed.push_back(cpu::isa_v3::pack_b(s.tb, s.k, s.n, o.b.data() + t * s.k * s.n, o.ldb,
                                           panels + t * cpu::isa_v3::packed_b_size(s.k, s.n), false));
    const double flop = 2.0 * double(s.m * s.n * s.k) * (s.piece ? threads : 1);
    const int calls = std::max(1, int(4e8 / flop));
    double best[3] = {1e30, 1e30, 1e30};
    for (int r = 0; r < rounds; ++r)
      for (int v = 0; v < 3; ++v) {
        double total = 0;
        for (int i = 0; i < (cold ? 3 : calls); ++i) {
          if (cold) evict(flush);
          const auto t0 = std::chrono::steady_clock::now();
          s.piece ? pieces(s, o, v, packed) : whole(s, o, v, panels);
          total += seconds_since(t0);
        }
        best[v] = std::min(best[v], total / (cold ? 3 : calls));
      }
    const auto rate = [&](int v) { return flop / best[v] * 1e-9; };
    std::printf("| %s | %s%s %lldx%lldx%lld | %.1f | %.1f | %.1f | %.2f | %.2f |\n", s.what, s.ta == N ? "N" : "T",
                s.tb == N ? "N" : "T", (long long)s.m, (long long)s.n, (long long)s.k, rate(0), rate(1), rate(2),
                best[0] / best[1], best[0] / best[2]);
  }
  return 0;
}
#else
int main() {
  std::fprintf(stderr, "dev_own_gemm: x86-64 only\n");
  return 77;
}
#endif
