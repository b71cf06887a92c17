// The per-level vector kernels (backend/cpu/cpu_isa.h): every level this CPU runs agrees with the
// baseline build within tight tolerances, each level is bitwise identical at 1 and 2 threads,
// and the level in use follows PERCEIVER_CPU_ISA. CTest runs the backend, grad and parity suites
// once more per level below the best (tests/CMakeLists.txt), so those hold at every level too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cpu/cpu_bf16_round.h"
#include "backend/cpu/cpu_isa.h"
#include "core/cpu_features.h"
#include "core/rng.h"
#include "perceiver/threads.h"

namespace perceiver::cpu {
namespace {

template <class T>
std::vector<T> random_vec(int64_t n, uint64_t seed, double std = 1.0) {
  RngStream rng(seed, RngPurpose::kTest);
  std::vector<T> v(n);
  for (auto& x : v) x = T(std * rng.normal());
  return v;
}

// One op's outputs, and how far another level may be from the baseline's, relative to the
// largest baseline magnitude of the op.
struct OpResult {
  std::string name;
  std::vector<double> values;
  double tolerance;
};

template <class T>
void record(std::vector<OpResult>& out, const std::string& name, const std::vector<T>& v, double tolerance) {
  out.push_back({name, std::vector<double>(v.begin(), v.end()), tolerance});
}

// One row of attention_backward_key_sums: n scaled scores, dP, key weights and key terms, runs of
// keys in groups 0 and 1 of 2 with a gap of ungrouped keys between, and room for the outputs.
template <class T>
struct KeySumsCase {
  explicit KeySumsCase(int64_t count)
      : n(count), s(random_vec<T>(count, 31, 2.0)), ds(random_vec<T>(count, 32)), w(random_vec<T>(count, 33)),
        ks(random_vec<T>(count, 34)), p(count), ds16(count), sums{T(0.5), T(-0.25), T(1), T(2)} {
    const int64_t a = count / 3, b = count / 2;  // [0, a) group 1, [a, b) no group, [b, n) group 0
    runs = {0, a, 1, b, count, 0};
    // The gap's keys enter no sum: NaN weights there must not reach them.
    std::fill(w.begin() + a, w.begin() + b, std::numeric_limits<T>::quiet_NaN());
  }
  KeySumsRow<T> row() {
    return {n, s.data(), T(1.5), T(0.3), T(0.125), T(8), ds.data(), ds16.data(), p.data(), ks.data(), w.data(),
            runs.data(), 2, sums.data(), 2};
  }
  int64_t n;
  std::vector<T> s, ds, w, ks, p;
  std::vector<uint16_t> ds16;
  std::vector<T> sums;
  std::vector<int64_t> runs;
};

// Every kernel of the table on fixed inputs, with sizes that take the parallel paths, the
// vector tails (odd widths) and the multi-block reductions. `rel` scales the tolerances: the
// float tables differ in exp/erf/tanh and reduction order, the double ones in reduction order.
template <class T>
std::vector<OpResult> run_all(const VectorKernels<T>& k, double rel) {
  std::vector<OpResult> out;
  const int64_t n = 100003;
  const auto a = random_vec<T>(n, 1), b = random_vec<T>(n, 2);
  std::vector<T> y(n);
  k.add(n, a.data(), b.data(), y.data());
  record(out, "add", y, 0.0);
  k.axpy(n, T(0.37), a.data(), y.data());
  record(out, "axpy", y, rel);  // one rounding less where v3/v4 contract it into an FMA
  y = a;
  k.scale(n, T(-1.7), y.data());
  record(out, "scale", y, 0.0);
  k.fill(n, T(0.25), y.data());
  record(out, "fill", y, 0.0);
  record(out, "sum", std::vector<double>{k.sum(n, a.data()), k.sum_squares(n, a.data())}, rel);

  for (int64_t cols : {77, 704}) {
    const int64_t rows = 301, m = rows * cols;
    const std::string shape = std::to_string(rows) + "x" + std::to_string(cols);
    const auto x = random_vec<T>(m, 3, 2.0), dy = random_vec<T>(m, 4), gamma = random_vec<T>(cols, 5);
    const auto beta = random_vec<T>(cols, 6);
    std::vector<T> ly(m), mean(rows), rstd(rows), dx = random_vec<T>(m, 7), dgamma(cols, T(1)), dbeta(cols, T(-1));
    k.layer_norm_forward(rows, cols, x.data(), gamma.data(), beta.data(), 1e-5, ly.data(), mean.data(), rstd.data());
    record(out, "layer_norm_forward y " + shape, ly, rel);
    record(out, "layer_norm_forward rstd " + shape, rstd, rel);
    k.layer_norm_backward(rows, cols, x.data(), gamma.data(), mean.data(), rstd.data(), dy.data(), dx.data(),
                          dgamma.data(), dbeta.data());
    record(out, "layer_norm_backward dx " + shape, dx, rel);
    record(out, "layer_norm_backward dgamma " + shape, dgamma, rel);
    record(out, "layer_norm_backward dbeta " + shape, dbeta, rel);
    std::vector<T> biased = x, dbias(cols, T(0.5));
    k.bias_forward(rows, cols, beta.data(), biased.data());
    record(out, "bias_forward " + shape, biased, 0.0);
    k.bias_backward(rows, cols, dy.data(), dbias.data());
    record(out, "bias_backward " + shape, dbias, 1e-6 * rel);
  }

  for (int64_t cols : {33, 5003}) {
    const int64_t rows = 41, m = rows * cols;
    const std::string shape = std::to_string(rows) + "x" + std::to_string(cols);
    const auto x = random_vec<T>(m, 8, 4.0), dy = random_vec<T>(m, 9);
    std::vector<T> p(m), dx = random_vec<T>(m, 10);
    k.softmax_forward(rows, cols, x.data(), p.data());
    record(out, "softmax_forward " + shape, p, rel);
    k.softmax_backward(rows, cols, p.data(), dy.data(), dx.data());
    record(out, "softmax_backward " + shape, dx, rel);
  }

  const int64_t g = 40009;
  const auto gx = random_vec<T>(g, 11, 3.0), gdy = random_vec<T>(g, 12);
  for (GeluKind kind : {GeluKind::kErf, GeluKind::kTanh}) {
    const std::string flavour = kind == GeluKind::kErf ? " erf" : " tanh";
    std::vector<T> gy(g), gdx = random_vec<T>(g, 13);
    k.gelu_forward(kind, g, gx.data(), gy.data());
    record(out, "gelu_forward" + flavour, gy, rel);
    k.gelu_backward(kind, g, gx.data(), gdy.data(), gdx.data());
    record(out, "gelu_backward" + flavour, gdx, rel);
  }

  std::vector<T> e = random_vec<T>(1001, 14, 3.0);
  const T total = k.exp_shifted(int64_t(e.size()), T(2.5), e.data());
  record(out, "exp_shifted", e, rel);
  record(out, "exp_shifted sum", std::vector<T>{total}, rel);

  std::vector<T> ex = random_vec<T>(1001, 16, 3.0), ey(ex.size());
  std::vector<uint16_t> ey16(ex.size());
  const T etotal = k.exp_shifted_bf16(int64_t(ex.size()), ex.data(), T(2.5), ey.data(), ey16.data());
  record(out, "exp_shifted_bf16", ey, rel);
  record(out, "exp_shifted_bf16 sum", std::vector<T>{etotal, k.max(int64_t(ex.size()), ex.data())}, rel);
  std::vector<T> ds = random_vec<T>(1001, 17);
  std::vector<uint16_t> ds16(ds.size());
  k.score_grad(int64_t(ds.size()), ex.data(), T(0.3), T(0.125), ds.data(), ds16.data());
  record(out, "score_grad", ds, 0.0);

  // key_sums_row on a row of 1001 keys in three runs of two groups, with keys outside any group.
  {
    const KeySumsCase<T> c(1001);
    KeySumsCase<T> got = c;
    k.key_sums_row(got.row());
    record(out, "key_sums_row ds", got.ds, rel);
    record(out, "key_sums_row key terms", got.ks, rel);
    record(out, "key_sums_row group sums", got.sums, 4 * rel);
  }

  // bf16 rounding is integer arithmetic: exact at every level, specials included.
  std::vector<float> f = random_vec<float>(1003, 15, 5.0);
  f[0] = INFINITY, f[1] = -INFINITY, f[2] = NAN, f[3] = 3.4e38f, f[4] = -0.0f, f[5] = 1e-40f;
  // NaN payloads (quiet, one whose rounding would carry, signaling), denormals of both signs at
  // the ends of their range (VCVTNEPS2BF16, which v4 uses where the CPU has it, flushes them), and
  // the smallest normal; in a vector's middle lanes as well as its first.
  const uint32_t bits[] = {0x7fc0ffffu, 0xffc12345u, 0x7f800001u, 0x7fbfffffu, 0x00000001u,
                           0x807fffffu, 0x007fffffu, 0x00800000u, 0x80400000u, 0x00008000u};
  for (size_t i = 0; i < std::size(bits); ++i) std::memcpy(&f[37 + i], &bits[i], sizeof(float));
  std::vector<uint16_t> h(f.size());
  k.to_bf16(int64_t(f.size()), f.data(), h.data());
  record(out, "to_bf16", std::vector<T>(h.begin(), h.end()), 0.0);
  return out;
}

template <class T>
void expect_matches_baseline(double rel) {
  const std::vector<Isa> levels = supported_isas();
  if (levels.size() == 1) GTEST_SKIP() << "this CPU runs the baseline kernels only";
  const std::vector<OpResult> want = run_all(vector_kernels<T>(Isa::kBaseline), rel);
  for (Isa isa : levels) {
    if (isa == Isa::kBaseline) continue;
    const std::vector<OpResult> got = run_all(vector_kernels<T>(isa), rel);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      double worst = 0, scale = 0;
      for (size_t j = 0; j < got[i].values.size(); ++j) {
        worst = std::max(worst, std::abs(got[i].values[j] - want[i].values[j]));
        scale = std::max(scale, std::abs(want[i].values[j]));
      }
      EXPECT_LE(worst, want[i].tolerance * scale)
          << isa_name(isa) << " " << want[i].name << ": max abs diff " << worst << " at magnitude " << scale;
    }
  }
}

// A few float ulps: Eigen's exp/erf/tanh use FMA at v3/v4, and wider vectors add in other orders.
TEST(IsaLevels, FloatKernelsMatchTheBaseline) { expect_matches_baseline<float>(2e-6); }

TEST(IsaLevels, DoubleKernelsMatchTheBaseline) { expect_matches_baseline<double>(1e-13); }

// The attention's fused kernels at each level: exp_shifted_bf16 is exp_shifted_to and then
// to_bf16 of its output, score_grad's bf16 copy is to_bf16 of its float output, bit for bit; max is
// the largest element.
TEST(IsaLevels, FusedAttentionKernelsAreTheirPartsBitwise) {
  for (Isa isa : supported_isas()) {
    const VectorKernels<float>& k = vector_kernels<float>(isa);
    for (int64_t n : {1, 63, 64, 512, 1001}) {
      const auto x = random_vec<float>(n, 18, 4.0), g = random_vec<float>(n, 19);
      std::vector<float> want(n), got(n), ds = g, ds_plain = g;
      std::vector<uint16_t> want16(n), got16(n), ds16(n), ds_plain16(n);
      const float want_sum = k.exp_shifted_to(n, x.data(), 1.25f, want.data());
      k.to_bf16(n, want.data(), want16.data());
      const float got_sum = k.exp_shifted_bf16(n, x.data(), 1.25f, got.data(), got16.data());
      EXPECT_EQ(0, std::memcmp(&want_sum, &got_sum, sizeof(float))) << isa_name(isa) << " n=" << n;
      EXPECT_EQ(want, got) << isa_name(isa) << " n=" << n;
      EXPECT_EQ(want16, got16) << isa_name(isa) << " n=" << n;
      EXPECT_EQ(k.max(n, x.data()), *std::max_element(x.begin(), x.end())) << isa_name(isa) << " n=" << n;
      k.score_grad(n, got.data(), 0.3f, 0.125f, ds.data(), ds16.data());
      k.score_grad(n, got.data(), 0.3f, 0.125f, ds_plain.data(), nullptr);
      k.to_bf16(n, ds_plain.data(), ds_plain16.data());
      EXPECT_EQ(ds, ds_plain) << isa_name(isa) << " n=" << n;
      EXPECT_EQ(ds16, ds_plain16) << isa_name(isa) << " n=" << n;
      for (int64_t i = 0; i < n; ++i) {  // the score gradient's formula, in the same order
        ASSERT_EQ(ds_plain[i], got[i] * (g[i] - 0.3f) * 0.125f) << isa_name(isa) << " n=" << n << " i=" << i;
      }
    }
  }
}

// key_sums_row at each level is the passes it replaces: exp_shifted_to, score_grad (whose bf16
// copy it rounds bit for bit), key_dot_terms and a dot per run and sum, within a few float ulps
// (its fused form multiplies and adds in its own order), for rows with and without vector tails.
TEST(IsaLevels, KeySumsRowIsThePassesItReplaces) {
  for (Isa isa : supported_isas()) {
    const VectorKernels<float>& k = vector_kernels<float>(isa);
    for (int64_t n : {5, 64, 520, 2048}) {
      const KeySumsCase<float> c(n);
      KeySumsCase<float> got = c, want = c;
      k.key_sums_row(got.row());
      const KeySumsRow<float> r = want.row();
      k.exp_shifted_to(n, r.s, r.lse, r.p);
      k.score_grad(n, r.p, r.delta, r.scale, r.ds, nullptr);
      k.key_dot_terms(n, r.p, r.ds, r.s, r.delta, r.inv_scale, r.ks);
      for (int64_t u = 0; u < r.run_count; ++u) {
        const int64_t j0 = r.runs[3 * u], len = r.runs[3 * u + 1] - j0, g = r.runs[3 * u + 2];
        r.sums[g] += float(k.dot(len, r.w + j0, r.ds + j0));
        r.sums[r.groups + g] += float(k.dot(len, r.w + j0, r.p + j0));
      }
      std::vector<uint16_t> rounded(n);
      k.to_bf16(n, got.ds.data(), rounded.data());
      EXPECT_EQ(got.ds16, rounded) << isa_name(isa) << " n=" << n;
      const auto near = [&](const std::vector<float>& a, const std::vector<float>& b, double ulps, const char* what) {
        double scale = 0;
        for (const float v : b) scale = std::max(scale, double(std::abs(v)));
        for (size_t i = 0; i < a.size(); ++i)
          ASSERT_NEAR(a[i], b[i], ulps * 6e-8 * scale) << isa_name(isa) << " n=" << n << " " << what << " i=" << i;
      };
      near(got.ds, want.ds, 2, "dS");
      near(got.ks, want.ks, 4, "key terms");
      near(got.sums, want.sums, 8, "group sums");
      for (const float v : got.sums) EXPECT_TRUE(std::isfinite(v)) << isa_name(isa) << " n=" << n;  // the gap's NaNs
      EXPECT_NE(got.sums[0], c.sums[0]) << isa_name(isa) << " n=" << n;  // the runs did add to the sums
    }
  }
}

// The same with the values that rounding to bf16 treats apart: NaN (kept quiet), ±inf, overflow to
// inf, underflow to 0 and denormals, and ties to even.
TEST(IsaLevels, FusedExpRoundsSpecialValuesAsToBf16) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> x = random_vec<float>(300, 21, 4.0);
  const uint32_t payload_bits = 0x7fc0ffffu;  // a NaN whose rounding would carry into its payload
  float payload_nan;
  std::memcpy(&payload_nan, &payload_bits, sizeof payload_nan);
  const std::vector<float> specials = {nan,    inf,    -inf, 100.0f, -95.0f, -88.0f, 0.0f, std::log(1.0f + 1.0f / 256),
                                       payload_nan};
  for (size_t i = 0; i < specials.size(); ++i) x[17 * i + 3] = specials[i];
  const int64_t n = int64_t(x.size());
  for (Isa isa : supported_isas()) {
    const VectorKernels<float>& k = vector_kernels<float>(isa);
    std::vector<float> want(n), got(n);
    std::vector<uint16_t> want16(n), got16(n);
    k.exp_shifted_to(n, x.data(), 0.0f, want.data());
    k.to_bf16(n, want.data(), want16.data());
    EXPECT_TRUE(std::isnan(k.exp_shifted_bf16(n, x.data(), 0.0f, got.data(), got16.data()))) << isa_name(isa);
    EXPECT_EQ(0, std::memcmp(want.data(), got.data(), size_t(n) * sizeof(float))) << isa_name(isa);
    EXPECT_EQ(want16, got16) << isa_name(isa);
    EXPECT_EQ(got16[3] & 0x7fc0, 0x7fc0) << isa_name(isa) << ": NaN rounds to a quiet NaN";
    EXPECT_EQ(got16[17 + 3], 0x7f80) << isa_name(isa) << ": +inf";
  }
}

