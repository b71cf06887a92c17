// CPU bf16 products (--precision bf16 on --device cpu, cpu_bf16.h): the rounding, every GEMM
// path against a double reference on the bf16-rounded operands, independence of the thread
// count, products on operands stored as bf16, attention within bf16 tolerance of float32, K and V
// kept as bf16 (AttentionDims::kv_bf16) against keeping them in float32, the backend's table and
// the refusal where the CPU cannot. CTest runs the suite once more on the emulated products
// (PERCEIVER_CPU_BF16_GEMM=emulated), so the bf16 path is checked on CPUs without bf16 too.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cpu/cpu_bf16.h"
#include "backend/cpu/cpu_bf16_rate.h"
#include "backend/cpu/cpu_kernels.h"
#include "core/cpu_features.h"
#include "core/params.h"
#include "layers/attention_block.h"
#include "perceiver/backend.h"
#include "perceiver/error.h"
#include "random_vec.h"

namespace perceiver::cpu {
namespace {

bool available() { return bf16_products_available(nullptr); }
#define REQUIRE_BF16() \
  if (!available()) GTEST_SKIP() << "this build or CPU has no bf16 products"

float round_bf16(float x) { return from_bf16(to_bf16(x)); }

TEST(CpuBf16, RoundsToNearestEven) {
  EXPECT_EQ(to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);      // halfway: down to the even 1.0
  EXPECT_EQ(to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);  // halfway: up to the even one
  EXPECT_EQ(to_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)), 0x3f81);  // above halfway
  EXPECT_EQ(to_bf16(-2.0f), 0xc000);
  EXPECT_EQ(to_bf16(INFINITY), 0x7f80);
  EXPECT_EQ(to_bf16(3.4e38f), 0x7f80);  // beyond the largest bf16: rounds to infinity
  EXPECT_TRUE(std::isnan(from_bf16(to_bf16(NAN))));
  EXPECT_TRUE(std::isnan(from_bf16(to_bf16(-NAN))));
  for (float x : random_vec(1000, 1)) EXPECT_LE(std::fabs(round_bf16(x) - x), std::ldexp(std::fabs(x), -8)) << x;
}

struct Case {
  Transpose ta, tb;
  int64_t m, n, k;
  float alpha, beta;
};

// C = alpha·op(A)·op(B) + beta·C in double on the rounded operands; `bound` is Σ|a·b| per element,
// the scale of float32 accumulation error.
void reference(const Case& c, const std::vector<float>& a, int64_t lda, const std::vector<float>& b, int64_t ldb,
               std::vector<double>& out, std::vector<double>& bound, const std::vector<float>& c0, int64_t ldc) {
  out.assign(size_t(c.m * c.n), 0);
  bound.assign(size_t(c.m * c.n), 0);
  for (int64_t i = 0; i < c.m; ++i)
    for (int64_t j = 0; j < c.n; ++j) {
      double s = 0, sa = 0;
      for (int64_t p = 0; p < c.k; ++p) {
        const float av = c.ta == Transpose::kNo ? a[size_t(i * lda + p)] : a[size_t(p * lda + i)];
        const float bv = c.tb == Transpose::kNo ? b[size_t(p * ldb + j)] : b[size_t(j * ldb + p)];
        const double prod = double(round_bf16(av)) * double(round_bf16(bv));
        s += prod, sa += std::fabs(prod);
      }
      out[size_t(i * c.n + j)] = c.alpha * s + (c.beta == 0 ? 0.0 : c.beta * double(c0[size_t(i * ldc + j)]));
      bound[size_t(i * c.n + j)] = std::fabs(c.alpha) * sa + std::fabs(c.beta * c0[size_t(i * ldc + j)]);
    }
}

// Every path: small (one call), tiled over rows or columns, K-split, transposes, leading
// dimensions wider than the matrix, alpha and beta.
const std::vector<Case> kCases = {
    {Transpose::kNo, Transpose::kNo, 7, 5, 3, 1.0f, 0.0f},         {Transpose::kNo, Transpose::kYes, 33, 17, 64, 0.5f, 1.0f},
    {Transpose::kYes, Transpose::kNo, 300, 96, 80, 1.0f, 0.0f},    {Transpose::kYes, Transpose::kYes, 40, 260, 72, -2.0f, 0.5f},
    {Transpose::kNo, Transpose::kNo, 64, 48, 4096, 1.0f, 1.0f},    {Transpose::kYes, Transpose::kNo, 32, 40, 3000, 0.25f, 0.0f},
    {Transpose::kYes, Transpose::kNo, 600, 40, 2048, 1.0f, 1.0f},  {Transpose::kNo, Transpose::kYes, 250, 72, 96, 0.5f, 1.0f},
    {Transpose::kNo, Transpose::kNo, 230, 70, 100, 1.0f, 0.0f},    {Transpose::kNo, Transpose::kNo, 5, 6, 0, 1.0f, 0.5f},
    // row tiles where m < n (two of them, B shared with AMX), and an even count of them (6, not 5)
    {Transpose::kNo, Transpose::kYes, 400, 420, 100, 1.0f, 0.5f}, {Transpose::kNo, Transpose::kNo, 1000, 40, 64, 1.0f, 0.0f}};

