// The CPU backend against naive references, streamed vs materialised attention, bitwise
// determinism across thread counts, and the registry's errors.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_gemm_tiling.h"
#include "core/rng.h"
#include "layers/attention_block.h"
#include "perceiver/backend.h"
#include "perceiver/threads.h"
#include "random_vec.h"

namespace perceiver {
namespace {

Kernels<float> ops() { return cpu_backend().kernels<float>(); }

// Naive row-major reference in double.
void naive_gemm(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double av = ta == Transpose::kNo ? a[i * lda + p] : a[p * lda + i];
        const double bv = tb == Transpose::kNo ? b[p * ldb + j] : b[j * ldb + p];
        s += av * bv;
      }
      c[i * ldc + j] = float(alpha * s + beta * c[i * ldc + j]);
    }
}

struct GemmCase {
  Transpose ta, tb;
  int64_t m, n, k;
};

class Gemm : public ::testing::TestWithParam<GemmCase> {};

TEST_P(Gemm, MatchesNaiveWithLeadingDimensions) {
  const auto c = GetParam();
  const int64_t pad = 3;  // leading dimensions larger than the logical width
  const int64_t a_rows = c.ta == Transpose::kNo ? c.m : c.k, a_cols = c.ta == Transpose::kNo ? c.k : c.m;
  const int64_t b_rows = c.tb == Transpose::kNo ? c.k : c.n, b_cols = c.tb == Transpose::kNo ? c.n : c.k;
  const int64_t lda = a_cols + pad, ldb = b_cols + pad, ldc = c.n + pad;
  auto a = random_vec(a_rows * lda, 1), b = random_vec(b_rows * ldb, 2);
  auto got = random_vec(c.m * ldc, 3), want = got;
  ops().gemm(c.ta, c.tb, c.m, c.n, c.k, 0.5f, a.data(), lda, b.data(), ldb, 0.25f, got.data(), ldc);
  naive_gemm(c.ta, c.tb, c.m, c.n, c.k, 0.5f, a.data(), lda, b.data(), ldb, 0.25f, want.data(), ldc);
  double worst = 0;
  for (int64_t i = 0; i < c.m; ++i)
    for (int64_t j = 0; j < c.n; ++j) worst = std::max(worst, double(std::abs(got[i * ldc + j] - want[i * ldc + j])));
  EXPECT_LT(worst, 1e-4 * std::sqrt(double(c.k)));
}

std::vector<GemmCase> gemm_cases() {
  std::vector<GemmCase> v;
  for (auto ta : {Transpose::kNo, Transpose::kYes})
    for (auto tb : {Transpose::kNo, Transpose::kYes}) {
      v.push_back({ta, tb, 5, 7, 3});        // serial path
      v.push_back({ta, tb, 300, 90, 40});    // tiled by rows
      v.push_back({ta, tb, 70, 500, 33});    // tiled by columns
      v.push_back({ta, tb, 20, 30, 2100});   // split along K (K ≥ 2·max(m, n) and ≥ 2048)
      v.push_back({ta, tb, 600, 40, 2048});  // split along K in float32, by rows in bf16 (ratio 2 to 4)
    }
  return v;
}
INSTANTIATE_TEST_SUITE_P(Shapes, Gemm, ::testing::ValuesIn(gemm_cases()));

// Resident memory of this process, MB (/proc/self/statm: pages).
double resident_mb() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  long size = 0, resident = 0;
  if (f) {
    if (std::fscanf(f, "%ld %ld", &size, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return double(resident) * double(sysconf(_SC_PAGESIZE)) / 1e6;
}

// Buffers are 64-byte aligned at every size, and a big one gives its memory back when freed, even
// after a bigger one was freed before it (through malloc, glibc would then serve it from its heap
// and keep it resident: kinetics700 bf16 held 52 MB more in the steady state that way).
TEST(CpuMemory, AlignedAndBigBuffersGoBackToTheSystemWhenFreed) {
  for (size_t bytes : {size_t(1), size_t(64), size_t(1000), (size_t(1) << 20) - 1, size_t(1) << 20,
                       (size_t(3) << 20) + 5}) {
    Buffer b = cpu_backend().allocate(bytes);
    ASSERT_NE(b.data(), nullptr) << bytes;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 64, 0u) << bytes;
    std::memset(b.data(), 1, bytes);
  }
  {
    Buffer bigger = cpu_backend().allocate(size_t(24) << 20);
    std::memset(bigger.data(), 1, size_t(24) << 20);
  }
  const double before = resident_mb();
  {
    Buffer b = cpu_backend().allocate(size_t(16) << 20);
    std::memset(b.data(), 1, size_t(16) << 20);
    EXPECT_GT(resident_mb(), before + 15);
  }
  EXPECT_LT(resident_mb(), before + 2);
}

TEST(GemmBatched, MatchesPerProblemGemm) {
  for (int64_t batch : {2, 6}) {
    auto a = random_vec(batch * 40 * 30, 4), b = random_vec(batch * 30 * 20, 5);
    std::vector<float> got(batch * 40 * 20), want(batch * 40 * 20);
    ops().gemm_batched(Transpose::kNo, Transpose::kNo, 40, 20, 30, 1.0f, a.data(), 30, 1200, b.data(), 20, 600,
                       0.0f, got.data(), 20, 800, batch);
    for (int64_t i = 0; i < batch; ++i)
      naive_gemm(Transpose::kNo, Transpose::kNo, 40, 20, 30, 1.0f, a.data() + i * 1200, 30, b.data() + i * 600, 20,
                 0.0f, want.data() + i * 800, 20);
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-4) << "batch " << batch << " at " << i;
  }
}

struct AttentionRun {
  std::vector<float> o, dq, dk, dv;
};