// The score gradients that score_grad and key_sums_row round as they make them keep their
// denormals, as to_bf16 does: where the CPU has AVX512-BF16, v4 rounds them with VCVTNEPS2BF16,
// which flushes denormals, and redoes the lanes that hold one. Probabilities near e^-86 times
// dP - delta ~ 0.1 give dS around 1e-38, normals and denormals in the same vectors.
TEST(IsaLevels, RoundedScoreGradientsKeepTheirDenormals) {
  const auto tiny = [](std::vector<float> v, int64_t every) {
    for (size_t i = 0; i < v.size(); i += size_t(every)) v[i] = -85.5f + 0.25f * float(i % 7);
    return v;
  };
  for (Isa isa : supported_isas()) {
    const VectorKernels<float>& k = vector_kernels<float>(isa);
    for (int64_t n : {13, 64, 1001}) {
      std::vector<float> p = tiny(random_vec<float>(n, 41, 2.0), 3);
      for (float& v : p) v = std::exp(v - 1.5f);
      std::vector<float> ds = random_vec<float>(n, 42);
      std::vector<uint16_t> ds16(n);
      k.score_grad(n, p.data(), 0.3f, 0.125f, ds.data(), ds16.data());
      KeySumsCase<float> c(n);
      c.s = tiny(c.s, 5);
      k.key_sums_row(c.row());
      for (const auto& [what, v, v16] : {std::tuple{"score_grad", &ds, &ds16}, std::tuple{"key_sums_row", &c.ds, &c.ds16}}) {
        int64_t denormals = 0;
        for (int64_t i = 0; i < n; ++i) {
          denormals += std::fpclassify((*v)[i]) == FP_SUBNORMAL;
          ASSERT_EQ((*v16)[i], to_bf16((*v)[i])) << isa_name(isa) << " " << what << " n=" << n << " i=" << i;
        }
        EXPECT_GT(denormals, 0) << isa_name(isa) << " " << what << " n=" << n << ": the case makes no denormal";
      }
    }
  }
}

