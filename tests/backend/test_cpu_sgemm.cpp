// The float32 products' kernels (backend/cpu/cpu_sgemm.h): which ones run, and our own x86-64-v3
// kernel against a double reference, against the one fused multiply-add chain per element that it
// promises (bitwise), in any tiling, and with BLAS's rules for alpha, beta and k = 0.
#include <gtest/gtest.h>

#include <cblas.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/cpu_dnnl.h"
#include "backend/cpu/cpu_isa.h"
#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_sgemm.h"
#include "perceiver/backend.h"
#include "perceiver/threads.h"
#include "random_vec.h"

namespace perceiver::cpu {
namespace {

constexpr Transpose N = Transpose::kNo, T = Transpose::kYes;

#if defined(__x86_64__)
struct Product {
  Transpose ta, tb;
  int64_t m, n, k;
  int64_t pad = 0;  // extra leading-dimension columns of A, B and C
  int64_t lda() const { return (ta == N ? k : m) + pad; }
  int64_t ldb() const { return (tb == N ? n : k) + pad; }
  int64_t ldc() const { return n + pad; }
  size_t a_size() const { return size_t((ta == N ? m : k) * lda()); }
  size_t b_size() const { return size_t((tb == N ? k : n) * ldb()); }
  size_t c_size() const { return size_t(m * ldc()); }
};

float op_a(const Product& p, const std::vector<float>& a, int64_t i, int64_t q) {
  return p.ta == N ? a[size_t(i * p.lda() + q)] : a[size_t(q * p.lda() + i)];
}
float op_b(const Product& p, const std::vector<float>& b, int64_t q, int64_t j) {
  return p.tb == N ? b[size_t(q * p.ldb() + j)] : b[size_t(j * p.ldb() + q)];
}

// What cpu_sgemm.h promises, element by element: alpha folded into A, then one fused chain over
// the depth in order from beta·C (from C itself when beta is 1, from 0 when beta is 0).
std::vector<float> one_chain_per_element(const Product& p, float alpha, const std::vector<float>& a,
                                         const std::vector<float>& b, float beta, std::vector<float> c) {
  for (int64_t i = 0; i < p.m; ++i)
    for (int64_t j = 0; j < p.n; ++j) {
      float& out = c[size_t(i * p.ldc() + j)];
      float acc = beta == 0.0f ? 0.0f : beta == 1.0f ? out : beta * out;
      for (int64_t q = 0; q < p.k; ++q) acc = std::fma(alpha * op_a(p, a, i, q), op_b(p, b, q, j), acc);
      out = acc;
    }
  return c;
}

#define REQUIRE_V3() \
  if (!isa_supported(Isa::kV3)) GTEST_SKIP() << "this CPU has no AVX2 and FMA"

std::vector<float> own(const Product& p, float alpha, const std::vector<float>& a, const std::vector<float>& b,
                       float beta, std::vector<float> c) {
  isa_v3::sgemm(p.ta, p.tb, p.m, p.n, p.k, alpha, a.data(), p.lda(), b.data(), p.ldb(), beta, c.data(), p.ldc());
  return c;
}

// Edges in every dimension (m and n off the 6 x 16 tiles, k off the 4-step loop and past the
// 256-deep blocks, a single depth, rows past the 72-row blocks), padded leading dimensions.
const Product kProducts[] = {{N, N, 1, 1, 1},          {N, T, 5, 7, 3},           {T, N, 6, 16, 4},
                             {T, T, 13, 33, 9},        {N, N, 74, 50, 257, 3},    {N, T, 150, 130, 600, 5},
                             {T, N, 97, 17, 1, 2},     {T, T, 40, 300, 513, 1},   {N, T, 196, 512, 64},
                             {T, N, 512, 64, 196, 4},  {N, N, 31, 2100, 70}};

// Against the chain in double: the kernel computes the product.
TEST(OwnSgemm, MatchesADoubleReference) {
  REQUIRE_V3();
  for (const Product& p : kProducts)
    for (const float alpha : {1.0f, -0.5f})
      for (const float beta : {0.0f, 1.0f, 0.75f}) {
        const auto a = random_vec(int64_t(p.a_size()), 1), b = random_vec(int64_t(p.b_size()), 2);
        const auto c0 = random_vec(int64_t(p.c_size()), 3);
        const std::vector<float> got = own(p, alpha, a, b, beta, c0);
        double worst = 0;  // of the error over its bound, (k + 1)·ε·Σ|terms| for one chain
        for (int64_t i = 0; i < p.m; ++i)
          for (int64_t j = 0; j < p.n; ++j) {
            double want = double(beta) * c0[size_t(i * p.ldc() + j)], magnitude = std::abs(want);
            for (int64_t q = 0; q < p.k; ++q) {
              const double term = double(alpha) * op_a(p, a, i, q) * op_b(p, b, q, j);
              want += term, magnitude += std::abs(term);
            }
            const double bound = double(p.k + 1) * 0x1p-24 * magnitude + 1e-30;
            worst = std::max(worst, std::abs(got[size_t(i * p.ldc() + j)] - want) / bound);
          }
        EXPECT_LT(worst, 1.0) << p.m << "x" << p.n << "x" << p.k << " ta " << int(p.ta) << " tb " << int(p.tb)
                              << " alpha " << alpha << " beta " << beta;
        for (size_t e = 0; e < got.size(); ++e)  // the padding between rows is left alone
          if (int64_t(e) % p.ldc() >= p.n) {
            ASSERT_EQ(got[e], c0[e]) << "padding element " << e;
          }
      }
}

// Bitwise the chain that cpu_sgemm.h promises: what lets tiles follow the thread count.
TEST(OwnSgemm, EveryElementIsOneFusedChainInDepthOrder) {
  REQUIRE_V3();
  for (const Product& p : kProducts)
    for (const float alpha : {1.0f, 0.125f, -3.0f})
      for (const float beta : {0.0f, 1.0f, -0.5f}) {
        const auto a = random_vec(int64_t(p.a_size()), 4), b = random_vec(int64_t(p.b_size()), 5);
        const auto c0 = random_vec(int64_t(p.c_size()), 6);
        const std::vector<float> got = own(p, alpha, a, b, beta, c0);
        const std::vector<float> want = one_chain_per_element(p, alpha, a, b, beta, c0);
        EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)))
            << p.m << "x" << p.n << "x" << p.k << " ta " << int(p.ta) << " tb " << int(p.tb) << " alpha " << alpha
            << " beta " << beta;
      }
}