// One forward and backward of the attention core on fixed random inputs of the shape of d. With
// `same_kv` the keys are their own values (one buffer, as the folded K/V projections call it), and
// dk == dv their summed gradient (dv is left empty).
AttentionRun run_attention(const AttentionDims& d, bool same_kv = false) {
  auto q = random_vec(d.batch * d.nq * d.heads * d.dqk, 6), k = random_vec(d.batch * d.nk * d.heads * d.dqk, 7);
  auto v = random_vec(d.batch * d.nk * d.heads * d.dv, 8), dout = random_vec(d.batch * d.nq * d.heads * d.dv, 9);
  AttentionRun r{std::vector<float>(dout.size()), std::vector<float>(q.size()), std::vector<float>(k.size()),
                 std::vector<float>(same_kv ? 0 : v.size())};
  const float* vv = same_kv ? k.data() : v.data();
  float* dv = same_kv ? r.dk.data() : r.dv.data();
  std::vector<float> saved(d.saved_elems());
  ops().attention_forward(d, q.data(), k.data(), vv, r.o.data(), saved.data());
  ops().attention_backward(d, q.data(), k.data(), vv, r.o.data(), saved.data(), dout.data(), r.dq.data(), r.dk.data(),
                           dv);
  return r;
}

// NaN anywhere fails: the worst difference becomes NaN, which no bound admits.
void expect_close(const char* name, const std::vector<float>& a, const std::vector<float>& b) {
  ASSERT_EQ(a.size(), b.size()) << name;
  double worst = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double diff = std::abs(double(a[i]) - double(b[i]));
    if (!(diff <= worst)) worst = diff;
    scale = std::max(scale, double(std::abs(a[i])));
  }
  EXPECT_LT(worst, 2e-5 * std::max(1.0, scale)) << name << " max abs diff " << worst;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// As BLAS: beta = 0 means C is not read, so whatever it held (NaN here) does not leak through the
// K split's final sum; and the split is bitwise the same at 1 and 2 threads.
TEST(GemmSplitK, BetaZeroIgnoresCAndThreadsDoNotMatter) {
  const int before = threads::num_threads();
  const int64_t m = 24, n = 40, k = 4000;
  const auto a = random_vec(m * k, 21), b = random_vec(k * n, 22);
  std::vector<std::vector<float>> runs;
  for (int t : {1, 2}) {
    threads::set_num_threads(t);
    std::vector<float> c(m * n, std::nanf(""));
    ops().gemm(Transpose::kNo, Transpose::kNo, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, c.data(), n);
    for (float x : c) ASSERT_TRUE(std::isfinite(x));
    runs.push_back(c);
  }
  threads::set_num_threads(before);
  EXPECT_TRUE(bitwise_equal(runs[0], runs[1]));
}

// Where OpenBLAS's kernels keep a row's bits in calls starting on the probed alignment, float32 row
// tiles follow the thread count (cpu_gemm_tiling.h): the same bits at 1 to 8 threads all the same.
// Ragged shapes of 1 to 32 tiles, every transpose, depths within and beyond the kernels' K
// blocking, a product the multiply-add floor holds to 4 tiles, and column tiles (by shape).
TEST(GemmTiles, BitwiseTheSameAtOneToEightThreads) {
  constexpr auto N = Transpose::kNo, T = Transpose::kYes;
  const GemmCase cases[] = {{N, T, 784, 512, 512}, {N, N, 1025, 1026, 700}, {T, N, 6000, 64, 48},
                            {T, T, 333, 129, 1500},  {N, T, 2048, 704, 704},  {N, N, 100, 3000, 200}};
  const int before = threads::num_threads();
  for (const GemmCase& c : cases) {
    const auto a = random_vec(c.m * c.k, 31), b = random_vec(c.k * c.n, 32);
    const int64_t lda = c.ta == N ? c.k : c.m, ldb = c.tb == N ? c.n : c.k;
    std::vector<float> one;
    for (int t : {1, 2, 3, 4, 5, 8}) {
      threads::set_num_threads(t);
      std::vector<float> got(size_t(c.m * c.n));
      ops().gemm(c.ta, c.tb, c.m, c.n, c.k, 1.0f, a.data(), lda, b.data(), ldb, 0.0f, got.data(), c.n);
      if (t == 1) one = got;
      EXPECT_TRUE(bitwise_equal(one, got)) << c.m << "x" << c.n << "x" << c.k << " differs between 1 and " << t
                                           << " threads";
    }
  }
  threads::set_num_threads(before);
}

// Tiles that follow the thread count: one per thread, starting on multiples of the alignment, each
// within an alignment of its share; never below two alignments or 2 · kMinAlignedTileMacs a share.
TEST(GemmTiles, AlignedTilesSpreadEvenlyOnTheAlignment) {
  const int before = threads::num_threads();
  const int64_t rows = 784, align = 12, many = int64_t(1) << 40;
  for (int t = 1; t <= 40; ++t) {
    threads::set_num_threads(t);
    const cpu::tiling::TileBounds bounds = cpu::tiling::aligned_tile_bounds(rows, many, align);
    ASSERT_EQ(bounds.tiles, std::min<int64_t>(t, rows / (2 * align))) << t << " threads";
    EXPECT_EQ(bounds.begin(0), 0);
    EXPECT_EQ(bounds.begin(bounds.tiles), rows);
    const double share = double(rows) / double(bounds.tiles);
    for (int64_t i = 0; i < bounds.tiles; ++i) {
      const int64_t size = bounds.begin(i + 1) - bounds.begin(i);
      EXPECT_EQ(bounds.begin(i) % align, 0) << "tile " << i << " of " << bounds.tiles;
      EXPECT_GT(double(size), share - double(align)) << "tile " << i << " of " << bounds.tiles;
      EXPECT_LT(double(size), share + double(align)) << "tile " << i << " of " << bounds.tiles;
    }
  }
  threads::set_num_threads(8);
  const int64_t floor = 2 * cpu::tiling::kMinAlignedTileMacs;
  EXPECT_EQ(cpu::tiling::aligned_tile_bounds(rows, 3 * floor, align).tiles, 3);
  EXPECT_EQ(cpu::tiling::aligned_tile_bounds(rows, floor - 1, align).tiles, 1);
  EXPECT_EQ(cpu::tiling::aligned_tile_bounds(47, many, align).tiles, 1);
  threads::set_num_threads(before);
}

AttentionDims with_dropout(AttentionDims d, double p = 0.3, uint32_t stream = 17) {
  d.dropout_p = p, d.dropout_key = 0xfeedbeef12345678ull, d.dropout_stream = stream, d.dropout_example0 = 3;
  return d;
}