// The softmax's exp at each level (the AVX-512 and AVX2 ones are our own, the baseline's Eigen's):
// within 3e-7 of e^x over float's normal range, and its edges: e^0 = 1, below float's normal range
// for −inf and far below (Eigen's clamp gives 2.9e-39 there, ours 0), +inf above 88.73, NaN for NaN.
TEST(IsaLevels, ExpIsAccurateAndKeepsItsEdges) {
  std::vector<float> x;
  for (float v = -87.0f; v <= 88.5f; v += 0.0137f) x.push_back(v);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> edges = {0.0f, -inf, -200.0f, 89.0f, 1000.0f, inf, nan};
  for (Isa isa : supported_isas()) {
    const VectorKernels<float>& k = vector_kernels<float>(isa);
    std::vector<float> y(x.size());
    k.exp_shifted_to(int64_t(x.size()), x.data(), 0.0f, y.data());
    double worst = 0.0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double want = std::exp(double(x[i]));
      worst = std::max(worst, std::abs(double(y[i]) - want) / want);
    }
    EXPECT_LT(worst, 3e-7) << isa_name(isa);
    std::vector<float> e(edges.size());
    k.exp_shifted_to(int64_t(edges.size()), edges.data(), 0.0f, e.data());
    EXPECT_EQ(e[0], 1.0f) << isa_name(isa);
    for (int i : {1, 2}) EXPECT_TRUE(e[i] >= 0.0f && e[i] < std::numeric_limits<float>::min()) << isa_name(isa) << " " << e[i];
    EXPECT_EQ(e[3], inf) << isa_name(isa);
    EXPECT_EQ(e[4], inf) << isa_name(isa);
    EXPECT_EQ(e[5], inf) << isa_name(isa);
    EXPECT_TRUE(std::isnan(e[6])) << isa_name(isa);
  }
}