// Random A and B of a case as stored (op(A) [m,k] as [k,m] when transposed, likewise B), with
// `pad_a`, `pad_b` values between rows; the seeds are `seed` and `seed + 1`.
struct Operands {
  std::vector<float> a, b;
  int64_t lda, ldb;
};
Operands random_operands(const Case& c, int64_t pad_a, int64_t pad_b, uint64_t seed) {
  const int64_t ar = c.ta == Transpose::kNo ? c.m : c.k, ac = c.ta == Transpose::kNo ? c.k : c.m;
  const int64_t br = c.tb == Transpose::kNo ? c.k : c.n, bc = c.tb == Transpose::kNo ? c.n : c.k;
  const int64_t lda = ac + pad_a, ldb = bc + pad_b;
  return {random_vec(std::max<int64_t>(1, ar * lda), seed), random_vec(std::max<int64_t>(1, br * ldb), seed + 1), lda,
          ldb};
}

TEST(CpuBf16, GemmMatchesADoubleReferenceOnRoundedOperands) {
  REQUIRE_BF16();
  for (const Case& c : kCases) {
    const Operands o = random_operands(c, 3, 1, 2);  // named, not bound: OpenMP regions below use them
    const std::vector<float>& a = o.a;
    const std::vector<float>& b = o.b;
    const int64_t lda = o.lda, ldb = o.ldb;
    const int64_t ldc = c.n + 2;
    const auto c0 = random_vec(c.m * ldc, 4);
    std::vector<double> want, bound;
    reference(c, a, lda, b, ldb, want, bound, c0, ldc);
    for (bool inside_region : {false, true}) {
      std::vector<float> got = c0;
      if (inside_region) {
#pragma omp parallel num_threads(2)
#pragma omp single
        gemm_bf16(c.ta, c.tb, c.m, c.n, c.k, c.alpha, a.data(), lda, b.data(), ldb, c.beta, got.data(), ldc);
      } else {
        gemm_bf16(c.ta, c.tb, c.m, c.n, c.k, c.alpha, a.data(), lda, b.data(), ldb, c.beta, got.data(), ldc);
      }
      double worst = 0;
      for (int64_t i = 0; i < c.m; ++i)
        for (int64_t j = 0; j < c.n; ++j) {
          const double err = std::fabs(got[size_t(i * ldc + j)] - want[size_t(i * c.n + j)]);
          worst = std::max(worst, err / (bound[size_t(i * c.n + j)] * 1e-6 * std::sqrt(double(c.k) + 1) + 1e-30));
        }
      EXPECT_LE(worst, 1.0) << "m=" << c.m << " n=" << c.n << " k=" << c.k << (inside_region ? " in a region" : "");
      for (int64_t i = 0; i < c.m; ++i)  // the padding between rows is not touched
        for (int64_t j = c.n; j < ldc; ++j) EXPECT_EQ(got[size_t(i * ldc + j)], c0[size_t(i * ldc + j)]);
    }
  }
}

TEST(CpuBf16, GemmIsBitwiseTheSameAtOneAndTwoThreads) {
  REQUIRE_BF16();
  for (const Case& c : kCases) {
    const auto [a, b, ac, bc] = random_operands(c, 0, 0, 5);
    std::vector<std::vector<float>> out;
    for (int threads : {1, 2}) {
      omp_set_num_threads(threads);
      std::vector<float> got = random_vec(c.m * c.n, 7);
      gemm_bf16(c.ta, c.tb, c.m, c.n, c.k, c.alpha, a.data(), ac, b.data(), bc, c.beta, got.data(), c.n);
      out.push_back(got);
    }
    omp_set_num_threads(2);
    EXPECT_EQ(out[0], out[1]) << "m=" << c.m << " n=" << c.n << " k=" << c.k;
  }
}

// On our AMX kernel every output element is the same chain of tile products over K wherever its
// row or column tile starts, so a product split into tiles (cpu_gemm_tiling.h, on 32-row
// boundaries: the latent layers' 784 rows as 192, 192, 192, 208) is bitwise one call over the
// whole output.
TEST(CpuBf16, AmxTilesAreBitwiseOneCallOverTheWholeOutput) {
  REQUIRE_BF16();
  if (!amx_products())
    GTEST_SKIP() << "bf16 products by " << bf16_products_kernel() << " here, whose sums may depend on a piece's size";
  const std::vector<Case> cases = {{Transpose::kNo, Transpose::kYes, 784, 512, 512, 1.0f, 0.0f},
                                   {Transpose::kNo, Transpose::kNo, 784, 512, 512, 1.0f, 1.0f},
                                   {Transpose::kYes, Transpose::kNo, 512, 512, 784, 1.0f, 1.0f},
                                   {Transpose::kNo, Transpose::kYes, 1025, 1026, 1026, 0.5f, 0.0f},
                                   {Transpose::kNo, Transpose::kNo, 100, 700, 64, 1.0f, 0.0f}};
  for (const Case& c : cases) {
    const auto [a, b, ac, bc] = random_operands(c, 0, 0, 11);
    std::vector<float> tiled = random_vec(c.m * c.n, 13), whole = tiled;
    gemm_bf16(c.ta, c.tb, c.m, c.n, c.k, c.alpha, a.data(), ac, b.data(), bc, c.beta, tiled.data(), c.n);
    gemm_bf16_serial(c.ta, c.tb, c.m, c.n, c.k, c.alpha, a.data(), ac, b.data(), bc, c.beta, whole.data(), c.n);
    EXPECT_EQ(tiled, whole) << "m=" << c.m << " n=" << c.n << " k=" << c.k;
  }
}