// With dropout the streamed kernel draws the same mask as the materialised one (the mask is a
// function of the key and the position), so both agree to float rounding; the threads do not
// matter (bitwise); and the result differs from the one without dropout.
TEST(AttentionDropout, StreamedMatchesMaterialisedAndThreadsDoNotMatter) {
  const int before = threads::num_threads();
  AttentionDims d;
  d.batch = 2, d.heads = 2, d.nq = 37, d.nk = 1100, d.dqk = 16, d.dv = 8;
  d.scale = 0.25;
  for (int64_t chunk : {int64_t(0), int64_t(128)}) {
    AttentionDims e = with_dropout(d);
    e.kv_chunk = chunk;
    threads::set_num_threads(1);
    const AttentionRun one = run_attention(e);
    threads::set_num_threads(2);
    const AttentionRun two = run_attention(e);
    EXPECT_TRUE(bitwise_equal(one.o, two.o) && bitwise_equal(one.dq, two.dq) && bitwise_equal(one.dk, two.dk) &&
                bitwise_equal(one.dv, two.dv))
        << "dropout results differ between 1 and 2 threads (kv_chunk " << chunk << ")";
  }
  threads::set_num_threads(before);
  const AttentionRun full = run_attention(with_dropout(d));
  AttentionDims s = with_dropout(d);
  s.kv_chunk = 128;
  const AttentionRun streamed = run_attention(s);
  expect_close("o", full.o, streamed.o);
  expect_close("dq", full.dq, streamed.dq);
  expect_close("dk", full.dk, streamed.dk);
  expect_close("dv", full.dv, streamed.dv);
  const AttentionRun plain = run_attention(d);
  double diff = 0;
  for (size_t i = 0; i < plain.o.size(); ++i) diff = std::max(diff, double(std::abs(plain.o[i] - full.o[i])));
  EXPECT_GT(diff, 1e-2) << "dropout 0.3 left the output unchanged";
}

// p = 0 is the path without dropout, bitwise, whatever the key and stream.
TEST(AttentionDropout, ZeroProbabilityIsBitwiseTheDropoutFreePath) {
  AttentionDims d;
  d.batch = 2, d.heads = 3, d.nq = 21, d.nk = 300, d.dqk = 8, d.dv = 4;
  d.scale = 0.35;
  for (int64_t chunk : {int64_t(0), int64_t(64)}) {
    d.kv_chunk = chunk;
    const AttentionRun a = run_attention(d), b = run_attention(with_dropout(d, 0.0));
    EXPECT_TRUE(bitwise_equal(a.o, b.o) && bitwise_equal(a.dq, b.dq) && bitwise_equal(a.dk, b.dk) &&
                bitwise_equal(a.dv, b.dv));
  }
}

// The kept fraction is 1 − p and kept entries are scaled by 1/(1 − p): with Q = 0 every
// probability is 1/Nk, and with V = I (dv = Nk) O is the scaled mask over Nk. The mask of batch
// item b equals that of item 0 when the example offset moves by b (data-parallel ranks), and
// another stream draws another mask.
TEST(AttentionDropout, KeepRateScaleAndKeying) {
  AttentionDims d;
  d.batch = 2, d.heads = 2, d.nq = 64, d.nk = 256, d.dqk = 4, d.dv = 256;
  d.scale = 0.5;
  const double p = 0.3;
  std::vector<float> q(d.batch * d.nq * d.heads * d.dqk, 0.f), k = random_vec(d.batch * d.nk * d.heads * d.dqk, 1);
  std::vector<float> v(d.batch * d.nk * d.heads * d.dv, 0.f);
  for (int64_t b = 0; b < d.batch; ++b)
    for (int64_t j = 0; j < d.nk; ++j)
      for (int64_t h = 0; h < d.heads; ++h) v[(b * d.nk + j) * d.heads * d.dv + h * d.dv + j] = 1.f;
  auto forward = [&](const AttentionDims& e) {
    std::vector<float> o(d.batch * d.nq * d.heads * d.dv), saved(e.saved_elems());
    ops().attention_forward(e, q.data(), k.data(), v.data(), o.data(), saved.data());
    return o;
  };
  for (int64_t chunk : {int64_t(0), int64_t(99)}) {  // 99: chunks not aligned to Philox blocks
    AttentionDims e = with_dropout(d, p);
    e.kv_chunk = chunk;
    const std::vector<float> o = forward(e);
    const float kept_value = float(1.0 / ((1 - p) * d.nk));
    int64_t kept = 0;
    for (float x : o) {
      if (x != 0.f) {
        ++kept;
        ASSERT_NEAR(x, kept_value, 1e-6f * kept_value * 4);
      }
    }
    const double rate = double(kept) / double(o.size());  // 65536 draws: σ ≈ 0.0018
    EXPECT_NEAR(rate, 1 - p, 0.01) << "kv_chunk " << chunk;
  }
  // Batch item 1 at offset 3 is example 4; batch item 0 at offset 4 is the same example.
  AttentionDims shifted = with_dropout(d, p);
  shifted.dropout_example0 = 4;
  const std::vector<float> base = forward(with_dropout(d, p)), moved = forward(shifted);
  const int64_t per_item = d.nq * d.heads * d.dv;
  EXPECT_EQ(0, std::memcmp(base.data() + per_item, moved.data(), per_item * sizeof(float)));
  const std::vector<float> other = forward(with_dropout(d, p, 18));
  int64_t same = 0;
  for (size_t i = 0; i < base.size(); ++i) same += (base[i] != 0.f) == (other[i] != 0.f);
  EXPECT_LT(double(same) / double(base.size()), 0.65);  // independent masks agree on 0.7² + 0.3² = 58%
}