// Our exp (v3, v4) gives 0 below float's normal range, never a denormal: making one costs a
// microcode assist on Intel cores (a 17x slower exp where scores spread past 87), and the
// bf16 products read denormals as 0 anyway. Just above ln(FLT_MIN) the results stay normal and
// accurate; the fused bf16 form rounds those zeros to bf16 zeros.
TEST(IsaLevels, ExpGivesZeroBelowTheNormalRangeNotDenormals) {
  std::vector<float> x;
  for (float v = -120.0f; v < -80.0f; v += 0.0071f) x.push_back(v);
  x.push_back(-std::numeric_limits<float>::infinity());
  const int64_t n = int64_t(x.size());
  for (Isa isa : supported_isas()) {
    if (isa == Isa::kBaseline) continue;  // Eigen's exp
    const VectorKernels<float>& k = vector_kernels<float>(isa);
    std::vector<float> y(n), y2(n);
    std::vector<uint16_t> y16(n);
    k.exp_shifted_to(n, x.data(), 0.0f, y.data());
    k.exp_shifted_bf16(n, x.data(), 0.0f, y2.data(), y16.data());
    int64_t zeros = 0;
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_TRUE(y[i] == 0.0f || y[i] >= std::numeric_limits<float>::min()) << isa_name(isa) << " e^" << x[i] << " = " << y[i];
      if (x[i] < -87.34f) {
        ASSERT_EQ(y[i], 0.0f) << isa_name(isa) << " x=" << x[i];
      } else if (x[i] >= -87.33f) {
        ASSERT_NEAR(y[i] / std::exp(double(x[i])), 1.0, 3e-7) << isa_name(isa) << " x=" << x[i];
      }
      ASSERT_EQ(y2[i], y[i]) << isa_name(isa);
      ASSERT_EQ(y16[i], to_bf16(y[i])) << isa_name(isa);
      zeros += y[i] == 0.0f;
    }
    EXPECT_GT(zeros, n / 2) << isa_name(isa);
  }
}