// The product on operands stored as bf16 (KernelTable::gemm_stored_bf16) is gemm_bf16 on the
// values they hold, bitwise, on every path (one call, row or column tiles, K slices).
TEST(CpuBf16, GemmOnStoredBf16OperandsIsBitwiseGemmOnTheirValues) {
  REQUIRE_BF16();
  for (const Case& c : kCases) {
    const auto [a, b, ac, bc] = random_operands(c, 0, 0, 12);
    std::vector<uint16_t> a16(a.size()), b16(b.size());
    store_bf16(1, int64_t(a.size()), a.data(), 0, a16.data(), 0);
    store_bf16(1, int64_t(b.size()), b.data(), 0, b16.data(), 0);
    const auto c0 = random_vec(c.m * c.n, 14);
    std::vector<float> want = c0, got = c0;
    gemm_bf16(c.ta, c.tb, c.m, c.n, c.k, c.alpha, a.data(), ac, b.data(), bc, c.beta, want.data(), c.n);
    gemm_stored_bf16(c.ta, c.tb, c.m, c.n, c.k, c.alpha, a16.data(), ac, b16.data(), bc, c.beta, got.data(), c.n);
    EXPECT_EQ(got, want) << "m=" << c.m << " n=" << c.n << " k=" << c.k;
  }
}

// Attention forward and backward on fixed random inputs, float32 or bf16 products.
struct AttentionRun {
  std::vector<float> o, saved, dq, dk, dv;
  AttentionRun(const AttentionDims& d, bool bf16) {
    const size_t nq = size_t(d.batch * d.nq * d.heads), nk = size_t(d.batch * d.nk * d.heads);
    const auto q = random_vec(int64_t(nq) * d.dqk, 8), k = random_vec(int64_t(nk) * d.dqk, 9);
    const auto v = random_vec(int64_t(nk) * d.dv, 10), dout = random_vec(int64_t(nq) * d.dv, 11);
    o.assign(nq * size_t(d.dv), 0), saved.assign(size_t(d.saved_elems()), 0);
    dq.assign(q.size(), 0), dk.assign(k.size(), 0), dv.assign(v.size(), 0);
    (bf16 ? attention_forward_bf16 : attention_forward<float>)(d, q.data(), k.data(), v.data(), o.data(), saved.data());
    (bf16 ? attention_backward_bf16 : attention_backward<float>)(d, q.data(), k.data(), v.data(), o.data(),
                                                                 saved.data(), dout.data(), dq.data(), dk.data(),
                                                                 dv.data());
  }
};

AttentionDims bf16_attention_dims(int64_t nq, int64_t chunk) {
  AttentionDims d;
  d.batch = 2, d.heads = 2, d.nq = nq, d.nk = 130, d.dqk = 16, d.dv = 24, d.scale = 0.25, d.kv_chunk = chunk;
  d.dropout_p = 0.1, d.dropout_key = 99;
  return d;
}

// bf16 attention against float32: materialised (with dropout and without) and streamed (one query block, and 230 rows: two, which read
// the once-rounded Q and dO from row 115 on), forward and backward.
TEST(CpuBf16, AttentionIsWithinBf16ToleranceOfFloat32) {
  REQUIRE_BF16();
  for (const auto& [nq, chunk, dropout] : {std::tuple<int64_t, int64_t, double>{20, 0, 0.1}, {20, 0, 0.0},
                                           {20, 48, 0.1}, {230, 48, 0.1}}) {
    AttentionDims d = bf16_attention_dims(nq, chunk);
    d.dropout_p = dropout;
    const AttentionRun r[2] = {AttentionRun(d, false), AttentionRun(d, true)};
    auto rel = [](const std::vector<float>& got, const std::vector<float>& want) {
      double num = 0, den = 0;
      for (size_t i = 0; i < got.size(); ++i) num += std::pow(got[i] - want[i], 2), den += std::pow(want[i], 2);
      return std::sqrt(num / den);
    };
    // bf16 keeps 8 significant bits (relative rounding 2^-9 = 0.002); a few products deep, the
    // relative RMS error stays near 1%. An fp32 path would be ~1e-7, a wrong one ~1.
    for (const auto& [name, err] : {std::pair{"O", rel(r[1].o, r[0].o)}, {"dQ", rel(r[1].dq, r[0].dq)},
                                    {"dK", rel(r[1].dk, r[0].dk)}, {"dV", rel(r[1].dv, r[0].dv)}}) {
      EXPECT_LT(err, 0.02) << name << " nq " << nq << " chunk " << chunk << " dropout " << dropout;
      EXPECT_GT(err, 1e-4) << name << " nq " << nq << " chunk " << chunk << " dropout " << dropout
                           << ": no bf16 rounding at all?";
    }
  }
}