// Kept scores (AttentionDims::keep_scores) replace the backward's recomputed Q·Kᵀ with the
// forward's own. The products are the same but the query blocks are not (150 rows forward and 225
// backward here, as 196 and 392 in the model), and BLAS may round a row differently in another
// block: the results agree with the recomputing kernel's to float rounding, with and without
// dropout, and are bitwise the same at 1 and 2 threads. The saved state grows by the scores, and
// they are the scaled products.
TEST(Attention, KeptScoresGiveTheRecomputedResults) {
  const int before = threads::num_threads();
  AttentionDims d;
  d.batch = 2, d.heads = 2, d.nq = 450, d.nk = 1100, d.dqk = 16, d.dv = 8, d.kv_chunk = 128;
  d.scale = 0.25;
  AttentionDims kept = d;
  kept.keep_scores = true;
  EXPECT_EQ(kept.saved_elems(), d.saved_elems() + d.batch * d.heads * d.nq * d.nk);
  for (double p : {0.0, 0.3}) {
    threads::set_num_threads(1);
    const AttentionRun one = run_attention(with_dropout(kept, p));
    threads::set_num_threads(2);
    const AttentionRun two = run_attention(with_dropout(kept, p)), recomputed = run_attention(with_dropout(d, p));
    EXPECT_TRUE(bitwise_equal(one.o, two.o) && bitwise_equal(one.dq, two.dq) && bitwise_equal(one.dk, two.dk) &&
                bitwise_equal(one.dv, two.dv))
        << "kept scores: results differ between 1 and 2 threads (dropout " << p << ")";
    expect_close("o", recomputed.o, two.o);
    expect_close("dq", recomputed.dq, two.dq);
    expect_close("dk", recomputed.dk, two.dk);
    expect_close("dv", recomputed.dv, two.dv);
  }
  threads::set_num_threads(before);
  // Score (b=1, h=1, i=5, j=1000) = scale · q·k over the head's channels.
  auto q = random_vec(d.batch * d.nq * d.heads * d.dqk, 6), k = random_vec(d.batch * d.nk * d.heads * d.dqk, 7);
  auto v = random_vec(d.batch * d.nk * d.heads * d.dv, 8);
  std::vector<float> o(d.batch * d.nq * d.heads * d.dv), saved(kept.saved_elems());
  ops().attention_forward(kept, q.data(), k.data(), v.data(), o.data(), saved.data());
  const int64_t b = 1, h = 1, i = 5, j = 1000, pr = b * d.heads + h, ld = d.heads * d.dqk;
  double dot = 0;
  for (int64_t c = 0; c < d.dqk; ++c)
    dot += double(q[(b * d.nq + i) * ld + h * d.dqk + c]) * double(k[(b * d.nk + j) * ld + h * d.dqk + c]);
  const float score = saved[d.batch * d.heads * d.nq + (pr * d.nq + i) * d.nk + j];
  EXPECT_NEAR(score, d.scale * dot, 1e-5 * std::max(1.0, std::abs(dot)));
}

// A streamed forward that continues an earlier call's result (AttentionDims::continues) merges its
// keys into it: three calls over key ranges [0, 300), [300, 850) and [850, 1100), each with only
// its own K and V rows, give the one call's output and lse to float rounding. A range shorter
// than kv_chunk (the last) and one that is not a multiple of it are both in there.
TEST(Attention, ContinuedForwardMergesKeyRanges) {
  AttentionDims d;
  d.batch = 2, d.heads = 2, d.nq = 70, d.nk = 1100, d.dqk = 16, d.dv = 8, d.kv_chunk = 256;
  d.scale = 0.25;
  const int64_t ldk = d.heads * d.dqk, ldv = d.heads * d.dv;
  auto q = random_vec(d.batch * d.nq * ldk, 6), k = random_vec(d.batch * d.nk * ldk, 7);
  auto v = random_vec(d.batch * d.nk * ldv, 8);
  std::vector<float> o(d.batch * d.nq * ldv), lse(d.saved_elems());
  ops().attention_forward(d, q.data(), k.data(), v.data(), o.data(), lse.data());
  std::vector<float> o_parts(o.size(), std::nanf("")), lse_parts(lse.size(), std::nanf(""));
  const int64_t bounds[] = {0, 300, 850, 1100};
  for (int part = 0; part < 3; ++part) {
    const int64_t k0 = bounds[part], n = bounds[part + 1] - k0;
    std::vector<float> kr, vr;  // this range's rows of every batch item, [B, n, ·]
    for (int64_t b = 0; b < d.batch; ++b) {
      kr.insert(kr.end(), k.begin() + (b * d.nk + k0) * ldk, k.begin() + (b * d.nk + k0 + n) * ldk);
      vr.insert(vr.end(), v.begin() + (b * d.nk + k0) * ldv, v.begin() + (b * d.nk + k0 + n) * ldv);
    }
    AttentionDims e = d;
    e.nk = n;
    e.continues = part > 0;
    ops().attention_forward(e, q.data(), kr.data(), vr.data(), o_parts.data(), lse_parts.data());
  }
  expect_close("o", o, o_parts);
  expect_close("lse", lse, lse_parts);
}