// The softmax of peaked rows (scores of scale 200) at every level: no denormal probabilities
// (they are 0 there, for the same reason), rows still summing to 1, and the same values as
// double precision wherever those are normal floats.
TEST(IsaLevels, SoftmaxOfPeakedRowsHasNoDenormals) {
  const int64_t rows = 5, cols = 1037;
  std::vector<float> x = random_vec<float>(rows * cols, 31, 200.0);
  for (Isa isa : supported_isas()) {
    std::vector<float> y(x.size());
    vector_kernels<float>(isa).softmax_forward(rows, cols, x.data(), y.data());
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x.data() + r * cols;
      const double m = *std::max_element(xr, xr + cols);
      double total = 0.0, sum = 0.0;
      for (int64_t c = 0; c < cols; ++c) total += std::exp(double(xr[c]) - m);
      for (int64_t c = 0; c < cols; ++c) {
        const float p = y[r * cols + c];
        const double want = std::exp(double(xr[c]) - m) / total;
        ASSERT_TRUE(p == 0.0f || p >= std::numeric_limits<float>::min()) << isa_name(isa) << " " << p;
        if (want >= 1e-37) {
          ASSERT_NEAR(p / want, 1.0, 1e-5) << isa_name(isa) << " row " << r << " col " << c;
        }
        sum += p;
      }
      EXPECT_NEAR(sum, 1.0, 1e-5) << isa_name(isa) << " row " << r;
    }
  }
}