// The materialised form with bf16 products (no dropout, several pairs, each on one thread): P, O
// and dV are bitwise the plain composition of gemm_bf16_serial and softmax_forward per pair (dQ and
// dK go through the softmax gradient, computed in the kernel's own translation unit: within float
// rounding of it instead).
TEST(CpuBf16, MaterialisedPairsAreTheCompositionOfTheirProducts) {
  REQUIRE_BF16();
  AttentionDims d = bf16_attention_dims(37, 0);
  d.dropout_p = 0;
  const AttentionRun got(d, true);
  const int64_t ldq = d.heads * d.dqk, ldv = d.heads * d.dv;
  const auto q = random_vec(d.batch * d.nq * ldq, 8), k = random_vec(d.batch * d.nk * ldq, 9);
  const auto v = random_vec(d.batch * d.nk * ldv, 10), dout = random_vec(d.batch * d.nq * ldv, 11);
  std::vector<float> p(size_t(d.saved_elems())), o(got.o.size()), dq(got.dq.size(), 0), dk(got.dk.size(), 0),
      dv(got.dv.size(), 0), ds(size_t(d.nq * d.nk));
  const auto N = Transpose::kNo, T = Transpose::kYes;
  for (int64_t b = 0; b < d.batch; ++b)
    for (int64_t h = 0; h < d.heads; ++h) {
      float* pp = p.data() + (b * d.heads + h) * d.nq * d.nk;
      const float *qs = q.data() + b * d.nq * ldq + h * d.dqk, *ks = k.data() + b * d.nk * ldq + h * d.dqk;
      const float *vs = v.data() + b * d.nk * ldv + h * d.dv, *gs = dout.data() + b * d.nq * ldv + h * d.dv;
      gemm_bf16_serial(N, T, d.nq, d.nk, d.dqk, float(d.scale), qs, ldq, ks, ldq, 0.0f, pp, d.nk);
      softmax_forward(d.nq, d.nk, pp, pp);
      gemm_bf16_serial(N, N, d.nq, d.dv, d.nk, 1.0f, pp, d.nk, vs, ldv, 0.0f, o.data() + b * d.nq * ldv + h * d.dv, ldv);
      gemm_bf16_serial(T, N, d.nk, d.dv, d.nq, 1.0f, pp, d.nk, gs, ldv, 1.0f, dv.data() + b * d.nk * ldv + h * d.dv, ldv);
      gemm_bf16_serial(N, T, d.nq, d.nk, d.dv, 1.0f, gs, ldv, vs, ldv, 0.0f, ds.data(), d.nk);
      for (int64_t i = 0; i < d.nq; ++i) {  // dS = P ⊙ (dP − rowsum(dP ⊙ P)) · scale
        double dot = 0;
        for (int64_t j = 0; j < d.nk; ++j) dot += double(ds[size_t(i * d.nk + j)]) * pp[i * d.nk + j];
        for (int64_t j = 0; j < d.nk; ++j)
          ds[size_t(i * d.nk + j)] = pp[i * d.nk + j] * (ds[size_t(i * d.nk + j)] - float(dot)) * float(d.scale);
      }
      gemm_bf16_serial(N, N, d.nq, d.dqk, d.nk, 1.0f, ds.data(), d.nk, ks, ldq, 1.0f,
                       dq.data() + b * d.nq * ldq + h * d.dqk, ldq);
      gemm_bf16_serial(T, N, d.nk, d.dqk, d.nq, 1.0f, ds.data(), d.nk, qs, ldq, 1.0f,
                       dk.data() + b * d.nk * ldq + h * d.dqk, ldq);
    }
  EXPECT_EQ(got.saved, p);
  EXPECT_EQ(got.o, o);
  EXPECT_EQ(got.dv, dv);
  for (const auto& [name, x, want] : {std::tuple{"dQ", &got.dq, &dq}, {"dK", &got.dk, &dk}}) {
    double num = 0, den = 0;
    for (size_t i = 0; i < want->size(); ++i) num += std::pow((*x)[i] - (*want)[i], 2), den += std::pow((*want)[i], 2);
    EXPECT_LT(std::sqrt(num / den), 1e-5) << name;
    EXPECT_GT(den, 0) << name;
  }
}

TEST(CpuBf16, StreamedAttentionIsBitwiseTheSameAtOneAndTwoThreads) {
  REQUIRE_BF16();
  const AttentionDims d = bf16_attention_dims(230, 48);
  omp_set_num_threads(1);
  const AttentionRun one(d, true);
  omp_set_num_threads(2);
  const AttentionRun two(d, true);
  EXPECT_EQ(one.o, two.o);
  EXPECT_EQ(one.dq, two.dq);
  EXPECT_EQ(one.dk, two.dk);
  EXPECT_EQ(one.dv, two.dv);
}

// The streamed kernel with K and V given as bf16 and dK, dV written over them as bf16, against
// the same call on float32 K and V: the products read the same rounded values, so O, the saved
// log-sum-exp and dQ are bitwise the same and dK, dV are the float32 ones rounded.
TEST(CpuBf16, StreamedAttentionReadsAndWritesBf16KeysAndValues) {
  REQUIRE_BF16();
  AttentionDims d = bf16_attention_dims(230, 48);
  d.kv_grad_in_place = true;
  const int64_t nq = d.batch * d.nq * d.heads, nk = d.batch * d.nk * d.heads;
  const auto q = random_vec(nq * d.dqk, 8), dout = random_vec(nq * d.dv, 11);
  std::vector<float> k = random_vec(nk * d.dqk, 9), v = random_vec(nk * d.dv, 10);
  std::vector<uint16_t> k16(k.size()), v16(v.size());
  for (size_t i = 0; i < k.size(); ++i) k16[i] = to_bf16(k[i]);
  for (size_t i = 0; i < v.size(); ++i) v16[i] = to_bf16(v[i]);
  auto as_float = [](std::vector<uint16_t>& x) { return reinterpret_cast<float*>(x.data()); };
  struct Out {
    std::vector<float> o, saved, dq;
  };
  auto run = [&](const AttentionDims& dd, float* kk, float* vv) {
    Out r{std::vector<float>(size_t(nq * d.dv)), std::vector<float>(size_t(d.saved_elems())),
          std::vector<float>(q.size())};
    attention_forward_bf16(dd, q.data(), kk, vv, r.o.data(), r.saved.data());
    attention_backward_bf16(dd, q.data(), kk, vv, r.o.data(), r.saved.data(), dout.data(), r.dq.data(), kk, vv);
    return r;
  };
  const Out f32 = run(d, k.data(), v.data());  // k, v now hold dK, dV
  AttentionDims d16 = d;
  d16.kv_bf16 = true;
  const Out b16 = run(d16, as_float(k16), as_float(v16));
  EXPECT_EQ(f32.o, b16.o);
  EXPECT_EQ(f32.saved, b16.saved);
  EXPECT_EQ(f32.dq, b16.dq);
  size_t k_wrong = 0, v_wrong = 0;
  for (size_t i = 0; i < k.size(); ++i) k_wrong += k16[i] != to_bf16(k[i]);
  for (size_t i = 0; i < v.size(); ++i) v_wrong += v16[i] != to_bf16(v[i]);
  EXPECT_EQ(k_wrong, 0u) << "of " << k.size() << " dK values";
  EXPECT_EQ(v_wrong, 0u) << "of " << v.size() << " dV values";
  // The float32 kernel and the materialised one refuse bf16 K and V.
  std::vector<float> o(size_t(nq * d.dv)), saved(size_t(d.saved_elems()));
  EXPECT_THROW(attention_forward<float>(d16, q.data(), as_float(k16), as_float(v16), o.data(), saved.data()), Error);
  d16.kv_chunk = 0;
  EXPECT_THROW(attention_forward_bf16(d16, q.data(), as_float(k16), as_float(v16), o.data(), saved.data()), Error);
}