// The folded cross-attention's calls (attention_block's fold_kv): keys that are their own values
// (k == v, and dk == dv, whose gradients then add up), run over key ranges with the scores kept
// (AttentionDims::key0, key_count): forward ranges continue each other, backward ranges add their dQ.
// Together they give one call's o, lse, scores, dQ and dK + dV.
TEST(Attention, KeyRangesWithKeptScoresGiveOneCall) {
  AttentionDims d;
  d.batch = 2, d.heads = 2, d.nq = 70, d.nk = 1100, d.dqk = 16, d.dv = 16, d.kv_chunk = 256;
  d.scale = 0.25;
  d.keep_scores = true;
  const int64_t ld = d.heads * d.dqk;
  auto q = random_vec(d.batch * d.nq * ld, 16), x = random_vec(d.batch * d.nk * ld, 17);
  auto dout = random_vec(d.batch * d.nq * ld, 18);
  std::vector<float> o(d.batch * d.nq * ld), saved(d.saved_elems()), dq(q.size()), dk(x.size()), dv(x.size());
  ops().attention_forward(d, q.data(), x.data(), x.data(), o.data(), saved.data());
  ops().attention_backward(d, q.data(), x.data(), x.data(), o.data(), saved.data(), dout.data(), dq.data(), dk.data(),
                           dv.data());
  std::vector<float> dx(x.size());
  for (size_t i = 0; i < dx.size(); ++i) dx[i] = dk[i] + dv[i];

  std::vector<float> o_parts(o.size(), std::nanf("")), saved_parts(saved.size(), std::nanf(""));
  std::vector<float> dq_parts(q.size()), dx_parts(x.size(), std::nanf(""));
  const int64_t bounds[] = {0, 300, 850, 1100};
  auto range_rows = [&](const std::vector<float>& t, int64_t k0, int64_t n) {  // [B, n, ld]
    std::vector<float> r;
    for (int64_t b = 0; b < d.batch; ++b) r.insert(r.end(), t.begin() + (b * d.nk + k0) * ld, t.begin() + (b * d.nk + k0 + n) * ld);
    return r;
  };
  for (bool backward : {false, true})
    for (int part = 0; part < 3; ++part) {
      const int64_t k0 = bounds[part], n = bounds[part + 1] - k0;
      const std::vector<float> xr = range_rows(x, k0, n);
      AttentionDims e = d;
      e.nk = n, e.key0 = k0, e.key_count = d.nk;
      if (!backward) {
        e.continues = part > 0;
        ops().attention_forward(e, q.data(), xr.data(), xr.data(), o_parts.data(), saved_parts.data());
        continue;
      }
      std::vector<float> dxr(xr.size());
      ops().attention_backward(e, q.data(), xr.data(), xr.data(), o_parts.data(), saved_parts.data(), dout.data(),
                               dq_parts.data(), dxr.data(), dxr.data());
      for (int64_t b = 0; b < d.batch; ++b)
        std::copy_n(dxr.begin() + b * n * ld, n * ld, dx_parts.begin() + (b * d.nk + k0) * ld);
    }
  expect_close("o", o, o_parts);
  expect_close("lse and scores", saved, saved_parts);
  expect_close("dq", dq, dq_parts);
  expect_close("dk + dv", dx, dx_parts);
  AttentionDims outside = d;
  outside.nk = 300, outside.key0 = 850, outside.key_count = d.nk;  // keys [850, 1150) of 1100
  EXPECT_THROW(ops().attention_forward(outside, q.data(), x.data(), x.data(), o.data(), saved.data()), Error);
}

// attention_backward_key_sums (KernelTable): over the folded encoder's key ranges, with and
// without kept scores, its dQ is attention_backward's, and its sums give what reducing
// attention_backward's dK + dV would: Σ_j w_j·dX_j per key group (from q_sums, through Q and dO)
// and Σ_j w_j·(dX_j·x_j)·x_j per key group (key_sums). Groups come in runs of keys, single keys and
// keys in none.
template <class T>
void check_key_sums(bool keep_scores, double tol) {
  SCOPED_TRACE(std::string(sizeof(T) == 8 ? "double" : "float") + (keep_scores ? ", scores kept" : ""));
  const Kernels<T> k = cpu_backend().kernels<T>();
  AttentionDims d;
  d.batch = 2, d.heads = 1, d.nq = 300, d.nk = 1100, d.dqk = 24, d.dv = 24, d.kv_chunk = 128;
  d.scale = 0.2;
  d.keep_scores = keep_scores;
  const int64_t c = d.dqk, groups = 3, bounds[] = {0, 300, 850, 1100};
  auto cast = [](const std::vector<float>& v) { return std::vector<T>(v.begin(), v.end()); };
  const std::vector<T> q = cast(random_vec(d.batch * d.nq * c, 31)), x = cast(random_vec(d.batch * d.nk * c, 32));
  const std::vector<T> dout = cast(random_vec(d.batch * d.nq * c, 33));
  std::vector<uint8_t> ids(size_t(d.batch * d.nk));
  std::vector<T> w(ids.size());
  for (size_t j = 0; j < ids.size(); ++j) {
    const int64_t run = int64_t(j) / 37 + int64_t(j) / 101;
    ids[j] = j % 13 == 5 ? uint8_t(j % 3) : run % 4 == 3 ? uint8_t(255) : uint8_t(run % 4);
    w[j] = T(0.5 + double(j % 7) / 7);
  }
  std::vector<T> o(q.size()), saved(d.saved_elems()), dq(q.size()), dx(x.size());
  k.attention_forward(d, q.data(), x.data(), x.data(), o.data(), saved.data());
  std::vector<T> dq_sums(q.size()), q_sums(size_t(d.batch * d.nq * 2 * groups));
  std::vector<T> key_sums(size_t(d.batch * groups * c));
  for (int part = 0; part < 3; ++part) {
    const int64_t k0 = bounds[part], n = bounds[part + 1] - k0;
    std::vector<T> xr, dxr(size_t(d.batch * n * c));
    for (int64_t b = 0; b < d.batch; ++b) xr.insert(xr.end(), x.begin() + (b * d.nk + k0) * c, x.begin() + (b * d.nk + k0 + n) * c);
    AttentionDims e = d;
    e.nk = n, e.key0 = k0, e.key_count = d.nk;
    k.attention_backward(e, q.data(), xr.data(), xr.data(), o.data(), saved.data(), dout.data(), dq.data(), dxr.data(),
                         dxr.data());
    k.attention_backward_key_sums(e, q.data(), xr.data(), o.data(), saved.data(), dout.data(), ids.data(), w.data(),
                                  groups, dq_sums.data(), q_sums.data(), key_sums.data());
    for (int64_t b = 0; b < d.batch; ++b) std::copy_n(dxr.begin() + b * n * c, n * c, dx.begin() + (b * d.nk + k0) * c);
  }
  auto expect_near_all = [&](const char* name, const std::vector<double>& want, const std::vector<double>& got) {
    double worst = 0, scale = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      worst = std::max(worst, std::abs(want[i] - got[i]));
      scale = std::max(scale, std::abs(want[i]));
    }
    EXPECT_GT(scale, 0.1) << name;
    EXPECT_LT(worst, tol * scale) << name << " max abs diff " << worst << " of " << scale;
  };
  expect_near_all("dq", std::vector<double>(dq.begin(), dq.end()), std::vector<double>(dq_sums.begin(), dq_sums.end()));
  std::vector<double> want_sums(size_t(d.batch * groups * c)), got_sums(want_sums.size());
  std::vector<double> want_keys(key_sums.size()), got_keys(key_sums.begin(), key_sums.end());
  for (int64_t b = 0; b < d.batch; ++b) {
    for (int64_t j = 0; j < d.nk; ++j) {
      const int64_t key = b * d.nk + j;
      double dot = 0;
      for (int64_t ch = 0; ch < c; ++ch) dot += double(dx[key * c + ch]) * double(x[key * c + ch]);
      for (int64_t g = 0; g < groups; ++g) {
        if (ids[size_t(key)] != g) continue;
        for (int64_t ch = 0; ch < c; ++ch) {
          want_sums[size_t((b * groups + g) * c + ch)] += double(w[size_t(key)]) * double(dx[key * c + ch]);
          want_keys[size_t((b * groups + g) * c + ch)] += double(w[size_t(key)]) * dot * double(x[key * c + ch]);
        }
      }
    }
    for (int64_t i = 0; i < d.nq; ++i)
      for (int64_t g = 0; g < groups; ++g) {
        const double a = double(q_sums[size_t((b * d.nq + i) * 2 * groups + g)]);
        const double p = double(q_sums[size_t((b * d.nq + i) * 2 * groups + groups + g)]);
        for (int64_t ch = 0; ch < c; ++ch)
          got_sums[size_t((b * groups + g) * c + ch)] +=
              a * double(q[(b * d.nq + i) * c + ch]) + p * double(dout[(b * d.nq + i) * c + ch]);
      }
  }
  expect_near_all("group sums of dX", want_sums, got_sums);
  expect_near_all("key sums", want_keys, got_keys);
}