TEST(IsaLevels, EachLevelIsBitwiseIdenticalAtOneAndTwoThreads) {
  const int before = threads::num_threads();
  for (Isa isa : supported_isas()) {
    threads::set_num_threads(1);
    const std::vector<OpResult> one = run_all(vector_kernels<float>(isa), 0.0);
    threads::set_num_threads(2);
    const std::vector<OpResult> two = run_all(vector_kernels<float>(isa), 0.0);
    for (size_t i = 0; i < one.size(); ++i)
      EXPECT_EQ(0, std::memcmp(one[i].values.data(), two[i].values.data(), one[i].values.size() * sizeof(double)))
          << isa_name(isa) << " " << one[i].name << " differs between 1 and 2 threads";
  }
  threads::set_num_threads(before);
}

// Eigen takes other code paths for buffers at other alignments; the kernels must not (per-thread
// scratch lands anywhere). Inputs copied to 0..3 floats past a 64-byte boundary give bitwise
// the same outputs.
TEST(IsaLevels, ResultsDoNotDependOnBufferAlignment) {
  const int64_t rows = 7, cols = 1029, n = rows * cols;
  const auto x = random_vec<float>(n, 15, 3.0), dy = random_vec<float>(n, 16), gamma = random_vec<float>(cols, 17);
  for (Isa isa : supported_isas()) {
    const VectorKernels<float>& k = vector_kernels<float>(isa);
    std::vector<std::vector<float>> first;
    for (int64_t shift = 0; shift < 4; ++shift) {
      std::vector<float> storage(7 * n + 64);
      float* base = storage.data() + (16 - reinterpret_cast<uintptr_t>(storage.data()) / sizeof(float) % 16) + shift;
      float *in = base, *grad = base + n, *p = base + 2 * n, *dx = base + 3 * n, *g = base + 4 * n, *gd = base + 5 * n;
      float* ln = base + 6 * n;
      std::copy(x.begin(), x.end(), in);
      std::copy(dy.begin(), dy.end(), grad);
      std::fill(dx, dx + n, 0.f);
      std::fill(gd, gd + n, 0.f);
      std::vector<float> mean(rows), rstd(rows);
      k.softmax_forward(rows, cols, in, p);
      k.softmax_backward(rows, cols, p, grad, dx);
      k.gelu_forward(GeluKind::kErf, n, in, g);
      k.gelu_backward(GeluKind::kTanh, n, in, grad, gd);
      k.layer_norm_forward(rows, cols, in, gamma.data(), gamma.data(), 1e-5, ln, mean.data(), rstd.data());
      const float e = k.exp_shifted(n, 1.5f, in);
      std::vector<float> all(base + 2 * n, base + 7 * n);
      all.push_back(e);
      all.push_back(float(k.sum(n, grad)));
      if (shift == 0) first.push_back(all);
      EXPECT_EQ(0, std::memcmp(all.data(), first[0].data(), all.size() * sizeof(float)))
          << isa_name(isa) << ": results move with the buffers' alignment (shift " << shift << " floats)";
    }
  }
}