// Keys and values in one buffer (the encoder's folded call) are rounded once for both: the same
// bits as from two buffers holding the same values, and dK and dV added into the one buffer.
TEST(CpuBf16, StreamedAttentionWithKeysAsValuesMatchesTwoBuffers) {
  REQUIRE_BF16();
  AttentionDims d;
  d.batch = 2, d.heads = 1, d.nq = 150, d.nk = 700, d.dqk = 48, d.dv = 48, d.scale = 0.2, d.kv_chunk = 256;
  const auto q = random_vec(d.batch * d.nq * d.dqk, 31), dout = random_vec(d.batch * d.nq * d.dv, 32);
  const auto x = random_vec(d.batch * d.nk * d.dqk, 33);
  struct Out {
    std::vector<float> o, saved, dq, dk, dv;
  };
  auto run = [&](bool one_buffer) {
    Out r{std::vector<float>(q.size()), std::vector<float>(size_t(d.saved_elems())), std::vector<float>(q.size()),
          std::vector<float>(x.size()), std::vector<float>(x.size())};
    std::vector<float> v = x;  // a copy: the same values in another buffer
    const float* vv = one_buffer ? x.data() : v.data();
    float* dvv = one_buffer ? r.dk.data() : r.dv.data();
    attention_forward_bf16(d, q.data(), x.data(), vv, r.o.data(), r.saved.data());
    attention_backward_bf16(d, q.data(), x.data(), vv, r.o.data(), r.saved.data(), dout.data(), r.dq.data(),
                            r.dk.data(), dvv);
    return r;
  };
  const Out one = run(true), two = run(false);
  EXPECT_EQ(one.o, two.o);
  EXPECT_EQ(one.saved, two.saved);
  EXPECT_EQ(one.dq, two.dq);
  double worst = 0, scale = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double sum = double(two.dk[i]) + double(two.dv[i]);
    worst = std::max(worst, std::abs(double(one.dk[i]) - sum));
    scale = std::max(scale, std::abs(sum));
  }
  EXPECT_GT(scale, 0.0);
  EXPECT_LE(worst, 1e-5 * scale) << "dK + dV into one buffer against their sum from two";
}