TEST(Attention, KeySumsGiveTheKeyGradientsReductions) {
  for (bool keep : {false, true}) {
    check_key_sums<double>(keep, 1e-11);
    check_key_sums<float>(keep, 2e-5);
  }
}

TEST(Attention, StreamedMatchesMaterialisedInFloat) {
  AttentionDims d;
  d.batch = 2, d.heads = 2, d.nq = 37, d.nk = 1100, d.dqk = 16, d.dv = 8;
  d.scale = 0.25;
  auto q = random_vec(d.batch * d.nq * 32, 6), k = random_vec(d.batch * d.nk * 32, 7);
  auto v = random_vec(d.batch * d.nk * 16, 8), dout = random_vec(d.batch * d.nq * 16, 9);
  struct Result {
    std::vector<float> o, dq, dk, dv;
  };
  auto run = [&](int64_t chunk) {
    AttentionDims e = d;
    e.kv_chunk = chunk;
    Result r{std::vector<float>(dout.size()), std::vector<float>(q.size()), std::vector<float>(k.size()),
             std::vector<float>(v.size())};
    std::vector<float> saved(e.saved_elems());
    ops().attention_forward(e, q.data(), k.data(), v.data(), r.o.data(), saved.data());
    ops().attention_backward(e, q.data(), k.data(), v.data(), r.o.data(), saved.data(), dout.data(), r.dq.data(),
                             r.dk.data(), r.dv.data());
    return r;
  };
  const Result full = run(0), streamed = run(128);
  auto compare = [](const char* name, const std::vector<float>& a, const std::vector<float>& b) {
    double worst = 0, scale = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      worst = std::max(worst, double(std::abs(a[i] - b[i])));
      scale = std::max(scale, double(std::abs(a[i])));
    }
    EXPECT_LT(worst, 2e-5 * std::max(1.0, scale)) << name << " max abs diff " << worst;
  };
  compare("o", full.o, streamed.o);
  compare("dq", full.dq, streamed.dq);
  compare("dk", full.dk, streamed.dk);
  compare("dv", full.dv, streamed.dv);
}

// A streamed call with few tasks per batch item (one head, two query blocks, eight key chunks: the
// shape of the encoder's folded calls) splits its keys into groups in the forward and its query
// rows in the backward, and merges the partial results in a fixed order. It gives the materialised
// kernel's results to float rounding, with and without dropout, with the scores kept, with keys
// apart from their values and equal to them (dk == dv); and the same bits at 1 and 2 threads.
TEST(Attention, SplitCallsGiveTheMaterialisedResults) {
  const int before = threads::num_threads();
  AttentionDims d;
  d.batch = 2, d.heads = 1, d.nq = 300, d.nk = 1000, d.dqk = 16, d.dv = 16;
  d.scale = 0.25;
  for (bool same_kv : {false, true})
    for (double p : {0.0, 0.3}) {
      const AttentionDims full = with_dropout(d, p);
      AttentionDims split = full;
      split.kv_chunk = 128;
      split.keep_scores = p == 0;
      threads::set_num_threads(1);
      const AttentionRun one = run_attention(split, same_kv);
      threads::set_num_threads(2);
      const AttentionRun two = run_attention(split, same_kv), reference = run_attention(full, same_kv);
      SCOPED_TRACE(std::string(same_kv ? "k == v" : "k, v") + ", dropout " + std::to_string(p));
      EXPECT_TRUE(bitwise_equal(one.o, two.o) && bitwise_equal(one.dq, two.dq) && bitwise_equal(one.dk, two.dk) &&
                  bitwise_equal(one.dv, two.dv));
      expect_close("o", reference.o, two.o);
      expect_close("dq", reference.dq, two.dq);
      expect_close("dk", reference.dk, two.dk);
      expect_close("dv", reference.dv, two.dv);
    }
  threads::set_num_threads(before);
}