// Any block of C computed on its own (from offset operands) gets the bits of the whole product.
TEST(OwnSgemm, ABlockOfCOnItsOwnHasTheWholeProductsBits) {
  REQUIRE_V3();
  const Product p{N, T, 150, 130, 600, 0};
  const auto a = random_vec(int64_t(p.a_size()), 7), b = random_vec(int64_t(p.b_size()), 8);
  const auto c0 = random_vec(int64_t(p.c_size()), 9);
  const std::vector<float> whole = own(p, 1.0f, a, b, 1.0f, c0);
  struct Block {
    int64_t row, rows, col, cols;
  };
  for (const Block& blk : {Block{0, 5, 0, 17}, Block{7, 61, 3, 100}, Block{149, 1, 129, 1}, Block{13, 137, 0, 130}}) {
    std::vector<float> c = c0;
    isa_v3::sgemm(N, T, blk.rows, blk.cols, p.k, 1.0f, a.data() + blk.row * p.lda(), p.lda(),
                  b.data() + blk.col * p.ldb(), p.ldb(), 1.0f, c.data() + blk.row * p.ldc() + blk.col, p.ldc());
    for (int64_t i = blk.row; i < blk.row + blk.rows; ++i)
      for (int64_t j = blk.col; j < blk.col + blk.cols; ++j)
        ASSERT_EQ(0, std::memcmp(&c[size_t(i * p.ldc() + j)], &whole[size_t(i * p.ldc() + j)], sizeof(float)))
            << "element " << i << ", " << j << " of the block at " << blk.row << ", " << blk.col;
  }
}