// The folded encoder's calls over ranges of one key axis, with its queries and keys (= values)
// given as bf16 (AttentionDims::q_bf16, kv_bf16) against the same calls on float32 ones holding
// the rounded values: the products read the same bf16 operands, so the forward's O and log-sum-exp
// and the key sums' dQ, query sums and key sums are bitwise the same. Two heads for the forward
// (their queries are copied packed per pair), one for the key sums (which take one).
TEST(CpuBf16, CallsOverKeyRangesTakeBf16QueriesAndKeys) {
  REQUIRE_BF16();
  const auto rounded = [](std::vector<float> x) {
    for (float& e : x) e = round_bf16(e);
    return x;
  };
  const auto bf16_of = [](const std::vector<float>& x) {
    std::vector<uint16_t> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = to_bf16(x[i]);
    return y;
  };
  const auto as_float = [](std::vector<uint16_t>& x) { return reinterpret_cast<float*>(x.data()); };
  const auto max_abs = [](const std::vector<float>& x) {
    float m = 0;
    for (const float e : x) m = std::max(m, std::abs(e));
    return m;
  };
  constexpr int64_t kRange = 320;  // key ranges of 320, 320 and 60 keys, chunks of 64 inside them
  for (const int64_t heads : {1, 2}) {
    AttentionDims d;
    d.batch = 2, d.heads = heads, d.nq = 150, d.nk = 700, d.dqk = d.dv = 32, d.scale = 0.2, d.kv_chunk = 64;
    const int64_t width = heads * d.dqk;
    const auto q = rounded(random_vec(d.batch * d.nq * width, 41)), x = rounded(random_vec(d.batch * d.nk * width, 42));
    const auto dout = random_vec(d.batch * d.nq * width, 43);
    std::vector<uint16_t> q16 = bf16_of(q), x16 = bf16_of(x);
    const std::vector<uint8_t> group = [&] {
      std::vector<uint8_t> g(size_t(d.batch * d.nk));
      for (size_t i = 0; i < g.size(); ++i) g[i] = uint8_t(i % 7 == 3 ? 255 : i % 3);  // some keys in none
      return g;
    }();
    const auto weight = random_vec(d.batch * d.nk, 44);
    // Keys [r0, r0 + n) of every batch item, [B, n, H·dqk], as float and as bf16.
    struct RangeKeys {
      std::vector<float> x;
      std::vector<uint16_t> x16;
    };
    const auto range_keys = [&](int64_t r0, int64_t n) {
      RangeKeys k{std::vector<float>(size_t(d.batch * n * width)), std::vector<uint16_t>(size_t(d.batch * n * width))};
      for (int64_t b = 0; b < d.batch; ++b)
        for (int64_t i = 0; i < n * width; ++i) {
          k.x[size_t(b * n * width + i)] = x[size_t((b * d.nk + r0) * width + i)];
          k.x16[size_t(b * n * width + i)] = x16[size_t((b * d.nk + r0) * width + i)];
        }
      return k;
    };
    const auto range = [&](int64_t r0, int64_t n, bool bf16) {
      AttentionDims e = d;
      e.key0 = r0, e.key_count = d.nk, e.nk = n, e.q_bf16 = e.kv_bf16 = bf16;
      return e;
    };
    struct Out {
      std::vector<float> o, lse, dq, q_sums, key_sums;
    };
    auto run = [&](bool bf16) {
      Out r{std::vector<float>(dout.size()), std::vector<float>(size_t(d.batch * heads * d.nq)),
            std::vector<float>(q.size()), std::vector<float>(size_t(d.batch * d.nq * 6)),
            std::vector<float>(size_t(d.batch * 3 * d.dqk))};
      const float* qq = bf16 ? as_float(q16) : q.data();
      for (int64_t r0 = 0; r0 < d.nk; r0 += kRange) {
        const int64_t n = std::min(kRange, d.nk - r0);
        AttentionDims e = range(r0, n, bf16);
        e.continues = r0 > 0;
        RangeKeys keys = range_keys(r0, n);
        const float* kk = bf16 ? as_float(keys.x16) : keys.x.data();
        attention_forward_bf16(e, qq, kk, kk, r.o.data(), r.lse.data());
      }
      if (heads > 1) return r;
      for (int64_t r0 = 0; r0 < d.nk; r0 += kRange) {
        const int64_t n = std::min(kRange, d.nk - r0);
        RangeKeys keys = range_keys(r0, n);
        const float* kk = bf16 ? as_float(keys.x16) : keys.x.data();
        attention_backward_key_sums_bf16(range(r0, n, bf16), qq, kk, r.o.data(), r.lse.data(), dout.data(), group.data(),
                                         weight.data(), 3, r.dq.data(), r.q_sums.data(), r.key_sums.data());
      }
      return r;
    };
    const Out f32 = run(false), b16 = run(true);
    EXPECT_GT(max_abs(f32.o), 0.01) << heads << " heads";
    EXPECT_EQ(f32.o, b16.o) << heads << " heads";
    EXPECT_EQ(f32.lse, b16.lse) << heads << " heads";
    if (heads > 1) continue;
    EXPECT_GT(max_abs(f32.key_sums), 0.0);
    EXPECT_GT(max_abs(f32.q_sums), 0.0);
    EXPECT_EQ(f32.dq, b16.dq);
    EXPECT_EQ(f32.q_sums, b16.q_sums);
    EXPECT_EQ(f32.key_sums, b16.key_sums);
  }
  // Only bf16 products on the streamed kernel take bf16 queries.
  AttentionDims d;
  d.batch = 1, d.heads = 1, d.nq = 4, d.nk = 8, d.dqk = d.dv = 4, d.kv_chunk = 4, d.q_bf16 = true;
  std::vector<float> q(16), k(32), o(16), lse(size_t(d.saved_elems()));
  EXPECT_THROW(attention_forward<float>(d, q.data(), k.data(), k.data(), o.data(), lse.data()), Error);
  d.kv_chunk = 0;
  lse.resize(size_t(d.saved_elems()));
  EXPECT_THROW(attention_forward_bf16(d, q.data(), k.data(), k.data(), o.data(), lse.data()), Error);
}

// Float32 K and V are rounded once per call (packed per pair) up to 64 MB of bf16, and a key chunk
// at a time beyond it; both give the bits of K and V stored in bf16. Over the limit: 2.1M keys of
// 8 + 8 channels (67 MB rounded), one head, the encoder's in-place gradients.
TEST(CpuBf16, StreamedAttentionBeyondTheRoundingLimitRoundsPerChunk) {
  REQUIRE_BF16();
  AttentionDims d;
  d.batch = 1, d.heads = 1, d.nq = 40, d.nk = 2100000, d.dqk = 8, d.dv = 8, d.scale = 0.35, d.kv_chunk = 65536;
  d.kv_grad_in_place = true;
  ASSERT_GT(d.nk * (d.dqk + d.dv) * 2, int64_t(64) << 20);
  const auto q = random_vec(d.nq * d.dqk, 21), dout = random_vec(d.nq * d.dv, 22);
  std::vector<float> k = random_vec(d.nk * d.dqk, 23), v = random_vec(d.nk * d.dv, 24);
  std::vector<uint16_t> k16(k.size()), v16(v.size());
  for (size_t i = 0; i < k.size(); ++i) k16[i] = to_bf16(k[i]);
  for (size_t i = 0; i < v.size(); ++i) v16[i] = to_bf16(v[i]);
  auto run = [&](const AttentionDims& dd, float* kk, float* vv, std::vector<float>& dq) {
    std::vector<float> o(size_t(d.nq * d.dv)), saved(size_t(dd.saved_elems()));
    attention_forward_bf16(dd, q.data(), kk, vv, o.data(), saved.data());
    attention_backward_bf16(dd, q.data(), kk, vv, o.data(), saved.data(), dout.data(), dq.data(), kk, vv);
    return o;
  };
  std::vector<float> dq32(q.size()), dq16(q.size());
  const std::vector<float> o32 = run(d, k.data(), v.data(), dq32);
  AttentionDims d16 = d;
  d16.kv_bf16 = true;
  const std::vector<float> o16 =
      run(d16, reinterpret_cast<float*>(k16.data()), reinterpret_cast<float*>(v16.data()), dq16);
  EXPECT_EQ(o32, o16);
  EXPECT_EQ(dq32, dq16);
  size_t wrong = 0;
  for (size_t i = 0; i < k.size(); ++i) wrong += (k16[i] != to_bf16(k[i])) + (v16[i] != to_bf16(v[i]));
  EXPECT_EQ(wrong, 0u) << "dK, dV values that differ, of " << 2 * k.size();
  double dq_norm = 0;
  for (float x : dq32) dq_norm += double(x) * x;
  EXPECT_GT(dq_norm, 0.0);
}

