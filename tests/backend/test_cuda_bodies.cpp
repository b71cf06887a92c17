// The CUDA kernels' bodies (libperceiver/src/backend/cuda/bodies/, __host__ __device__) compiled
// by g++ and run against the CPU backend: the index arithmetic of the model ops, the Philox
// dropout masks, the optimizer updates and the pointwise formulas the GPU evaluates, checked on
// any machine. Built whether or not the CUDA backend is; what needs a GPU (launch shapes, shared
// memory, warp shuffles, cuBLASLt) is the gpu suite's (tests/gpu).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cuda/bodies/model_index.h"
#include "backend/cuda/bodies/optim.h"
#include "backend/cuda/bodies/philox.h"
#include "backend/cuda/bodies/pointwise.h"
#include "core/rng.h"
#include "model/decoder_queries.h"
#include "model/preprocessor.h"
#include "perceiver/backend.h"

namespace perceiver {
namespace {

namespace body = cuda::body;

std::vector<float> random_vec(int64_t n, uint64_t seed, float std = 1.0f) {
  RngStream rng(seed, RngPurpose::kTest);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = float(std * rng.normal());
  return v;
}

Kernels<float> cpu() { return cpu_backend().kernels<float>(); }

// Largest |a − b| / (1 + |b|).
double max_rel(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    m = std::max(m, std::abs(double(a[i]) - double(b[i])) / (1.0 + std::abs(double(b[i]))));
  return m;
}

void expect_bitwise(const std::vector<float>& a, const std::vector<float>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  ASSERT_FALSE(a.empty()) << what;
  for (size_t i = 0; i < a.size(); ++i)
    ASSERT_EQ(std::memcmp(&a[i], &b[i], sizeof(float)), 0) << what << " differ at " << i << ": " << a[i] << " vs " << b[i];
}

ModelConfig tiny() { return model_config_from_yaml(std::string(PERCEIVER_SOURCE_DIR) + "/configs/tiny.yaml"); }

TEST(CudaBodies, PhiloxIsTheCoreGenerator) {
  RngStream rng(5, RngPurpose::kTest);
  for (int t = 0; t < 1000; ++t) {
    std::array<uint32_t, 4> c;
    std::array<uint32_t, 2> k;
    for (auto& w : c) w = rng.next_u32();
    for (auto& w : k) w = rng.next_u32();
    const auto ref = philox4x32_10(c, k);
    const body::Philox4 got = body::philox4x32_10(c[0], c[1], c[2], c[3], k[0], k[1]);
    for (int i = 0; i < 4; ++i) ASSERT_EQ(got.word(i), ref[size_t(i)]) << "trial " << t << " word " << i;
  }
}

// The GPU's mask (body::Dropout, set up as cuda_attention.cu does) reproduces the CPU kernel's
// attention output with dropout: O = (softmax(scale·QKᵀ) ⊙ M/(1−p))·V per (batch, head).
TEST(CudaBodies, DropoutMaskIsTheCpuKernels) {
  AttentionDims d;
  d.batch = 2, d.heads = 2, d.nq = 5, d.nk = 11, d.dqk = 3, d.dv = 4, d.scale = 0.5;
  d.dropout_p = 0.3, d.dropout_key = 0x1234567890abcdefull, d.dropout_stream = 77, d.dropout_example0 = 9;
  const int64_t ldq = d.heads * d.dqk, ldv = d.heads * d.dv;
  const auto q = random_vec(d.batch * d.nq * ldq, 1), k = random_vec(d.batch * d.nk * ldq, 2),
             v = random_vec(d.batch * d.nk * ldv, 3);
  std::vector<float> o(static_cast<size_t>(d.batch * d.nq * ldv)), p(static_cast<size_t>(d.saved_elems()));
  cpu().attention_forward(d, q.data(), k.data(), v.data(), o.data(), p.data());
  body::Dropout dp;
  dp.active = true, dp.heads = d.heads, dp.example0 = d.dropout_example0, dp.stream = d.dropout_stream;
  dp.key0 = uint32_t(d.dropout_key), dp.key1 = uint32_t(d.dropout_key >> 32);
  dp.threshold = uint32_t(std::min(std::ldexp(d.dropout_p, 32), 4294967295.0));
  dp.keep_scale = float(1.0 / (1.0 - d.dropout_p));
  std::vector<float> expect(o.size(), 0.f);
  int64_t dropped = 0;
  for (int64_t b = 0; b < d.batch; ++b)
    for (int64_t h = 0; h < d.heads; ++h)
      for (int64_t i = 0; i < d.nq; ++i)
        for (int64_t j = 0; j < d.nk; ++j) {
          const float f = dp.factor_at(b, h, i, j);
          dropped += f == 0.f;
          const float pij = p[size_t(((b * d.heads + h) * d.nq + i) * d.nk + j)] * f;
          for (int64_t c = 0; c < d.dv; ++c)
            expect[size_t((b * d.nq + i) * ldv + h * d.dv + c)] += pij * v[size_t((b * d.nk + j) * ldv + h * d.dv + c)];
        }
  EXPECT_GT(dropped, 0);
  EXPECT_LT(max_rel(o, expect), 1e-5);
}

TEST(CudaBodies, GeluMatchesCpu) {
  auto x = random_vec(5000, 4, 3.f);
  x[0] = 0.f, x[1] = -10.f, x[2] = 10.f;
  const auto dy = random_vec(5000, 5);
  for (GeluKind kind : {GeluKind::kErf, GeluKind::kTanh}) {
    std::vector<float> y(x.size()), dx(x.size(), 0.f), by(x.size()), bdx(x.size());
    cpu().gelu_forward(kind, int64_t(x.size()), x.data(), y.data());
    cpu().gelu_backward(kind, int64_t(x.size()), x.data(), dy.data(), dx.data());
    for (size_t i = 0; i < x.size(); ++i) {
      by[i] = body::gelu(kind == GeluKind::kErf, x[i]);
      bdx[i] = dy[i] * body::gelu_derivative(kind == GeluKind::kErf, x[i]);
    }
    // The body against the formula in double (tight), and against the CPU backend, whose float
    // GELU uses Eigen's vectorised erf/tanh/exp approximations (looser).
    std::vector<float> ry(x.size()), rdx(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      const double xi = x[i];
      if (kind == GeluKind::kErf) {
        ry[i] = float(0.5 * xi * (1 + std::erf(xi / std::sqrt(2.0))));
        rdx[i] = float(dy[i] * (0.5 * (1 + std::erf(xi / std::sqrt(2.0))) + xi * std::exp(-0.5 * xi * xi) / std::sqrt(2 * M_PI)));
      } else {
        const double c = std::sqrt(2 / M_PI), t = std::tanh(c * (xi + 0.044715 * xi * xi * xi));
        ry[i] = float(0.5 * xi * (1 + t));
        rdx[i] = float(dy[i] * (0.5 * (1 + t) + 0.5 * xi * (1 - t * t) * c * (1 + 3 * 0.044715 * xi * xi)));
      }
    }
    EXPECT_LT(max_rel(by, ry), 1e-6);
    EXPECT_LT(max_rel(bdx, rdx), 3e-6);
    EXPECT_LT(max_rel(by, y), 1e-5);
    EXPECT_LT(max_rel(bdx, dx), 2e-5);
  }
}

TEST(CudaBodies, LayerNormMatchesCpu) {
  const int64_t rows = 37, cols = 704;
  const auto x = random_vec(rows * cols, 6, 2.f), g = random_vec(cols, 7), b = random_vec(cols, 8),
             dy = random_vec(rows * cols, 9);
  std::vector<float> y(x.size()), mean(rows), rstd(rows), dx(x.size(), 0.f), dg(cols, 0.f), db(cols, 0.f);
  cpu().layer_norm_forward(rows, cols, x.data(), g.data(), b.data(), 1e-5, y.data(), mean.data(), rstd.data());
  cpu().layer_norm_backward(rows, cols, x.data(), g.data(), mean.data(), rstd.data(), dy.data(), dx.data(), dg.data(),
                            db.data());
  std::vector<float> by(x.size()), bdx(x.size());
  std::vector<double> bdg(cols, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x.data() + r * cols;
    double s = 0, v = 0;
    for (int64_t c = 0; c < cols; ++c) s += xr[c];
    const double mu = s / double(cols);
    for (int64_t c = 0; c < cols; ++c) v += (xr[c] - mu) * (xr[c] - mu);
    const double rs = 1.0 / std::sqrt(v / double(cols) + 1e-5);
    for (int64_t c = 0; c < cols; ++c) by[size_t(r * cols + c)] = body::layer_norm_y(xr[c], mu, rs, g[size_t(c)], b[size_t(c)]);
    const double smu = mean[size_t(r)], srs = rstd[size_t(r)];
    double sg = 0, sgx = 0;
    for (int64_t c = 0; c < cols; ++c) {
      const double gg = body::layer_norm_g(dy[size_t(r * cols + c)], g[size_t(c)]);
      sg += gg, sgx += gg * body::layer_norm_xhat(xr[c], smu, srs);
    }
    for (int64_t c = 0; c < cols; ++c) {
      bdx[size_t(r * cols + c)] = body::layer_norm_dx(xr[c], dy[size_t(r * cols + c)], g[size_t(c)], smu, srs,
                                                      sg / double(cols), sgx / double(cols));
      bdg[size_t(c)] += body::layer_norm_dgamma_term(xr[c], dy[size_t(r * cols + c)], mean[size_t(r)], rstd[size_t(r)]);
    }
  }
  std::vector<float> bdgf(bdg.begin(), bdg.end());
  EXPECT_LT(max_rel(by, y), 1e-6);
  EXPECT_LT(max_rel(bdx, dx), 1e-5);
  EXPECT_LT(max_rel(bdgf, dg), 1e-5);
}

TEST(CudaBodies, LossGradientsMatchCpu) {
  const int64_t n = 999, rows = 4, cols = 7;
  auto p = random_vec(n, 10), t = random_vec(n, 11);
  t[3] = p[3];  // sign(0) = 0
  std::vector<float> g1(static_cast<size_t>(n), 0.f), g2(static_cast<size_t>(n), 0.f), b1(static_cast<size_t>(n)), b2(static_cast<size_t>(n));
  cpu().l1_backward(n, p.data(), t.data(), 0.7, g1.data());
  cpu().mse_backward(n, p.data(), t.data(), 0.7, g2.data());
  double l1 = 0, mse = 0, out_l1 = 0, out_mse = 0;
  for (int64_t i = 0; i < n; ++i) {
    b1[size_t(i)] = body::l1_grad(p[size_t(i)], t[size_t(i)], float(0.7 / double(n)));
    b2[size_t(i)] = body::mse_grad(p[size_t(i)], t[size_t(i)], float(2.0 * 0.7 / double(n)));
    l1 += body::l1_term(p[size_t(i)], t[size_t(i)]);
    mse += body::mse_term(p[size_t(i)], t[size_t(i)]);
  }
  expect_bitwise(b1, g1, "l1 gradient");
  expect_bitwise(b2, g2, "mse gradient");
  cpu().l1_forward(n, p.data(), t.data(), &out_l1);
  cpu().mse_forward(n, p.data(), t.data(), &out_mse);
  EXPECT_NEAR(l1 / double(n), out_l1, 1e-12);
  EXPECT_NEAR(mse / double(n), out_mse, 1e-12);
  const auto logits = random_vec(rows * cols, 12, 3.f);
  const std::vector<int64_t> labels{0, 6, 3, 3};
  std::vector<float> dl(logits.size(), 0.f), bdl(logits.size());
  cpu().softmax_ce_backward(rows, cols, logits.data(), labels.data(), 0.5, dl.data());
  for (int64_t r = 0; r < rows; ++r) {
    double m = -1e300, s = 0;
    for (int64_t c = 0; c < cols; ++c) m = std::max(m, double(logits[size_t(r * cols + c)]));
    for (int64_t c = 0; c < cols; ++c) s += std::exp(double(logits[size_t(r * cols + c)]) - m);
    for (int64_t c = 0; c < cols; ++c)
      bdl[size_t(r * cols + c)] = body::softmax_ce_grad(logits[size_t(r * cols + c)], m + std::log(s),
                                                        c == labels[size_t(r)], 0.5 / double(rows));
  }
  EXPECT_LT(max_rel(bdl, dl), 1e-7);
}

// The model ops on the tiny config, and on variants with temporal space-to-depth and masks.
struct EmbedCase {
  ModelConfig cfg;
  int64_t batch;
};

std::vector<EmbedCase> embed_cases() {
  ModelConfig a = tiny();
  ModelConfig b = tiny();
  b.temporal_downsample = 2, b.num_frames = 4, b.image_fourier_max_resolution = {2, 4, 4};
  b.output_shape = {1, 4, 16, 16};
  return {{a, 3}, {b, 2}};
}

TEST(CudaBodies, EmbedForwardAndBackwardIndexTheCpuKernels) {
  for (const EmbedCase& ec : embed_cases()) {
    ModelConfig cfg = ec.cfg;
    EmbedDims d;
    try {
      d = embed_dims(cfg, ec.batch);
    } catch (const Error& e) {
      FAIL() << e.what();
    }
    const int64_t B = ec.batch, M = d.tokens, C = d.channels;
    const PositionTables pos(cpu_backend(), cfg);
    const auto video = random_vec(B * d.frames * d.height * d.width * 3, 20), audio = random_vec(B * d.audio_samples, 21);
    const auto pads = random_vec(3 * C, 22), masks = random_vec(3 * C, 23);
    std::vector<int64_t> labels(static_cast<size_t>(B));
    std::vector<uint8_t> mask(static_cast<size_t>(B * M));
    RngStream rng(24, RngPurpose::kTest);
    for (auto& l : labels) l = int64_t(rng.below(uint64_t(d.num_labels)));
    for (auto& m : mask) m = rng.bernoulli(0.3) ? 1 : 0;
    EmbedArgs<float> a;
    a.video = video.data(), a.audio = audio.data(), a.labels = labels.data(), a.mask = mask.data();
    a.pos_audio = pos.audio.data(), a.pos_image = pos.image.data();
    a.pad_audio = pads.data(), a.pad_image = pads.data() + C, a.pad_label = pads.data() + 2 * C;
    a.mask_audio = masks.data(), a.mask_image = masks.data() + C, a.mask_label = masks.data() + 2 * C;
    std::vector<float> x(static_cast<size_t>(B * M * C)), bx(x.size());
    cpu().embed_forward(d, a, 0, B * M, x.data());
    for (int64_t e = 0; e < B * M * C; ++e) bx[size_t(e)] = body::embed_value(d, a, e / C, e % C);
    expect_bitwise(bx, x, "input array");
    // A block of rows that crosses an example boundary is those rows of the whole array.
    const int64_t r0 = M - 3, nr = 5;
    std::vector<float> xr(static_cast<size_t>(nr * C));
    cpu().embed_forward(d, a, r0, nr, xr.data());
    expect_bitwise(std::vector<float>(x.begin() + r0 * C, x.begin() + (r0 + nr) * C), xr, "input rows");

    // Backward over rows [row0, row0 + n): the six sums by slot, in double.
    const int64_t row0 = 5, n = B * M - 7;
    const auto dx = random_vec(n * C, 25);
    std::vector<float> g(static_cast<size_t>(6 * C), 0.f);
    const EmbedGrads<float> eg{g.data(), g.data() + C, g.data() + 2 * C, g.data() + 3 * C, g.data() + 4 * C,
                               g.data() + 5 * C};
    cpu().embed_backward_rows(d, mask.data(), row0, n, dx.data(), eg);
    std::vector<double> sums(static_cast<size_t>(6 * C), 0.0);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < C; ++j) {
        const int slot = body::embed_grad_slot(d, mask[size_t(row0 + r)] != 0, row0 + r, j);
        if (slot >= 0) sums[size_t(slot * C + j)] += dx[size_t(r * C + j)];
      }
    std::vector<float> bg(static_cast<size_t>(6 * C), 0.f);
    for (int m = 0; m < 3; ++m) {
      const int64_t from = body::embed_pad_from(d, m);
      for (int64_t j = 0; j < C; ++j) {
        if (j >= from) bg[size_t(m * C + j - from)] = float(sums[size_t(m * C + j)]);
        bg[size_t((3 + m) * C + j)] = float(sums[size_t((3 + m) * C + j)]);
      }
    }
    EXPECT_LT(max_rel(bg, g), 1e-6);
    EXPECT_GT(*std::max_element(g.begin(), g.end()), 0.f);
  }
}

TEST(CudaBodies, QueriesAndTargetsIndexTheCpuKernels) {
  const ModelConfig cfg = tiny();
  const QueryTables tables(cpu_backend(), cfg);
  const int64_t B = 2, na = 5, ni = 9;
  const QueryDims d = query_dims(cfg, tables, B, na, ni);
  RngStream rng(30, RngPurpose::kTest);
  const std::vector<int64_t> ap = rng.sample_without_replacement(cfg.audio_tokens(), na);
  const std::vector<int64_t> ip = rng.sample_without_replacement(cfg.pixels(), ni);
  const auto pads = random_vec(3 * d.channels + d.label_channels, 31);
  QueryArgs<float> a;
  a.audio_points = ap.data(), a.image_points = ip.data(), a.audio_axis = tables.audio.data();
  for (int j = 0; j < 3; ++j) a.image_axes[j] = tables.image[j].data();
  a.pad_audio = pads.data(), a.pad_image = pads.data() + d.channels, a.pad_label = pads.data() + 2 * d.channels;
  a.label_query = pads.data() + 3 * d.channels;
  const int64_t O = d.rows(), E = d.channels;
  std::vector<float> q(static_cast<size_t>(B * O * E)), bq(q.size());
  cpu().queries_forward(d, a, q.data());
  for (int64_t e = 0; e < B * O * E; ++e) bq[size_t(e)] = body::query_value(d, a, (e / E) % O, e % E);
  expect_bitwise(bq, q, "decoder queries");

  TargetDims t;
  t.batch = B, t.pixels = cfg.pixels(), t.audio_samples = cfg.audio_samples(), t.samples_per_patch = cfg.samples_per_patch;
  t.num_image = ni, t.num_audio = na;
  const auto video = random_vec(B * t.pixels * 3, 32), audio = random_vec(B * t.audio_samples, 33);
  std::vector<float> it(static_cast<size_t>(B * ni * 3)), at(static_cast<size_t>(B * na * t.samples_per_patch));
  cpu().gather_targets(t, ip.data(), ap.data(), video.data(), audio.data(), it.data(), at.data());
  std::vector<float> bit(it.size()), bat(at.size());
  for (size_t e = 0; e < bit.size(); ++e) bit[e] = video[size_t(body::image_target_source(t, ip.data(), int64_t(e)))];
  for (size_t e = 0; e < bat.size(); ++e) bat[e] = audio[size_t(body::audio_target_source(t, ap.data(), int64_t(e)))];
  expect_bitwise(bit, it, "image targets");
  expect_bitwise(bat, at, "audio targets");
}

// Three tensors, one with two chunks, one not decayed.
struct OptimFixture {
  std::vector<OptimChunk> chunks{{0, 100, 0, 1}, {100, 250, 1, 1}, {250, 300, 1, 1}, {300, 310, 2, 0}};
  std::vector<float> p = random_vec(310, 40), g = random_vec(310, 41), m = random_vec(310, 42, 0.1f);
  std::vector<float> v = [] {
    auto x = random_vec(310, 43, 0.1f);
    for (auto& e : x) e = e * e;
    return x;
  }();
  double sumsq = 12.5;
  OptimStep step() {
    OptimStep s;
    s.lr = 0.01, s.momentum = 0.9, s.weight_decay = 0.05, s.t = 3;
    s.chunks = chunks.data(), s.num_chunks = int64_t(chunks.size()), s.num_tensors = 3, s.grad_sumsq = &sumsq;
    return s;
  }
};

TEST(CudaBodies, OptimizerUpdatesAreTheCpuKernels) {
  {  // SGD
    OptimFixture f, r;
    const OptimStep s = f.step();
    cpu().sgd_update(s, r.p.data(), r.g.data(), r.m.data());
    const auto k = body::SgdCoeffs::from(s);
    for (const OptimChunk& ch : f.chunks)
      for (int64_t i = ch.begin; i < ch.end; ++i) body::sgd_element(k, ch.decayed != 0, f.p[size_t(i)], f.g[size_t(i)], f.m[size_t(i)]);
    expect_bitwise(f.p, r.p, "sgd parameters");
    expect_bitwise(f.m, r.m, "sgd momentum");
  }
  {  // AdamW
    OptimFixture f, r;
    const OptimStep s = f.step();
    cpu().adamw_update(s, r.p.data(), r.g.data(), r.m.data(), r.v.data());
    const auto k = body::AdamCoeffs::from(s);
    for (const OptimChunk& ch : f.chunks)
      for (int64_t i = ch.begin; i < ch.end; ++i)
        body::adamw_element(k, ch.decayed != 0, f.p[size_t(i)], f.g[size_t(i)], f.m[size_t(i)], f.v[size_t(i)]);
    expect_bitwise(f.p, r.p, "adamw parameters");
    expect_bitwise(f.v, r.v, "adamw second moment");
  }
  {  // LAMB: moments, per-tensor norms in chunk order, trust ratios, update
    OptimFixture f, r;
    OptimStep s = f.step();
    std::vector<double> work(static_cast<size_t>(2 * s.num_chunks + 2 * s.num_tensors));
    s.work = work.data();
    cpu().lamb_update(s, r.p.data(), r.g.data(), r.m.data(), r.v.data());
    const auto k = body::LambCoeffs::from(s);
    std::vector<double> tp(3, 0.0), tu(3, 0.0);
    for (const OptimChunk& ch : f.chunks) {
      double sp = 0, su = 0;
      for (int64_t i = ch.begin; i < ch.end; ++i) {
        body::lamb_moments(k, f.g[size_t(i)], f.m[size_t(i)], f.v[size_t(i)]);
        const double u = body::lamb_direction(k, f.m[size_t(i)], f.v[size_t(i)], f.p[size_t(i)], ch.decayed != 0);
        sp += double(f.p[size_t(i)]) * f.p[size_t(i)], su += u * u;
      }
      tp[size_t(ch.tensor)] += sp, tu[size_t(ch.tensor)] += su;
    }
    for (const OptimChunk& ch : f.chunks) {
      const float ratio = float(body::lamb_ratio(tp[size_t(ch.tensor)], tu[size_t(ch.tensor)]));
      for (int64_t i = ch.begin; i < ch.end; ++i)
        f.p[size_t(i)] = body::lamb_apply(
            f.p[size_t(i)], body::lamb_direction(k, f.m[size_t(i)], f.v[size_t(i)], f.p[size_t(i)], ch.decayed != 0),
            ratio, float(s.lr));
    }
    expect_bitwise(f.p, r.p, "lamb parameters");
    expect_bitwise(f.m, r.m, "lamb first moment");
  }
  EXPECT_TRUE(body::finite_step(3.0));
  EXPECT_FALSE(body::finite_step(std::nan("")));
  EXPECT_FALSE(body::finite_step(INFINITY));
  EXPECT_TRUE(body::clip_needed(4.0, 2.0));   // norm 2 is not below 2
  EXPECT_FALSE(body::clip_needed(3.0, 2.0));  // norm 1.73 < 2
  EXPECT_FALSE(body::clip_needed(std::nan(""), 2.0));
}

}  // namespace
}  // namespace perceiver