// A cross-attention block large enough to take every parallel path (tiled GEMMs, blocked column
// sums, streamed attention groups), run at 1 and 2 threads: all results must be bitwise equal.
std::vector<std::vector<float>> run_block(int threads, int64_t kv_chunk, int64_t kv_row_chunk = 0, double dropout = 0,
                                          bool keep_scores = false, bool fold_kv = false) {
  threads::set_num_threads(threads);
  AttentionBlockConfig cfg;
  cfg.q_dim = 64, cfg.kv_dim = 48, cfg.heads = 1, cfg.kv_chunk = kv_chunk, cfg.kv_row_chunk = kv_row_chunk;
  cfg.attention_dropout = dropout;
  cfg.keep_scores = keep_scores;
  cfg.fold_kv = fold_kv;
  const int64_t batch = 2, nq = 70, nk = 3000;
  ParamRegistry reg;
  reg.add(attention_block_param_specs(cfg));
  ParamStore<float> store(reg);
  store.initialize(3, InitScheme::kDeepMind);
  ArenaPlan plan;
  plan.add(attention_block_saved_specs(cfg, batch, nq, nk));
  PlannedArena<float> acts(plan);
  Context<float> ctx(cpu_backend());
  ctx.mode = {dropout > 0, 21, 6, 0};
  auto xq = random_vec(batch * nq * 64, 10), xkv = random_vec(batch * nk * 48, 11), dy = random_vec(batch * nq * 64, 12);
  std::vector<float> y(xq.size()), dxq(xq.size()), dxkv(xkv.size());
  auto saved = AttentionBlockSaved<float>::bind(cfg, {acts, ""});
  auto params = AttentionBlockParams<float>::bind(cfg, {store, ""});
  attention_block_forward(cfg, params, ConstView<float>{xq.data(), Shape{batch, nq, 64}},
                          ConstView<float>{xkv.data(), Shape{batch, nk, 48}}, saved,
                          TensorView<float>{y.data(), Shape{batch, nq, 64}}, ctx);
  attention_block_backward(cfg, params, saved, ConstView<float>{dy.data(), Shape{batch, nq, 64}},
                           AttentionBlockGrads<float>::bind(cfg, {store, ""}),
                           TensorView<float>{dxq.data(), Shape{batch, nq, 64}},
                           TensorView<float>{dxkv.data(), Shape{batch, nk, 48}}, ctx);
  const float* g = store.grads().data();
  std::vector<float> grads(g, g + store.grads().size());
  const Kernels<float> k = ops();
  double l1 = 0, mse = 0, sq = 0;
  k.l1_forward(int64_t(y.size()), y.data(), xq.data(), &l1);
  k.mse_forward(int64_t(y.size()), y.data(), xq.data(), &mse);
  k.sum_squares(int64_t(dxkv.size()), dxkv.data(), &sq);
  std::vector<float> losses = {float(l1), float(mse), float(sq)};
  return {y, dxq, dxkv, grads, losses};
}

// The encoder's way (K/V in row chunks, gradients in place) with the scores kept: the block's
// outputs, input and parameter gradients are those of the recomputing block to float rounding,
// and the saved state holds the scores.
TEST(AttentionBlock, KeptScoresGiveTheRecomputedBlock) {
  const int before = threads::num_threads();
  for (double dropout : {0.0, 0.3}) {
    const auto recomputed = run_block(2, 256, 1000, dropout), kept = run_block(2, 256, 1000, dropout, true);
    const char* names[] = {"y", "dxq", "dxkv", "param grads", "losses"};
    for (size_t i = 0; i < kept.size(); ++i) expect_close(names[i], recomputed[i], kept[i]);
  }
  threads::set_num_threads(before);
  AttentionBlockConfig cfg;
  cfg.q_dim = 64, cfg.kv_dim = 48, cfg.kv_chunk = 256, cfg.kv_row_chunk = 1000;
  auto softmax_elems = [&] {
    for (const TensorSpec& t : attention_block_saved_specs(cfg, 2, 70, 3000))
      if (t.name == "attn.softmax") return t.shape.numel();
    return int64_t(-1);
  };
  const int64_t lse_only = softmax_elems();
  cfg.keep_scores = true;
  EXPECT_EQ(lse_only, 2 * 70);
  EXPECT_EQ(softmax_elems(), 2 * 70 * (1 + 3000));
}

// The K/V projections folded into the queries and the output (fold_kv), scores kept or not: the
// block's outputs and gradients are the projecting block's to float rounding (the key bias's
// gradient, zero in theory, is zero folded and rounding noise projected), bitwise the same at 1,
// 2 and 3 threads, and the saved state holds no K or V.
TEST(AttentionBlock, FoldedKvProjectionsGiveTheProjectingBlock) {
  const int before = threads::num_threads();
  for (bool keep : {false, true}) {
    const auto projected = run_block(2, 256, 1000, 0, keep), folded = run_block(2, 256, 1000, 0, keep, true);
    const char* names[] = {"y", "dxq", "dxkv", "param grads", "losses"};
    for (size_t i = 0; i < folded.size(); ++i) expect_close(names[i], projected[i], folded[i]);
    for (int threads : {1, 3}) {
      const auto other = run_block(threads, 256, 1000, 0, keep, true);
      for (size_t i = 0; i < folded.size(); ++i)
        EXPECT_TRUE(bitwise_equal(folded[i], other[i])) << names[i] << " differ between 2 and " << threads << " threads";
    }
  }
  threads::set_num_threads(before);
  AttentionBlockConfig cfg;
  cfg.q_dim = 64, cfg.kv_dim = 48, cfg.kv_chunk = 256, cfg.kv_row_chunk = 1000, cfg.fold_kv = true;
  for (const TensorSpec& t : attention_block_saved_specs(cfg, 2, 70, 3000)) {
    if (t.name == "attn.k" || t.name == "attn.v") {
      EXPECT_EQ(t.shape.numel(), 0) << t.name;
    }
    if (t.name == "attn.q_folded" || t.name == "attn.o_folded") {
      EXPECT_EQ(t.shape, (Shape{2, 70, 48})) << t.name;
    }
  }
  cfg.heads = 2;
  EXPECT_THROW(cfg.validate(), Error);  // one head only
}