// A chunked cross-attention block (the encoder's form) with bf16 products, keeping K and V as
// float32 or as bf16 (AttentionBlockConfig::kv_bf16), with attention dropout.
struct BlockRun {
  std::vector<float> y, dxq, dxkv;
  ParamStore<float> store;
  int64_t saved_elems = 0;
};
BlockRun run_chunked_block(Backend& backend, bool kv_bf16) {
  AttentionBlockConfig cfg;
  cfg.q_dim = 64, cfg.kv_dim = 48, cfg.heads = 2, cfg.kv_chunk = 256, cfg.kv_row_chunk = 1000;
  cfg.kv_bf16 = kv_bf16, cfg.attention_dropout = 0.1;
  const int64_t batch = 2, nq = 70, nk = 3000;
  ParamRegistry reg;
  reg.add(attention_block_param_specs(cfg));
  BlockRun r{{}, {}, {}, ParamStore<float>(reg)};
  r.store.initialize(3, InitScheme::kDeepMind);
  ArenaPlan plan;
  plan.add(attention_block_saved_specs(cfg, batch, nq, nk));
  PlannedArena<float> acts(plan);
  for (const auto& spec : attention_block_saved_specs(cfg, batch, nq, nk)) r.saved_elems += spec.shape.numel();
  Context<float> ctx(backend);
  ctx.mode = {true, 21, 6, 0};
  const auto xq = random_vec(batch * nq * 64, 10), xkv = random_vec(batch * nk * 48, 11);
  const auto dy = random_vec(batch * nq * 64, 12);
  r.y.assign(xq.size(), 0), r.dxq.assign(xq.size(), 0), r.dxkv.assign(xkv.size(), 0);
  auto saved = AttentionBlockSaved<float>::bind(cfg, {acts, ""});
  const auto params = AttentionBlockParams<float>::bind(cfg, {r.store, ""});
  attention_block_forward(cfg, params, ConstView<float>{xq.data(), Shape{batch, nq, 64}},
                          ConstView<float>{xkv.data(), Shape{batch, nk, 48}}, saved,
                          TensorView<float>{r.y.data(), Shape{batch, nq, 64}}, ctx);
  attention_block_backward(cfg, params, saved, ConstView<float>{dy.data(), Shape{batch, nq, 64}},
                           AttentionBlockGrads<float>::bind(cfg, {r.store, ""}),
                           TensorView<float>{r.dxq.data(), Shape{batch, nq, 64}},
                           TensorView<float>{r.dxkv.data(), Shape{batch, nk, 48}}, ctx);
  return r;
}

double norm(const std::vector<float>& x) {
  double s = 0;
  for (float e : x) s += double(e) * e;
  return std::sqrt(s);
}

// Keeping K and V as bf16 changes no product: the output, the input gradients and every
// parameter gradient are bitwise the same, except the K and V bias gradients, which now sum the
// bf16-rounded dK and dV (as under PyTorch's autocast). The V one stays within bf16 rounding of
// the float32 one; the K one is zero in exact arithmetic (softmax ignores a shift shared by all
// keys), so both are rounding noise, far below the V one. K and V take half the memory.
TEST(CpuBf16, ChunkedBlockKeepsKeysAndValuesInBf16WithTheSameResults) {
  REQUIRE_BF16();
  BackendOptions o;
  o.precision = Precision::kBf16;
  const auto backend = make_backend("cpu", o);
  ASSERT_TRUE(backend->kernels<float>().stores_bf16());
  BlockRun f32 = run_chunked_block(*backend, false), b16 = run_chunked_block(*backend, true);
  EXPECT_EQ(f32.saved_elems - b16.saved_elems, 2 * 3000 * (48 + 48) / 2);
  EXPECT_EQ(f32.y, b16.y);
  EXPECT_EQ(f32.dxq, b16.dxq);
  EXPECT_EQ(f32.dxkv, b16.dxkv);
  auto grad = [](BlockRun& r, const std::string& name) {
    const TensorView<float> g = r.store.grad(name);
    return std::vector<float>(g.data, g.data + g.numel());
  };
  const std::string k_bias = "attention.self.key.bias", v_bias = "attention.self.value.bias";
  for (const auto& e : f32.store.registry().entries()) {
    if (e.spec.name == k_bias || e.spec.name == v_bias) continue;
    EXPECT_EQ(grad(f32, e.spec.name), grad(b16, e.spec.name)) << e.spec.name;
  }
  const std::vector<float> v32 = grad(f32, v_bias), v16 = grad(b16, v_bias);
  std::vector<float> v_diff(v32.size());
  for (size_t i = 0; i < v32.size(); ++i) v_diff[i] = v16[i] - v32[i];
  EXPECT_GT(norm(v32), 1.0);
  EXPECT_LT(norm(v_diff), 4e-3 * norm(v32));
  EXPECT_LT(norm(grad(f32, k_bias)), 1e-3 * norm(v32));
  EXPECT_LT(norm(grad(b16, k_bias)), 1e-3 * norm(v32));
  // Without bf16 storage (float32 products), the block refuses the setting.
  const auto fp32 = make_backend("cpu", {});
  EXPECT_THROW(run_chunked_block(*fp32, true), Error);
}

