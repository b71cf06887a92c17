// The CPU backend against naive references, streamed vs materialised attention, bitwise
// determinism across thread counts, and the registry's errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/rng.h"
#include "layers/attention_block.h"
#include "perceiver/backend.h"
#include "perceiver/threads.h"

namespace perceiver {
namespace {

std::vector<float> random_vec(int64_t n, uint64_t seed, float std = 1.0f) {
  RngStream rng(seed, RngPurpose::kTest);
  std::vector<float> v(n);
  for (auto& x : v) x = float(std * rng.normal());
  return v;
}

const KernelTable<float>& ops() { return cpu_backend().kernels<float>(); }

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
    }
  return v;
}
INSTANTIATE_TEST_SUITE_P(Shapes, Gemm, ::testing::ValuesIn(gemm_cases()));

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

// A cross-attention block large enough to take every parallel path (tiled GEMMs, blocked column
// sums, streamed attention groups), run at 1 and 2 threads: all results must be bitwise equal.
std::vector<std::vector<float>> run_block(int threads, int64_t kv_chunk, int64_t kv_row_chunk = 0) {
  threads::set_num_threads(threads);
  AttentionBlockConfig cfg;
  cfg.q_dim = 64, cfg.kv_dim = 48, cfg.heads = 1, cfg.kv_chunk = kv_chunk, cfg.kv_row_chunk = kv_row_chunk;
  const int64_t batch = 2, nq = 70, nk = 3000;
  ParamRegistry reg;
  reg.add(attention_block_param_specs(cfg));
  ParamStore<float> store(reg);
  store.initialize(3, InitScheme::kDeepMind);
  ArenaPlan plan;
  plan.add(attention_block_saved_specs(cfg, batch, nq, nk));
  PlannedArena<float> acts(plan);
  Context<float> ctx(cpu_backend());
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
  const KernelTable<float>& k = ops();
  std::vector<float> losses = {float(k.l1_forward(int64_t(y.size()), y.data(), xq.data())),
                               float(k.mse_forward(int64_t(y.size()), y.data(), xq.data())),
                               float(k.sum_squares(int64_t(dxkv.size()), dxkv.data()))};
  return {y, dxq, dxkv, grads, losses};
}

TEST(Determinism, BitwiseIdenticalAtOneAndTwoThreads) {
  const int before = threads::num_threads();
  for (int64_t chunk : {int64_t(0), int64_t(256)}) {
    const auto one = run_block(1, chunk, chunk ? 1000 : 0), two = run_block(2, chunk, chunk ? 1000 : 0);
    const char* names[] = {"y", "dxq", "dxkv", "param grads", "losses"};
    for (size_t i = 0; i < one.size(); ++i) {
      ASSERT_EQ(one[i].size(), two[i].size());
      EXPECT_EQ(0, std::memcmp(one[i].data(), two[i].data(), one[i].size() * sizeof(float)))
          << names[i] << " differ between 1 and 2 threads (kv_chunk " << chunk << ")";
    }
  }
  threads::set_num_threads(before);
}

TEST(Registry, ClearErrorsForMissingDevices) {
  EXPECT_EQ(make_backend("cpu")->name(), "cpu");
  try {
    make_backend("cuda");
    FAIL() << "no throw";
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