TEST(IsaLevels, SupportFollowsTheCpuFeatures) {
  const CpuFeatures& f = host_cpu_features();
  EXPECT_TRUE(isa_supported(Isa::kBaseline));
#if defined(__x86_64__)
  EXPECT_EQ(isa_supported(Isa::kV3), f.x86_64_v3);
  EXPECT_EQ(isa_supported(Isa::kV4), f.x86_64_v4);
  if (f.x86_64_v4) {
    EXPECT_TRUE(f.avx512_core() && f.avx2 && f.fma) << f.names();
  }
#else
  EXPECT_FALSE(isa_supported(Isa::kV3) || isa_supported(Isa::kV4));
#endif
  std::cout << "[ cpu ] " << f.names() << "; kernels " << isa_summary() << "\n";
}

// PERCEIVER_CPU_ISA picks the level when this CPU runs it; otherwise (unset, unknown or
// unsupported) the best supported level runs.
TEST(IsaLevels, ActiveLevelFollowsTheEnvironment) {
  const std::vector<Isa> levels = supported_isas();
  const char* env = std::getenv("PERCEIVER_CPU_ISA");
  Isa want = levels.back();
  bool forced = false;
  for (Isa isa : levels)
    if (env && std::string(env) == isa_name(isa)) want = isa, forced = true;
  EXPECT_STREQ(isa_name(active_isa()), isa_name(want));
  const std::string because = forced ? "forced by PERCEIVER_CPU_ISA=" + std::string(env) : "the best this CPU runs";
  EXPECT_NE(isa_summary().find(because), std::string::npos) << isa_summary();
}

}  // namespace
}  // namespace perceiver::cpu
