// The AMX bf16 product (cpu_amx_gemm.h) on its own: against a double reference at shapes with
// tails in every dimension, each transpose, alpha and beta; its bits depending on the values
// alone (storage, leading dimensions and splits of C do not change them; A read in place or
// packed); C unread when beta is 0.
// Skipped on CPUs without AMX (the bf16 suite, test_cpu_bf16, runs oneDNN's products there).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_amx_gemm.h"
#include "backend/cpu/cpu_bf16.h"
#include "perceiver/error.h"
#include "random_vec.h"

namespace perceiver::cpu {
namespace {

#define REQUIRE_AMX() \
  if (!amx_available()) GTEST_SKIP() << "this CPU or kernel offers no AMX tiles"

// A matrix op(X) [rows, cols] of bf16 values, stored as is or transposed, with `pad` values
// between stored rows.
struct Stored {
  std::vector<uint16_t> x;
  int64_t ld;
  Transpose t;
};
Stored store(const std::vector<uint16_t>& op, int64_t rows, int64_t cols, Transpose t, int64_t pad) {
  const int64_t srows = t == Transpose::kNo ? rows : cols, scols = t == Transpose::kNo ? cols : rows;
  Stored s{std::vector<uint16_t>(size_t(std::max<int64_t>(1, srows * (scols + pad))), 0x7fc0), scols + pad, t};  // NaN pad
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const size_t at = size_t(t == Transpose::kNo ? r * s.ld + c : c * s.ld + r);
      s.x[at] = op[size_t(r * cols + c)];
    }
  return s;
}

std::vector<uint16_t> random_bf16(int64_t count, uint64_t seed) {
  std::vector<uint16_t> out;
  for (float v : random_vec(std::max<int64_t>(1, count), seed)) out.push_back(to_bf16(v));
  return out;
}

void run(const Stored& a, const Stored& b, int64_t m, int64_t n, int64_t k, float alpha, float beta,
         std::vector<float>& c, int64_t ldc) {
  amx_gemm_bf16(a.t, b.t, m, n, k, alpha, a.x.data(), a.ld, b.x.data(), b.ld, beta, c.data(), ldc);
}

struct Shape {
  int64_t m, n, k;
  float alpha, beta;
};

TEST(AmxGemm, MatchesADoubleReference) {
  REQUIRE_AMX();
  const std::vector<Shape> shapes = {{1, 1, 1, 1, 0},       {16, 16, 32, 1, 0},      {17, 33, 31, 0.5f, 1},
                                     {33, 17, 65, -2, 0.5f}, {100, 47, 200, 1, 1},    {64, 64, 2048, 0.25f, 0},
                                     {196, 70, 96, 1, 0},    {40, 300, 64, 1, -1}};
  for (const Shape& s : shapes) {
    const auto opa = random_bf16(s.m * s.k, 1), opb = random_bf16(s.k * s.n, 2);
    const int64_t ldc = s.n + 3;
    const auto c0 = random_vec(s.m * ldc, 3);
    for (Transpose ta : {Transpose::kNo, Transpose::kYes})
      for (Transpose tb : {Transpose::kNo, Transpose::kYes}) {
        std::vector<float> c = c0;
        run(store(opa, s.m, s.k, ta, 5), store(opb, s.k, s.n, tb, 2), s.m, s.n, s.k, s.alpha, s.beta, c, ldc);
        double worst = 0;
        for (int64_t i = 0; i < s.m; ++i)
          for (int64_t j = 0; j < s.n; ++j) {
            double sum = 0, scale = 0;
            for (int64_t p = 0; p < s.k; ++p) {
              const double prod = double(from_bf16(opa[size_t(i * s.k + p)])) * from_bf16(opb[size_t(p * s.n + j)]);
              sum += prod, scale += std::fabs(prod);
            }
            const double c_in = c0[size_t(i * ldc + j)];
            const double want = s.alpha * sum + (s.beta == 0 ? 0.0 : s.beta * c_in);
            const double bound = (std::fabs(s.alpha) * scale + std::fabs(s.beta * c_in)) * 1e-6 * std::sqrt(s.k + 1.0);
            worst = std::max(worst, std::fabs(c[size_t(i * ldc + j)] - want) / (bound + 1e-30));
          }
        EXPECT_LE(worst, 1.0) << s.m << "x" << s.n << "x" << s.k << " ta=" << int(ta) << " tb=" << int(tb);
        for (int64_t i = 0; i < s.m; ++i)  // the padding between C's rows is not touched
          for (int64_t j = s.n; j < ldc; ++j) ASSERT_EQ(c[size_t(i * ldc + j)], c0[size_t(i * ldc + j)]);
      }
  }
}

bool same_bits(const std::vector<float>& x, const std::vector<float>& y) {
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

// The attention relies on this: operands rounded once and stored packed, strided or in one
// buffer for keys and values give the same products.
TEST(AmxGemm, BitsDependOnTheValuesAlone) {
  REQUIRE_AMX();
  const int64_t m = 50, n = 70;
  for (int64_t depth : {96, 100}) {  // A read in place where K contiguous, and always packed
    const auto opa = random_bf16(m * depth, 4), opb = random_bf16(depth * n, 5);
    std::vector<float> want(size_t(m * n));
    run(store(opa, m, depth, Transpose::kNo, 0), store(opb, depth, n, Transpose::kNo, 0), m, n, depth, 1, 0, want, n);
    for (Transpose ta : {Transpose::kNo, Transpose::kYes})
      for (Transpose tb : {Transpose::kNo, Transpose::kYes})
        for (int64_t pad : {0, 7}) {
          std::vector<float> got(size_t(m * n), -1);
          run(store(opa, m, depth, ta, pad), store(opb, depth, n, tb, pad + 1), m, n, depth, 1, 0, got, n);
          EXPECT_TRUE(same_bits(got, want)) << "k=" << depth << " ta=" << int(ta) << " tb=" << int(tb) << " pad=" << pad;
        }
  }
  const int64_t k = 100;
  const auto opa = random_bf16(m * k, 4), opb = random_bf16(k * n, 5);
  std::vector<float> want(size_t(m * n));
  run(store(opa, m, k, Transpose::kNo, 0), store(opb, k, n, Transpose::kNo, 0), m, n, k, 1, 0, want, n);
  // C in two calls, split by rows and by columns at places that are not tile boundaries.
  const Stored a = store(opa, m, k, Transpose::kNo, 0), b = store(opb, k, n, Transpose::kNo, 0);
  std::vector<float> rows(size_t(m * n)), cols(size_t(m * n));
  amx_gemm_bf16(Transpose::kNo, Transpose::kNo, 19, n, k, 1, a.x.data(), k, b.x.data(), n, 0, rows.data(), n);
  amx_gemm_bf16(Transpose::kNo, Transpose::kNo, m - 19, n, k, 1, a.x.data() + 19 * k, k, b.x.data(), n, 0,
                rows.data() + 19 * n, n);
  amx_gemm_bf16(Transpose::kNo, Transpose::kNo, m, 23, k, 1, a.x.data(), k, b.x.data(), n, 0, cols.data(), n);
  amx_gemm_bf16(Transpose::kNo, Transpose::kNo, m, n - 23, k, 1, a.x.data(), k, b.x.data() + 23, n, 0,
                cols.data() + 23, n);
  EXPECT_TRUE(same_bits(rows, want));
  EXPECT_TRUE(same_bits(cols, want));
  // C += op(A)·op(B) (its tiles start from C) likewise: whole, or in two calls split mid-tile.
  const auto c0 = random_vec(m * n, 8);
  std::vector<float> whole = c0, split = c0;
  amx_gemm_bf16(Transpose::kNo, Transpose::kNo, m, n, k, 1, a.x.data(), k, b.x.data(), n, 1, whole.data(), n);
  amx_gemm_bf16(Transpose::kNo, Transpose::kNo, 37, n, k, 1, a.x.data(), k, b.x.data(), n, 1, split.data(), n);
  amx_gemm_bf16(Transpose::kNo, Transpose::kNo, m - 37, n, k, 1, a.x.data() + 37 * k, k, b.x.data(), n, 1,
                split.data() + 37 * n, n);
  EXPECT_TRUE(same_bits(whole, split));
  EXPECT_FALSE(same_bits(whole, c0));
}

// The attention packs each pair's K and V once (amx_pack_b) and multiplies key chunks of them:
// parts along the columns (NT: keys are op(B)'s columns) and along the depth (NN: keys are K).
TEST(AmxGemm, PackedBAndItsPartsGiveTheBitsOfPackingPerProduct) {
  REQUIRE_AMX();
  const int64_t m = 45, n = 70, k = 200;
  const auto opa = random_bf16(m * k, 9), opb = random_bf16(k * n, 10);
  const Stored a = store(opa, m, k, Transpose::kNo, 0);
  for (Transpose tb : {Transpose::kNo, Transpose::kYes}) {
    const Stored b = store(opb, k, n, tb, 3);
    std::vector<uint16_t> tiles(size_t(amx_packed_b_size(k, n)) + 32);
    auto* aligned = reinterpret_cast<uint16_t*>((reinterpret_cast<uintptr_t>(tiles.data()) + 63) / 64 * 64);
    const AmxPackedB packed = amx_pack_b(tb, k, n, b.x.data(), b.ld, aligned, true);
    // op(B)(kk, j) as stored
    const auto at = [&](int64_t kk, int64_t j) { return tb == Transpose::kNo ? kk * b.ld + j : j * b.ld + kk; };
    struct Part {
      int64_t k0, n0, depth, cols;
    };
    for (const Part& p : {Part{0, 0, k, n}, Part{0, 32, k, n - 32}, Part{64, 0, 64, n}, Part{192, 0, k - 192, n}}) {
      std::vector<float> want(size_t(m * p.cols)), got(size_t(m * p.cols));
      amx_gemm_bf16(Transpose::kNo, tb, m, p.cols, p.depth, 1, a.x.data() + p.k0, k, b.x.data() + at(p.k0, p.n0),
                    b.ld, 0, want.data(), p.cols);
      amx_gemm_bf16_packed_b(Transpose::kNo, m, p.cols, p.depth, 1, a.x.data() + p.k0, k, packed.sub(p.k0, p.n0), 0,
                             got.data(), p.cols);
      EXPECT_TRUE(same_bits(got, want)) << "tb=" << int(tb) << " part at k0=" << p.k0 << " n0=" << p.n0;
    }
  }
  EXPECT_THROW((void)AmxPackedB{}.sub(16, 0), Error);  // not on a tile boundary
}

// Row-major float values [rows, values.size() / rows] stored with `pad` NaN values after each row,
// and the same rounded to bf16 (padded with a bf16 NaN).
struct FloatAndRounded {
  std::vector<float> values;
  std::vector<uint16_t> rounded;
  int64_t ld;
};
FloatAndRounded float_and_rounded(const std::vector<float>& values, int64_t rows, int64_t pad) {
  const int64_t cols = int64_t(values.size()) / rows, ld = cols + pad;
  FloatAndRounded x{std::vector<float>(size_t(rows * ld), std::numeric_limits<float>::quiet_NaN()),
                    std::vector<uint16_t>(size_t(rows * ld), 0x7fc0), ld};
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      x.values[size_t(r * ld + c)] = values[size_t(r * cols + c)];
      x.rounded[size_t(r * ld + c)] = to_bf16(values[size_t(r * cols + c)]);
    }
  return x;
}

// B packed from float32 values (rounded as they are packed) is the tiles of the same values rounded
// first, bit for bit: at ragged edges, both transposes, and on values whose rounding is delicate
// (ties to even, denormals, which VCVTNEPS2BF16 would flush, NaN, infinities, the largest finite
// float, which rounds to infinity). Padding past the operand is NaN, so reading it would show.
TEST(AmxGemm, BPackedFromFloatIsTheTilesOfItsRoundedValues) {
  REQUIRE_AMX();
  const float specials[] = {std::numeric_limits<float>::denorm_min(), -1e-39f, 1.17549421e-38f,
                            std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::max(),
                            1.00390625f /* 1 + 2^-8: a tie, to even (1) */, 1.01171875f /* a tie, up */, -0.0f};
  for (const auto& [k, n] : {std::pair<int64_t, int64_t>{200, 70}, {32, 32}, {7, 5}, {512, 512}}) {
    for (Transpose tb : {Transpose::kNo, Transpose::kYes}) {
      std::vector<float> values = random_vec(k * n, 11);
      for (size_t i = 0; i < std::size(specials) && i < values.size(); ++i) values[i * values.size() / std::size(specials)] = specials[i];
      const FloatAndRounded x = float_and_rounded(values, tb == Transpose::kNo ? k : n, 3);
      const size_t size = size_t(amx_packed_b_size(k, n));
      std::vector<uint16_t> want_buf(size + 32), got_buf(size + 32);
      const auto aligned = [](std::vector<uint16_t>& v) {
        return reinterpret_cast<uint16_t*>((reinterpret_cast<uintptr_t>(v.data()) + 63) / 64 * 64);
      };
      uint16_t *want = aligned(want_buf), *got = aligned(got_buf);
      (void)amx_pack_b(tb, k, n, x.rounded.data(), x.ld, want, false);
      (void)amx_pack_b(tb, k, n, x.values.data(), x.ld, got, true);
      EXPECT_EQ(0, std::memcmp(want, got, size * sizeof(uint16_t))) << "k=" << k << " n=" << n << " tb=" << int(tb);
    }
  }
}

// A of float32 values (rounded as its tiles are packed) gives the bits of the product on its values
// rounded first, read in place or packed, for each transpose and at ragged edges; its padding is NaN.
TEST(AmxGemm, FloatAGivesTheBitsOfItsRoundedValues) {
  REQUIRE_AMX();
  for (const Shape& s : {Shape{45, 70, 200, 1, 0}, Shape{64, 32, 64, 0.5f, 1}, Shape{200, 48, 784, 1, 1}, Shape{7, 5, 3, 1, 0}}) {
    const std::vector<uint16_t> opb = random_bf16(s.k * s.n, 13);
    const Stored b = store(opb, s.k, s.n, Transpose::kNo, 0);
    std::vector<uint16_t> tiles(size_t(amx_packed_b_size(s.k, s.n)) + 32);
    auto* aligned = reinterpret_cast<uint16_t*>((reinterpret_cast<uintptr_t>(tiles.data()) + 63) / 64 * 64);
    const AmxPackedB packed = amx_pack_b(Transpose::kNo, s.k, s.n, b.x.data(), b.ld, aligned, false);
    for (Transpose ta : {Transpose::kNo, Transpose::kYes}) {
      const std::vector<float> values = random_vec(s.m * s.k, 14);
      const FloatAndRounded a = float_and_rounded(values, ta == Transpose::kNo ? s.m : s.k, 1);
      const std::vector<float> c0 = random_vec(s.m * s.n, 15);
      std::vector<float> want = c0, got = c0;
      amx_gemm_bf16_packed_b(ta, s.m, s.n, s.k, s.alpha, a.rounded.data(), a.ld, packed, s.beta, want.data(), s.n);
      amx_gemm_bf16_packed_b(ta, s.m, s.n, s.k, s.alpha, a.values.data(), a.ld, packed, s.beta, got.data(), s.n);
      EXPECT_TRUE(same_bits(got, want)) << s.m << "x" << s.n << "x" << s.k << " ta=" << int(ta);
    }
  }
}

// A whose rows start on 64-byte boundaries, K in whole tiles, is read in place (only a last pair
// of row tiles that its rows end inside is packed); anywhere else it is packed first. Both give
// the same bits. NaN between and after A's rows would show any read beyond them.
TEST(AmxGemm, AReadInPlaceGivesTheBitsOfAPacked) {
  REQUIRE_AMX();
  const int64_t n = 70;
  struct Case {
    int64_t m, k, pad;
  };
  for (const Case& s : {Case{64, 64, 0}, Case{50, 96, 32}, Case{16, 32, 0}, Case{200, 64, 32}, Case{33, 128, 0}}) {
    const auto opa = random_bf16(s.m * s.k, 11), opb = random_bf16(s.k * n, 12);
    const int64_t lda = s.k + s.pad;
    const Stored b = store(opb, s.k, n, Transpose::kYes, 1);
    // The same rows at a 64-byte boundary (in place) and 2 bytes past one (packed).
    std::vector<uint16_t> room(size_t((s.m + 2) * lda + 64), 0x7fc0);
    auto* base = reinterpret_cast<uint16_t*>((reinterpret_cast<uintptr_t>(room.data()) + 63) / 64 * 64);
    const auto c0 = random_vec(s.m * n, 13);
    std::vector<float> got[2];
    for (int64_t shift : {0, 1}) {
      uint16_t* a = base + shift;
      std::fill(base, base + (s.m + 1) * lda + 1, uint16_t(0x7fc0));
      for (int64_t r = 0; r < s.m; ++r) std::copy_n(opa.data() + r * s.k, s.k, a + r * lda);
      for (float beta : {0.0f, 1.0f}) {
        std::vector<float> c = c0;
        amx_gemm_bf16(Transpose::kNo, Transpose::kYes, s.m, n, s.k, beta == 0 ? 0.5f : 1.0f, a, lda, b.x.data(), b.ld,
                      beta, c.data(), n);
        for (float v : c) ASSERT_TRUE(std::isfinite(v)) << s.m << "x" << s.k << " shift " << shift;
        got[shift].insert(got[shift].end(), c.begin(), c.end());
      }
    }
    EXPECT_TRUE(same_bits(got[0], got[1])) << s.m << "x" << n << "x" << s.k << " lda " << lda;
  }
  // K = 0 on aligned rows: nothing of A is read (here NaN), C = beta·C.
  std::vector<uint16_t> nan_rows(64 * 32 + 64, 0x7fc0);
  auto* a = reinterpret_cast<uint16_t*>((reinterpret_cast<uintptr_t>(nan_rows.data()) + 63) / 64 * 64);
  const Stored b = store(random_bf16(n, 14), 1, n, Transpose::kNo, 0);
  const auto c0 = random_vec(64 * n, 15);
  std::vector<float> c = c0;
  amx_gemm_bf16(Transpose::kNo, Transpose::kNo, 64, n, 0, 1, a, 32, b.x.data(), n, 0.5f, c.data(), n);
  for (size_t i = 0; i < c.size(); ++i) ASSERT_EQ(c[i], 0.5f * c0[i]) << i;
}

TEST(AmxGemm, BetaZeroDoesNotReadCAndEmptyKScalesC) {
  REQUIRE_AMX();
  const int64_t m = 20, n = 36, k = 40;
  const Stored a = store(random_bf16(m * k, 6), m, k, Transpose::kNo, 0);
  const Stored b = store(random_bf16(k * n, 7), k, n, Transpose::kYes, 0);
  std::vector<float> c(size_t(m * n), std::numeric_limits<float>::quiet_NaN());
  run(a, b, m, n, k, 1, 0, c, n);
  for (float v : c) ASSERT_TRUE(std::isfinite(v));
  std::vector<float> scaled = c;
  run(a, b, m, n, 0, 1, 0.5f, scaled, n);  // k = 0: C = beta·C
  for (size_t i = 0; i < c.size(); ++i) ASSERT_EQ(scaled[i], 0.5f * c[i]);
}

}  // namespace
}  // namespace perceiver::cpu