// The folded block asked for its kv input gradient's group sums only (KvGradGroups), in double:
// it gives them without the gradient's rows (the sink is never called) and they are the sums of
// the rows it gives otherwise, and every parameter gradient is the same either way. Groups as the
// net's: runs of rows, single rows in another group, rows in none; two batch items, three ranges.
TEST(AttentionBlock, FoldedGroupSumsAreTheSumsOfTheGradientRows) {
  AttentionBlockConfig cfg;
  cfg.q_dim = 64, cfg.kv_dim = 48, cfg.heads = 1, cfg.kv_chunk = 256, cfg.kv_row_chunk = 1000, cfg.fold_kv = true;
  const int64_t batch = 2, nq = 70, nk = 2500, c = 48, groups = 4;
  ParamRegistry reg;
  reg.add(attention_block_param_specs(cfg));
  ArenaPlan plan;
  plan.add(attention_block_saved_specs(cfg, batch, nq, nk));
  auto cast = [](const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); };
  const auto xq = cast(random_vec(batch * nq * 64, 40)), xkv = cast(random_vec(batch * nk * c, 41));
  const auto dy = cast(random_vec(batch * nq * 64, 42));
  std::vector<uint8_t> ids(size_t(batch * nk));
  for (size_t r = 0; r < ids.size(); ++r)
    ids[r] = r % 17 == 3 ? uint8_t(r % 4) : uint8_t(int64_t(r) / 300 % 5 == 4 ? 200 : int64_t(r) / 300 % 5);
  struct Run {
    std::vector<double> sums, grads;
    int sink_calls = 0;
  };
  auto run = [&](bool with_groups) {
    ParamStore<double> store(reg);
    store.initialize(5, InitScheme::kDeepMind);
    auto params = AttentionBlockParams<double>::bind(cfg, {store, ""});
    for (int64_t i = 0; i < c; ++i) {  // a gain and shift that are not 1 and 0
      const_cast<double*>(params.ln_kv.weight.data)[i] = 0.5 + double(i % 5) / 4;
      const_cast<double*>(params.ln_kv.bias.data)[i] = 0.1 * double(i % 3) - 0.1;
    }
    PlannedArena<double> acts(plan);
    Context<double> ctx(cpu_backend());
    auto saved = AttentionBlockSaved<double>::bind(cfg, {acts, ""});
    std::vector<double> y(xq.size()), dxq(xq.size());
    attention_block_forward(cfg, params, ConstView<double>{xq.data(), Shape{batch, nq, 64}},
                            ConstView<double>{xkv.data(), Shape{batch, nk, c}}, saved,
                            TensorView<double>{y.data(), Shape{batch, nq, 64}}, ctx);
    Run r;
    r.sums.assign(size_t(groups * c), 0.0);
    const RowSink<double> sink = [&](int64_t row0, ConstView<double> rows) {
      ++r.sink_calls;
      for (int64_t i = 0; i < rows.rows(); ++i)
        if (ids[size_t(row0 + i)] < groups)
          for (int64_t ch = 0; ch < c; ++ch) r.sums[size_t(ids[size_t(row0 + i)] * c + ch)] += rows.data[i * c + ch];
    };
    KvGradGroups<double> kv_groups;
    if (with_groups) kv_groups = {ids.data(), groups, TensorView<double>{r.sums.data(), Shape{groups, c}}};
    attention_block_backward(cfg, params, saved, ConstView<double>{dy.data(), Shape{batch, nq, 64}},
                             AttentionBlockGrads<double>::bind(cfg, {store, ""}),
                             TensorView<double>{dxq.data(), Shape{batch, nq, 64}}, TensorView<double>{}, ctx, sink,
                             kv_groups);
    r.grads.assign(store.grads().data(), store.grads().data() + store.grads().size());
    return r;
  };
  const Run rows = run(false), sums = run(true);
  EXPECT_GT(rows.sink_calls, 0);
  EXPECT_EQ(sums.sink_calls, 0);
  auto expect_near_all = [](const char* name, const std::vector<double>& want, const std::vector<double>& got) {
    double worst = 0, scale = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      worst = std::max(worst, std::abs(want[i] - got[i]));
      scale = std::max(scale, std::abs(want[i]));
    }
    EXPECT_GT(scale, 1e-3) << name;
    EXPECT_LT(worst, 1e-11 * scale) << name << " max abs diff " << worst << " of " << scale;
  };
  expect_near_all("group sums", rows.sums, sums.sums);
  expect_near_all("parameter gradients", rows.grads, sums.grads);
}

// 3 threads too: the streamed backward then runs both pairs in one wave (1 and 2 threads: one
// pair per wave), which must not change a bit either.
TEST(Determinism, BitwiseIdenticalAtOneTwoAndThreeThreads) {
  const int before = threads::num_threads();
  for (double dropout : {0.0, 0.3})
    for (int64_t chunk : {int64_t(0), int64_t(256)}) {
      const auto one = run_block(1, chunk, chunk ? 1000 : 0, dropout);
      for (int threads : {2, 3}) {
        const auto other = run_block(threads, chunk, chunk ? 1000 : 0, dropout);
        const char* names[] = {"y", "dxq", "dxkv", "param grads", "losses"};
        for (size_t i = 0; i < one.size(); ++i) {
          ASSERT_EQ(one[i].size(), other[i].size());
          EXPECT_EQ(0, std::memcmp(one[i].data(), other[i].data(), one[i].size() * sizeof(float)))
              << names[i] << " differ between 1 and " << threads << " threads (kv_chunk " << chunk << ", dropout "
              << dropout << ")";
        }
      }
    }
  threads::set_num_threads(before);
}

TEST(Registry, ClearErrorsForMissingDevices) {
  EXPECT_EQ(make_backend("cpu")->name(), "cpu");
  // cuda: made where the build has it and a GPU is present, otherwise an error with a HINT.
  try {
    const auto cuda = make_backend("cuda");
    const auto names = available_backends();
    EXPECT_NE(std::find(names.begin(), names.end(), "cuda"), names.end());
    EXPECT_EQ(cuda->describe().rfind("cuda: ", 0), 0u) << cuda->describe();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("HINT"), std::string::npos) << e.what();
  }
  try {
    make_backend("tpu");
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'tpu'"), std::string::npos) << e.what();
  }
}

TEST(Threads, TopologyReportsCores) {
  const auto t = threads::topology();
  EXPECT_GE(t.cores, 1);
  EXPECT_GE(t.pus, t.cores);
  EXPECT_FALSE(t.summary.empty());
  std::cout << "[ topology ] " << t.summary << "\n";
}

}  // namespace
}  // namespace perceiver
