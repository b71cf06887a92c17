// Op conformance (ggml's test-backend-ops is the model): every op of the table, forward and
// backward, on the CUDA backend against the CPU backend on the same inputs, compared by NMSE
// and max error. fp32 tolerances are tight (copies and gathers must be exact); bf16 runs the
// same cases with per-op tolerances where products are involved (everything else must still
// match fp32's). Shapes include the kinetics700 ones (52097 input tokens of 704 channels, 784
// latents of 512, 8 heads of 64, 1025 decoder queries). Skips (ctest SKIP) without a GPU.
#include <functional>

#include "gpu_test.h"
#include "model/decoder_queries.h"
#include "model/preprocessor.h"
#include "optim/optimizer.h"

namespace perceiver {
namespace {

using gpu_test::random_vec;
using gpu_test::Tensors;
using Outputs = std::vector<std::pair<std::string, std::vector<double>>>;

struct OpCase {
  std::string name;
  double nmse_fp32;  // allowed NMSE per output in fp32 (0: bitwise equal)
  double nmse_bf16;  // in bf16
  std::function<Outputs(Tensors&)> run;
};

ModelConfig preset(const std::string& name) {
  return model_config_from_yaml(std::string(PERCEIVER_SOURCE_DIR) + "/configs/" + name + ".yaml");
}

// NMSE bounds. fp32: float32 sums in another order (cuBLASLt vs OpenBLAS, block trees vs
// sequential loops) leave relative errors near 1e-7..1e-6, NMSE far below these. bf16: operands
// rounded to 8 bits of mantissa (relative 2^-9) give product errors of a few 1e-3, NMSE ~1e-5.
// Measured on an H200: every output within 0.26 of its bound (the closest: layer norm's dgamma
// and dbeta over 52,097 rows, NMSE 2.5e-13 of kTight; bf16 attention at most 3.4e-5 of 3e-4).
constexpr double kExact = 0, kTight = 1e-12, kProduct = 1e-10, kAttention = 1e-9;
constexpr double kBf16Product = 1e-4, kBf16Attention = 3e-4;

// ---- products ---------------------------------------------------------------------------------

OpCase gemm_case(const std::string& name, Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, int64_t pad,
                 float alpha, float beta) {
  return {name, kProduct, kBf16Product, [=](Tensors& t) {
            const int64_t lda = (ta == Transpose::kNo ? k : m) + pad, ldb = (tb == Transpose::kNo ? n : k) + pad,
                          ldc = n + pad;
            const int64_t ra = ta == Transpose::kNo ? m : k, rb = tb == Transpose::kNo ? k : n;
            const float* a = t.up(random_vec(ra * lda, 1));
            const float* b = t.up(random_vec(rb * ldb, 2));
            float* c = t.up(random_vec(m * ldc, 3));
            t.k().gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
            return Outputs{{"c", t.down(c)}};
          }};
}

OpCase gemm_batched_case() {
  return {"gemm_batched_strided", kProduct, kBf16Product, [](Tensors& t) {
            const int64_t m = 17, n = 19, k = 23, batch = 5, lda = 29, ldb = 25, ldc = 21;
            const int64_t sa = k * lda + 7, sb = n * ldb + 3, sc = m * ldc + 5;
            const float* a = t.up(random_vec(batch * sa, 4));  // A transposed: k rows of lda
            const float* b = t.up(random_vec(batch * sb, 5));  // B transposed: n rows of ldb
            float* c = t.up(random_vec(batch * sc, 6));
            t.k().gemm_batched(Transpose::kYes, Transpose::kYes, m, n, k, 1.3f, a, lda, sa, b, ldb, sb, 0.25f, c, ldc, sc,
                               batch);
            return Outputs{{"c", t.down(c)}};
          }};
}

// ---- rows: layer norm, softmax, GELU, bias ---------------------------------------------------

OpCase layer_norm_case(const std::string& name, int64_t rows, int64_t cols) {
  return {name, kTight, kTight, [=](Tensors& t) {
            const float* x = t.up(random_vec(rows * cols, 7, 3.f));
            const float* g = t.up(random_vec(cols, 8));
            const float* b = t.up(random_vec(cols, 9));
            float *y = t.zeros(rows * cols), *mean = t.zeros(rows), *rstd = t.zeros(rows);
            t.k().layer_norm_forward(rows, cols, x, g, b, 1e-5, y, mean, rstd);
            const float* dy = t.up(random_vec(rows * cols, 10));
            float* dx = t.up(random_vec(rows * cols, 11));  // backward accumulates
            float *dg = t.up(random_vec(cols, 12)), *db = t.up(random_vec(cols, 13));
            t.k().layer_norm_backward(rows, cols, x, g, mean, rstd, dy, dx, dg, db);
            return Outputs{{"y", t.down(y)},   {"mean", t.down(mean)}, {"rstd", t.down(rstd)},
                           {"dx", t.down(dx)}, {"dgamma", t.down(dg)}, {"dbeta", t.down(db)}};
          }};
}

OpCase softmax_case(const std::string& name, int64_t rows, int64_t cols) {
  return {name, kTight, kTight, [=](Tensors& t) {
            const float* x = t.up(random_vec(rows * cols, 14, 4.f));
            float* y = t.zeros(rows * cols);
            t.k().softmax_forward(rows, cols, x, y);
            const float* dy = t.up(random_vec(rows * cols, 15));
            float* dx = t.up(random_vec(rows * cols, 16));
            t.k().softmax_backward(rows, cols, y, dy, dx);
            return Outputs{{"y", t.down(y)}, {"dx", t.down(dx)}};
          }};
}

OpCase gelu_case(GeluKind kind) {
  return {kind == GeluKind::kErf ? "gelu_erf" : "gelu_tanh", 1e-11, 1e-11, [=](Tensors& t) {
            const int64_t n = 784 * 512 + 13;
            const float* x = t.up(random_vec(n, 17, 3.f));
            float* y = t.zeros(n);
            t.k().gelu_forward(kind, n, x, y);
            const float* dy = t.up(random_vec(n, 18));
            float* dx = t.up(random_vec(n, 19));
            t.k().gelu_backward(kind, n, x, dy, dx);
            return Outputs{{"y", t.down(y)}, {"dx", t.down(dx)}};
          }};
}

OpCase bias_case() {
  return {"bias", kTight, kTight, [](Tensors& t) {
            const int64_t rows = 4099, cols = 513;
            float* y = t.up(random_vec(rows * cols, 20));
            const float* bias = t.up(random_vec(cols, 21));
            t.k().bias_forward(rows, cols, bias, y);
            float* db = t.up(random_vec(cols, 22));
            t.k().bias_backward(rows, cols, y, db);
            return Outputs{{"y", t.down(y)}, {"dbias", t.down(db)}};
          }};
}

// ---- elementwise and reductions ----------------------------------------------------------------

OpCase elementwise_case() {
  return {"add_axpy_scale_fill_copy", kExact, kExact, [](Tensors& t) {
            const int64_t n = 100003;
            const float *a = t.up(random_vec(n, 23)), *b = t.up(random_vec(n, 24));
            float *y = t.zeros(n), *z = t.up(random_vec(n, 25)), *f = t.zeros(n), *c = t.zeros(n);
            t.k().add(n, a, b, y);
            t.k().axpy(n, -0.375f, a, z);
            t.k().scale(n, 1.5f, z);
            t.k().fill(n - 7, 2.25f, f);
            t.k().copy(n - 3, y, c);
            return Outputs{{"add", t.down(y)}, {"axpy_scale", t.down(z)}, {"fill", t.down(f)}, {"copy", t.down(c)}};
          }};
}

OpCase reduce_case() {
  return {"sum_sum_squares", kTight, kTight, [](Tensors& t) {
            const int64_t n = 1000003;
            const float* x = t.up(random_vec(n, 26));
            double* out = t.doubles(2);
            t.k().sum(n, x, out);
            t.k().sum_squares(n, x, out + 1);
            return Outputs{{"sums", t.down(out)}};
          }};
}

OpCase loss_case() {
  return {"losses_l1_mse_ce", kTight, kTight, [](Tensors& t) {
            const int64_t n = 8 * 512 * 3, rows = 8, cols = 700;
            const float *p = t.up(random_vec(n, 27)), *tg = t.up(random_vec(n, 28));
            const float* logits = t.up(random_vec(rows * cols, 29, 3.f));
            const int64_t* labels = t.up(std::vector<int64_t>{0, 699, 5, 5, 100, 2, 3, 650});
            double* out = t.doubles(3);
            t.k().l1_forward(n, p, tg, out);
            t.k().mse_forward(n, p, tg, out + 1);
            t.k().softmax_ce_forward(rows, cols, logits, labels, out + 2);
            float *d1 = t.up(random_vec(n, 30)), *d2 = t.up(random_vec(n, 31)), *dl = t.up(random_vec(rows * cols, 32));
            t.k().l1_backward(n, p, tg, 0.3, d1);
            t.k().mse_backward(n, p, tg, 0.7, d2);
            t.k().softmax_ce_backward(rows, cols, logits, labels, 1.1, dl);
            return Outputs{{"losses", t.down(out)}, {"dl1", t.down(d1)}, {"dmse", t.down(d2)}, {"dce", t.down(dl)}};
          }};
}

// ---- attention ---------------------------------------------------------------------------------

AttentionDims attn(int64_t batch, int64_t heads, int64_t nq, int64_t nk, int64_t dqk, int64_t dv, int64_t kv_chunk,
                   double dropout = 0, bool in_place = false) {
  AttentionDims d;
  d.batch = batch, d.heads = heads, d.nq = nq, d.nk = nk, d.dqk = dqk, d.dv = dv;
  d.scale = 1.0 / std::sqrt(double(dqk));
  d.kv_chunk = kv_chunk, d.kv_grad_in_place = in_place;
  if (dropout > 0) {
    d.dropout_p = dropout, d.dropout_key = 0xfeedbeef12345ull, d.dropout_stream = 3, d.dropout_example0 = 5;
  }
  return d;
}

// Forward, then backward from a random dO; outputs O, the saved state, dQ, dK, dV.
OpCase attention_case(const std::string& name, const AttentionDims& d) {
  return {name, kAttention, kBf16Attention, [=](Tensors& t) {
            const int64_t ldq = d.heads * d.dqk, ldv = d.heads * d.dv;
            float* q = t.up(random_vec(d.batch * d.nq * ldq, 33));
            float* k = t.up(random_vec(d.batch * d.nk * ldq, 34));
            float* v = t.up(random_vec(d.batch * d.nk * ldv, 35));
            float *o = t.zeros(d.batch * d.nq * ldv), *saved = t.zeros(d.saved_elems());
            t.k().attention_forward(d, q, k, v, o, saved);
            Outputs out{{"o", t.down(o)}, {"saved", t.down(saved)}};
            const float* dout = t.up(random_vec(d.batch * d.nq * ldv, 36));
            float* dq = t.up(random_vec(d.batch * d.nq * ldq, 37));
            float* dk = d.kv_grad_in_place ? k : t.up(random_vec(d.batch * d.nk * ldq, 38));
            float* dv = d.kv_grad_in_place ? v : t.up(random_vec(d.batch * d.nk * ldv, 39));
            t.k().attention_backward(d, q, k, v, o, saved, dout, dq, dk, dv);
            out.push_back({"dq", t.down(dq)});
            out.push_back({"dk", t.down(dk)});
            out.push_back({"dv", t.down(dv)});
            return out;
          }};
}

// ---- rows and the model ops --------------------------------------------------------------------

OpCase rows_case() {
  return {"gather_scatter_broadcast_rows", kExact, kExact, [](Tensors& t) {
            const int64_t batch = 3, rows = 41, cols = 19, row0 = 7, n = 23;
            const float* src = t.up(random_vec(batch * rows * cols, 40));
            float* g = t.zeros(batch * n * cols);
            t.k().gather_rows(batch, rows, cols, row0, n, src, g);
            float* s = t.up(random_vec(batch * rows * cols, 41));
            t.k().scatter_add_rows(batch, rows, cols, row0, n, g, s);
            float* b = t.zeros(batch * 37);
            t.k().broadcast_rows(batch, 37, src, b);
            return Outputs{{"gather", t.down(g)}, {"scatter_add", t.down(s)}, {"broadcast", t.down(b)}};
          }};
}

OpCase embed_case(const std::string& cfg_name, int64_t B) {
  return {"embed_" + cfg_name, kExact, kExact, [=](Tensors& t) {
            const ModelConfig cfg = preset(cfg_name);
            const EmbedDims d = embed_dims(cfg, B);
            const PositionTables pos(t.backend(), cfg);
            const int64_t C = d.channels, rows = B * d.tokens;
            RngStream rng(42, RngPurpose::kTest);
            std::vector<int64_t> labels(static_cast<size_t>(B));
            std::vector<uint8_t> mask(static_cast<size_t>(rows));
            for (auto& l : labels) l = int64_t(rng.below(uint64_t(d.num_labels)));
            for (auto& m : mask) m = rng.bernoulli(0.2) ? 1 : 0;
            const float* pads = t.up(random_vec(3 * C, 43));
            const float* masks = t.up(random_vec(3 * C, 44));
            EmbedArgs<float> a;
            a.video = t.up(random_vec(B * d.frames * d.height * d.width * 3, 45));
            a.audio = t.up(random_vec(B * d.audio_samples, 46));
            a.labels = t.up(labels), a.mask = t.up(mask);
            a.pos_audio = pos.audio.data(), a.pos_image = pos.image.data();
            a.pad_audio = pads, a.pad_image = pads + C, a.pad_label = pads + 2 * C;
            a.mask_audio = masks, a.mask_image = masks + C, a.mask_label = masks + 2 * C;
            float* x = t.zeros(rows * C);
            t.k().embed_forward(d, a, 0, rows, x);
            float* x_rows = t.zeros((rows - 5) * C);  // a block that starts inside the first example
            t.k().embed_forward(d, a, 2, rows - 5, x_rows);
            // Backward of rows [row0, rows): sums in double of row blocks, CPU order.
            const int64_t row0 = 3;
            const float* dx = t.up(random_vec((rows - row0) * C, 47));
            float* g = t.up(random_vec(6 * C, 48));
            const EmbedGrads<float> eg{g, g + C, g + 2 * C, g + 3 * C, g + 4 * C, g + 5 * C};
            t.k().embed_backward_rows(d, a.mask, row0, rows - row0, dx, eg);
            return Outputs{{"x", t.down(x)}, {"x_rows", t.down(x_rows)}, {"grads", t.down(g)}};
          }};
}

OpCase queries_case(const std::string& cfg_name, int64_t B) {
  return {"queries_targets_" + cfg_name, kExact, kExact, [=](Tensors& t) {
            const ModelConfig cfg = preset(cfg_name);
            const QueryTables tables(t.backend(), cfg);
            const int64_t na = cfg.num_queries_audio, ni = cfg.num_queries_image;
            const QueryDims d = query_dims(cfg, tables, B, na, ni);
            RngStream rng(50, RngPurpose::kTest);
            const int64_t* ap = t.up(rng.sample_without_replacement(cfg.audio_tokens(), na));
            const int64_t* ip = t.up(rng.sample_without_replacement(cfg.pixels(), ni));
            const float* pads = t.up(random_vec(3 * d.channels + d.label_channels, 51));
            QueryArgs<float> a;
            a.audio_points = ap, a.image_points = ip, a.audio_axis = tables.audio.data();
            for (int j = 0; j < 3; ++j) a.image_axes[j] = tables.image[j].data();
            a.pad_audio = pads, a.pad_image = pads + d.channels, a.pad_label = pads + 2 * d.channels;
            a.label_query = pads + 3 * d.channels;
            float* q = t.zeros(B * d.rows() * d.channels);
            t.k().queries_forward(d, a, q);
            const float* dq = t.up(random_vec(B * d.rows() * d.channels, 52));
            float* g = t.up(random_vec(3 * d.channels + d.label_channels, 53));
            t.k().queries_backward(d, dq, QueryGrads<float>{g, g + d.channels, g + 2 * d.channels, g + 3 * d.channels});
            TargetDims td;
            td.batch = B, td.pixels = cfg.pixels(), td.audio_samples = cfg.audio_samples();
            td.samples_per_patch = cfg.samples_per_patch, td.num_image = ni, td.num_audio = na;
            const float* video = t.up(random_vec(B * td.pixels * 3, 54));
            const float* audio = t.up(random_vec(B * td.audio_samples, 55));
            float *it = t.zeros(B * ni * 3), *at = t.zeros(B * na * td.samples_per_patch);
            t.k().gather_targets(td, ip, ap, video, audio, it, at);
            return Outputs{{"q", t.down(q)}, {"grads", t.down(g)}, {"image_targets", t.down(it)},
                           {"audio_targets", t.down(at)}};
          }};
}

// ---- optimizers --------------------------------------------------------------------------------

// Four tensors, chunked as the optimizer chunks them (2^14 elements), one not decayed.
OpCase optim_case(const std::string& which, double sumsq) {
  const std::string name = which + (std::isfinite(sumsq) ? "" : "_nonfinite_skipped");
  return {name, 1e-13, 1e-13, [=](Tensors& t) {
            const std::vector<int64_t> sizes{40000, 513, 16384, 70};
            std::vector<OptimChunk> chunks;
            int64_t off = 0;
            for (size_t i = 0; i < sizes.size(); ++i) {
              for (int64_t b = off; b < off + sizes[i]; b += 16384)
                chunks.push_back({b, std::min(off + sizes[i], b + 16384), int32_t(i), i == 1 ? 0 : 1});
              off += sizes[i];
            }
            const int64_t n = off;
            float* p = t.up(random_vec(n, 60));
            float* g = t.up(random_vec(n, 61));
            float* m = t.up(random_vec(n, 62, 0.1f));
            std::vector<float> vh = random_vec(n, 63, 0.1f);
            for (auto& x : vh) x *= x;
            float* v = t.up(vh);
            double* stats = t.up(std::vector<double>{sumsq, 0.0});
            double* work = t.doubles(int64_t(2 * chunks.size() + 2 * sizes.size()));
            OptimStep s;
            s.lr = 3e-3, s.momentum = 0.9, s.weight_decay = 0.01, s.t = 4;
            s.chunks = t.up(chunks), s.num_chunks = int64_t(chunks.size()), s.num_tensors = int64_t(sizes.size());
            s.grad_sumsq = stats, s.work = work;
            if (which == "clip") t.k().clip_by_global_norm(n, g, stats, 1.0, stats + 1);
            if (which == "sgd") t.k().sgd_update(s, p, g, m);
            if (which == "adamw") t.k().adamw_update(s, p, g, m, v);
            if (which == "lamb") t.k().lamb_update(s, p, g, m, v);
            Outputs out{{"params", t.down(p)}, {"grads", t.down(g)}, {"m", t.down(m)}, {"v", t.down(v)}};
            if (which == "clip") out.push_back({"clipped", t.down(stats)});
            return out;
          }};
}

std::vector<OpCase> all_cases() {
  using T = Transpose;
  std::vector<OpCase> c;
  for (T ta : {T::kNo, T::kYes})
    for (T tb : {T::kNo, T::kYes})
      c.push_back(gemm_case(std::string("gemm_") + (ta == T::kYes ? "T" : "N") + (tb == T::kYes ? "T" : "N"), ta, tb, 37,
                            29, 45, 3, 0.7f, 0.5f));
  c.push_back(gemm_case("gemm_k0_beta", T::kNo, T::kNo, 9, 11, 0, 0, 1.f, 0.5f));
  c.push_back(gemm_case("gemm_kinetics_kv_proj", T::kNo, T::kYes, 52097, 704, 704, 0, 1.f, 0.f));
  c.push_back(gemm_case("gemm_kinetics_kv_proj_dw", T::kYes, T::kNo, 704, 704, 52097, 0, 1.f, 1.f));
  c.push_back(gemm_case("gemm_kinetics_latent", T::kNo, T::kYes, 784, 512, 512, 0, 1.f, 0.f));
  c.push_back(gemm_batched_case());
  c.push_back(layer_norm_case("layer_norm_kinetics_input", 52097, 704));
  c.push_back(layer_norm_case("layer_norm_kinetics_latent", 784, 512));
  c.push_back(layer_norm_case("layer_norm_odd", 33, 67));
  c.push_back(softmax_case("softmax_kinetics_latent_heads", 8 * 784, 784));
  c.push_back(softmax_case("softmax_odd", 5, 1000));
  c.push_back(gelu_case(GeluKind::kErf));
  c.push_back(gelu_case(GeluKind::kTanh));
  c.push_back(bias_case());
  c.push_back(elementwise_case());
  c.push_back(reduce_case());
  c.push_back(loss_case());
  c.push_back(attention_case("attention_materialised", attn(2, 2, 13, 17, 8, 6, 0)));
  c.push_back(attention_case("attention_materialised_dropout", attn(2, 2, 13, 17, 8, 6, 0, 0.25)));
  c.push_back(attention_case("attention_streamed", attn(2, 2, 13, 301, 8, 6, 64)));
  c.push_back(attention_case("attention_streamed_dropout_in_place", attn(2, 2, 13, 301, 8, 6, 64, 0.25, true)));
  c.push_back(attention_case("attention_kinetics_latent_materialised", attn(1, 8, 784, 784, 64, 64, 0)));
  c.push_back(attention_case("attention_kinetics_latent_streamed", attn(2, 8, 784, 784, 64, 64, 512, 0.1)));
  c.push_back(attention_case("attention_kinetics_decoder", attn(1, 1, 1025, 784, 512, 512, 0)));
  // The encoder cross-attention as the model runs it: streamed, K/V gradients in place.
  c.push_back(attention_case("attention_kinetics_encoder", attn(1, 1, 784, 52097, 704, 704, 512, 0, true)));
  c.push_back(attention_case("attention_kinetics_encoder_b2_dropout", attn(2, 1, 784, 52097, 704, 704, 512, 0.1, true)));
  c.push_back(rows_case());
  c.push_back(embed_case("tiny", 3));
  c.push_back(embed_case("kinetics700", 1));
  c.push_back(queries_case("tiny", 2));
  c.push_back(queries_case("kinetics700", 2));
  for (const char* o : {"clip", "sgd", "adamw", "lamb"}) c.push_back(optim_case(o, 1234.5));
  c.push_back(optim_case("adamw", INFINITY));
  c.push_back(optim_case("clip", NAN));
  return c;
}

const OpCase& find_case(const std::string& name) {
  static const std::vector<OpCase> cases = all_cases();
  for (const OpCase& c : cases)
    if (c.name == name) return c;
  throw std::runtime_error("no op case " + name);
}

std::vector<std::string> case_names() {
  std::vector<std::string> n;
  for (const OpCase& c : all_cases()) n.push_back(c.name);
  return n;
}

class CudaOps : public ::testing::TestWithParam<std::tuple<std::string, Precision>> {};

TEST_P(CudaOps, MatchesCpu) {
  PCV_REQUIRE_GPU();
  const auto& [name, precision] = GetParam();
  const OpCase& c = find_case(name);
  BackendOptions o;
  o.precision = precision;
  const auto cuda = make_backend("cuda", o);
  Tensors on_cpu(cpu_backend()), on_gpu(*cuda);
  gpu_test::forget_random_vecs();  // this case's inputs, drawn once for both backends
  const Outputs ref = c.run(on_cpu), got = c.run(on_gpu);
  gpu_test::forget_random_vecs();
  ASSERT_EQ(ref.size(), got.size());
  const double tol = precision == Precision::kBf16 ? c.nmse_bf16 : c.nmse_fp32;
  for (size_t i = 0; i < ref.size(); ++i) {
    const gpu_test::Diff e = gpu_test::compare(got[i].second, ref[i].second);
    std::printf("[ op ] %-44s %s %-14s nmse %.3e max_abs %.3e (tolerance %.1e)\n", name.c_str(),
                precision_name(precision), ref[i].first.c_str(), e.nmse, e.max_abs, tol);
    ASSERT_FALSE(ref[i].second.empty()) << ref[i].first;
    EXPECT_LE(e.nmse, tol) << name << " output " << ref[i].first << " (" << precision_name(precision)
                           << "): max |gpu − cpu| = " << e.max_abs;
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, CudaOps,
                         ::testing::Combine(::testing::ValuesIn(case_names()),
                                            ::testing::Values(Precision::kFp32, Precision::kBf16)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + precision_name(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace perceiver