// B packed once (pack_b, over the pool or not) and read in parts gives the bits of packing per
// product: columns from multiples of 16, depths from multiples of the block depth, ending anywhere.
TEST(OwnSgemm, PackedBAndItsPartsGiveTheBitsOfPackingPerProduct) {
  REQUIRE_V3();
  const int64_t k = 700, n = 90, m = 40;
  for (const Transpose tb : {N, T})
    for (const bool parallel : {false, true}) {
      const int64_t ldb = (tb == N ? n : k) + 3;
      const auto b = random_vec((tb == N ? k : n) * ldb, 15), a = random_vec(m * k, 16), c0 = random_vec(m * n, 17);
      std::vector<float> panels(size_t(isa_v3::packed_b_size(k, n)) + 16);
      auto* aligned = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(panels.data()) + 63) / 64 * 64);
      const OwnPackedB packed = isa_v3::pack_b(tb, k, n, b.data(), ldb, aligned, parallel);
      ASSERT_EQ(packed.depth, k);
      ASSERT_EQ(packed.columns, 96);
      struct Part {
        int64_t k0, depth, n0, cols;
      };
      const int64_t bd = packed.block_depth;
      ASSERT_LT(bd, k - 100);
      for (const Part& part : {Part{0, k, 0, n}, Part{bd, k - bd, 16, 74}, Part{bd, 100, 80, 10}, Part{0, 3, 32, 1},
                               Part{0, bd + 50, 0, 30}}) {
        const int64_t k0 = part.k0;
        std::vector<float> got = c0, want = c0;
        isa_v3::sgemm_packed_b(N, m, part.cols, part.depth, 1.0f, a.data() + k0, k, packed, k0, part.n0, 1.0f,
                               got.data(), n);
        const float* b_part = tb == N ? b.data() + k0 * ldb + part.n0 : b.data() + part.n0 * ldb + k0;
        isa_v3::sgemm(N, tb, m, part.cols, part.depth, 1.0f, a.data() + k0, k, b_part, ldb, 1.0f, want.data(), n);
        EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)))
            << "tb " << int(tb) << " parallel " << parallel << " part from depth " << k0 << ", column " << part.n0;
      }
    }
}

// BLAS's rules: beta = 0 does not read C; alpha = 0 or k = 0 read neither A nor B (C = beta·C).
TEST(OwnSgemm, BetaZeroIgnoresCAndAlphaOrDepthZeroIgnoreAAndB) {
  REQUIRE_V3();
  const Product p{N, N, 20, 40, 30, 2};
  const auto a = random_vec(int64_t(p.a_size()), 10), b = random_vec(int64_t(p.b_size()), 11);
  const std::vector<float> nans_c(p.c_size(), std::nanf(""));
  const std::vector<float> from_nan = own(p, 1.0f, a, b, 0.0f, nans_c);
  const std::vector<float> want = one_chain_per_element(p, 1.0f, a, b, 0.0f, nans_c);
  for (int64_t i = 0; i < p.m; ++i)
    for (int64_t j = 0; j < p.n; ++j) ASSERT_EQ(from_nan[size_t(i * p.ldc() + j)], want[size_t(i * p.ldc() + j)]);

  const std::vector<float> nan_a(p.a_size(), std::nanf("")), nan_b(p.b_size(), std::nanf(""));
  const auto c0 = random_vec(int64_t(p.c_size()), 12);
  for (const float beta : {0.0f, 1.0f, 0.5f}) {
    for (const Product& q : {p, Product{N, N, 20, 40, 0, 2}}) {
      const float alpha = q.k == 0 ? 1.0f : 0.0f;
      const std::vector<float> got = own(q, alpha, nan_a, nan_b, beta, c0);
      for (int64_t i = 0; i < p.m; ++i)
        for (int64_t j = 0; j < p.n; ++j)
          ASSERT_EQ(got[size_t(i * p.ldc() + j)], beta * c0[size_t(i * p.ldc() + j)])
              << "alpha " << alpha << " k " << q.k << " beta " << beta;
    }
  }
}
#endif

// Which kernels run where: PERCEIVER_CPU_GEMM, else by the vector kernels' level (cpu_sgemm.h).
TEST(Float32Gemm, TheKernelsFollowTheLevelOrTheRequest) {
  const char* env = std::getenv("PERCEIVER_CPU_GEMM");
  const std::string asked = env ? env : "";
  Float32Gemm want = Float32Gemm::kOpenBlas;
  if (asked == "own") want = Float32Gemm::kOwnAvx2;
  else if (asked == "onednn") want = Float32Gemm::kOneDnn;
  else if (asked.empty() && active_isa() == Isa::kV4 && dnnl_isa().rfind("avx512", 0) == 0) want = Float32Gemm::kOneDnn;
  const std::string level = isa_name(active_isa());
  EXPECT_EQ(int(float32_gemm()), int(want)) << "PERCEIVER_CPU_GEMM '" << asked << "', level " << level;
  EXPECT_EQ(own_gemm() != nullptr, want == Float32Gemm::kOwnAvx2);
  EXPECT_EQ(own_attention_gemm() != nullptr, asked == "own" || (asked.empty() && active_isa() == Isa::kV3)) << level;
}