// The bf16 dot product's rate against the FMAs (cpu_bf16_rate.h): measured where the CPU has
// AVX512-BF16 (a plausible multiple: 0.49-0.51 on a Sapphire Rapids in a release build; a
// sanitizer build at -O1 read 0.13), 0 elsewhere; the description of the products warns exactly
// where they run on that instruction (oneDNN's avx512_core_bf16 kernels) and it is not fast enough.
TEST(CpuBf16, TheDotProductRateIsMeasuredAndNamedWhereItMatters) {
  const CpuFeatures& f = host_cpu_features();
  const double rate = bf16_dot_rate();
  if (f.avx512f && f.avx512_bf16) {
    EXPECT_GT(rate, 0.05);
    EXPECT_LT(rate, 8.0);
  } else {
    EXPECT_EQ(rate, 0.0);
  }
  EXPECT_EQ(bf16_dot_rate(), rate) << "measured once per process";
  const bool on_dot_product = !amx_products() && !emulated_bf16_products() && bf16_products_isa() == "avx512_core_bf16";
  const std::string kernel = bf16_products_kernel();
  EXPECT_EQ(kernel.find("dot product runs at") != std::string::npos, on_dot_product && rate < kMinUsefulDotRate)
      << kernel << " (rate " << rate << ")";
}

// The FMA peak (bench_fma_peak, and bf16_dot_rate's denominator) is the library's chains on
// registers: with too few of them the FMAs' latency, not their ports, bounds the loop, and every
// "% of the FMA peak" reads high. 8 chains did: 0.90x of 16 on a Sapphire Rapids core. Twice as
// many chains must not be faster; the best of interleaved rounds, so a busy machine slows both.
TEST(CpuBf16, TheFmaChainsReachThePeak) {
#if defined(__x86_64__)
  if (!host_cpu_features().avx512f) GTEST_SKIP() << "no AVX-512";
  constexpr int64_t kIterations = int64_t(1) << 21;  // ~5 ms a round on a 3 GHz core
  double ours = 0, twice = 0;
  for (int round = 0; round < 8; ++round) {
    for (const bool more : {false, true}) {
      const auto t0 = std::chrono::steady_clock::now();
      volatile float sink = more ? avx512_fma_chains_doubled(kIterations / 2) : avx512_fma_chains(kIterations);
      (void)sink;
      const double rate = 1 / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      (more ? twice : ours) = std::max(more ? twice : ours, rate);
    }
  }
  EXPECT_GE(ours, 0.95 * twice) << kFmaChains << " chains ran at " << ours / twice << "x the rate of "
                                << 2 * kFmaChains;
#else
  GTEST_SKIP() << "x86-64 only";
#endif
}

TEST(CpuBf16, TheBackendUsesBf16ProductsOnlyWhenAsked) {
  REQUIRE_BF16();
  BackendOptions o;
  o.precision = Precision::kBf16;
  const auto bf16 = make_backend("cpu", o);
  const auto fp32 = make_backend("cpu", {});
  EXPECT_EQ(bf16->precision(), Precision::kBf16);
  EXPECT_NE(bf16->describe().find("bf16 products by " + bf16_products_kernel()), std::string::npos)
      << bf16->describe();
  EXPECT_EQ(fp32->describe().find("bf16 products"), std::string::npos) << fp32->describe();
  // bf16 recomputes the attention scores (cheaper than keeping them there), float32 keeps them.
  EXPECT_FALSE(bf16->keeps_attention_scores());
  EXPECT_TRUE(fp32->keeps_attention_scores());
  EXPECT_NE(bf16->kernels_f32().gemm, fp32->kernels_f32().gemm);
  EXPECT_EQ(bf16->kernels_f32().layer_norm_forward, fp32->kernels_f32().layer_norm_forward);
  // One product through each table: bf16 rounds 1 + 2^-9 to 1, float32 keeps it.
  const float a[1] = {1.0f + std::ldexp(1.0f, -9)}, b[1] = {1.0f};
  float c16[1] = {0}, c32[1] = {0};
  bf16->kernels_f32().gemm(nullptr, Transpose::kNo, Transpose::kNo, 1, 1, 1, 1.0f, a, 1, b, 1, 0.0f, c16, 1);
  fp32->kernels_f32().gemm(nullptr, Transpose::kNo, Transpose::kNo, 1, 1, 1, 1.0f, a, 1, b, 1, 0.0f, c32, 1);
  EXPECT_EQ(c16[0], 1.0f);
  EXPECT_EQ(c32[0], a[0]);
  o.precision = Precision::kBf16;
  EXPECT_THROW(make_backend("guarded", o), Error);
}

// Where oneDNN may not use AVX512-BF16 or AMX (and our AMX kernel is ruled out), bf16 is refused
// before any work, saying why.
TEST(CpuBf16DeathTest, RefusedWhereTheCpuCannot) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // a fresh process: oneDNN reads the cap once
  EXPECT_EXIT(
      {
        setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE", 1);
        setenv("PERCEIVER_CPU_BF16_GEMM", "onednn", 1);
        BackendOptions o;
        o.precision = Precision::kBf16;
        try {
          make_backend("cpu", o);
        } catch (const Error& e) {
          std::fprintf(stderr, "%s\n", e.what());
          std::exit(3);
        }
        std::exit(0);
      },
      ::testing::ExitedWithCode(3), "precision bf16 is not available: .*(AVX512-BF16 nor AMX|no oneDNN).*--precision fp32");
}

}  // namespace
}  // namespace perceiver::cpu