// The backend's float32 products run on the kernels chosen: bitwise those of a direct call (ours or
// OpenBLAS's; oneDNN's have their own test in test_cpu_dnnl.cpp).
TEST(Float32Gemm, TheBackendRunsTheChosenKernels) {
  if (float32_gemm() == Float32Gemm::kOneDnn) GTEST_SKIP() << "oneDNN runs these products (test_cpu_dnnl.cpp)";
  const int64_t m = 70, n = 45, k = 300;
  const auto a = random_vec(m * k, 13), b = random_vec(n * k, 14);
  std::vector<float> got(size_t(m * n)), direct(size_t(m * n));
  gemm_serial<float>(N, T, m, n, k, 1.0f, a.data(), k, b.data(), k, 0.0f, got.data(), n);
  if (const OwnGemm* own = own_gemm()) {
    own->gemm(N, T, m, n, k, 1.0f, a.data(), k, b.data(), k, 0.0f, direct.data(), n);
  } else {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(m), int(n), int(k), 1.0f, a.data(), int(k), b.data(),
                int(k), 0.0f, direct.data(), int(n));
  }
  EXPECT_EQ(0, std::memcmp(got.data(), direct.data(), got.size() * sizeof(float)));
}

// Whichever kernels run the products, their tiles leave the bits as one call makes them: the same at
// 1 to 8 threads (with PERCEIVER_CPU_GEMM=own: row and column tiles on B packed once or not).
TEST(Float32Gemm, ProductsAreBitwiseTheSameAtOneToEightThreads) {
  struct Case {
    Transpose ta, tb;
    int64_t m, n, k;
  };
  const Case cases[] = {{N, T, 784, 512, 512}, {T, N, 512, 512, 784}, {N, N, 100, 3000, 200}, {T, T, 333, 129, 1500},
                        {N, N, 40, 700, 100}};
  const int before = threads::num_threads();
  for (const Case& c : cases) {
    const auto a = random_vec(c.m * c.k, 21), b = random_vec(c.k * c.n, 22), c0 = random_vec(c.m * c.n, 23);
    const int64_t lda = c.ta == N ? c.k : c.m, ldb = c.tb == N ? c.n : c.k;
    std::vector<float> one;
    for (int t : {1, 2, 3, 5, 8}) {
      threads::set_num_threads(t);
      std::vector<float> got = c0;
      cpu_backend().kernels<float>().gemm(c.ta, c.tb, c.m, c.n, c.k, 1.0f, a.data(), lda, b.data(), ldb, 1.0f,
                                          got.data(), c.n);
      if (t == 1) one = got;
      EXPECT_EQ(0, std::memcmp(one.data(), got.data(), got.size() * sizeof(float)))
          << c.m << "x" << c.n << "x" << c.k << " differs between 1 and " << t << " threads";
    }
  }
  threads::set_num_threads(before);
}

// The attention's task products run on our kernel where own_attention_gemm() says so, else on
// gemm_serial's: a materialised forward (two pairs, one task each) is bitwise the composition of
// those products and the softmax kernel.
TEST(Float32Gemm, TheAttentionsProductsRunOnTheChosenKernels) {
  AttentionDims d;
  d.batch = 1, d.heads = 2, d.nq = 37, d.nk = 130, d.dqk = 16, d.dv = 24, d.scale = 0.25, d.kv_chunk = 0;
  const int64_t ldq = d.heads * d.dqk, ldv = d.heads * d.dv;
  const auto q = random_vec(d.nq * ldq, 18), k = random_vec(d.nk * ldq, 19), v = random_vec(d.nk * ldv, 20);
  std::vector<float> saved(size_t(d.saved_elems())), o(size_t(d.nq * ldv));
  cpu_backend().kernels<float>().attention_forward(d, q.data(), k.data(), v.data(), o.data(), saved.data());
  const OwnGemm* own = own_attention_gemm();
  const auto product = [own](Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t kk, float alpha, const float* a,
                             int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc) {
    if (own) own->gemm(ta, tb, m, n, kk, alpha, a, lda, b, ldb, 0.0f, c, ldc);
    else gemm_serial<float>(ta, tb, m, n, kk, alpha, a, lda, b, ldb, 0.0f, c, ldc);
  };
  std::vector<float> p(saved.size()), want(o.size());
  for (int64_t h = 0; h < d.heads; ++h) {
    float* ph = p.data() + h * d.nq * d.nk;
    product(N, T, d.nq, d.nk, d.dqk, float(d.scale), q.data() + h * d.dqk, ldq, k.data() + h * d.dqk, ldq, ph, d.nk);
    softmax_forward(d.nq, d.nk, ph, ph);
    product(N, N, d.nq, d.dv, d.nk, 1.0f, ph, d.nk, v.data() + h * d.dv, ldv, want.data() + h * d.dv, ldv);
  }
  EXPECT_EQ(0, std::memcmp(saved.data(), p.data(), p.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(o.data(), want.data(), o.size() * sizeof(float)));
}

}  // namespace
}  // namespace perceiver::cpu
