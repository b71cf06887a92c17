// Gradient checks of the backend ops that carry a backward slot, in double on the CPU backend.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <functional>

#include "grad/harness.h"

namespace perceiver::testing {
namespace {

Kernels<double> ops() { return cpu_backend().kernels<double>(); }

// Softmax over [4, 6] with its analytic input gradient; `tamper` edits that gradient first.
void check_softmax(const std::function<void(TensorView<double>)>& tamper = {}) {
  Harness h({});
  auto x = h.random({4, 6}, 1, 2.0), r = h.random({4, 6}, 2), y = h.tensor(x.shape), dx = h.tensor(x.shape);
  auto loss = [&] {
    ops().softmax_forward(4, 6, x.data, y.data);
    return dot(y, r);
  };
  loss();
  ops().softmax_backward(4, 6, y.data, r.data, dx.data);
  if (tamper) tamper(dx);
  check_gradients(loss, {{"x", x, dx}});
}

TEST(OpGrad, Softmax) { check_softmax(); }

class GeluGrad : public ::testing::TestWithParam<GeluKind> {};
TEST_P(GeluGrad, Input) {
  Harness h({});
  auto x = h.random({50}, 3, 2.0), r = h.random({50}, 4), y = h.tensor(x.shape), dx = h.tensor(x.shape);
  auto loss = [&] {
    ops().gelu_forward(GetParam(), 50, x.data, y.data);
    return dot(y, r);
  };
  loss();
  ops().gelu_backward(GetParam(), 50, x.data, r.data, dx.data);
  check_gradients(loss, {{"x", x, dx}}, {.max_elems = 50});
}
INSTANTIATE_TEST_SUITE_P(Kinds, GeluGrad, ::testing::Values(GeluKind::kErf, GeluKind::kTanh));

TEST(OpGrad, BiasAndLayerNormParamsOnly) {
  Harness h({});
  auto bias = h.random({5}, 5), y0 = h.random({3, 5}, 6), r = h.random({3, 5}, 7);
  auto y = h.tensor(y0.shape), db = h.tensor(bias.shape);
  auto loss = [&] {
    std::copy(y0.data, y0.data + y0.numel(), y.data);
    ops().bias_forward(3, 5, bias.data, y.data);
    return dot(y, r);
  };
  ops().bias_backward(3, 5, r.data, db.data);
  check_gradients(loss, {{"bias", bias, db}});
}

// L1 away from its kink: targets are offset so |pred − target| > 0 stays far from zero.
TEST(OpGrad, L1AndMse) {
  Harness h({});
  auto pred = h.random({40}, 8), target = h.random({40}, 9), dpred = h.tensor({40});
  for (int64_t i = 0; i < 40; ++i) target.data[i] = pred.data[i] + (i % 2 ? 0.5 : -0.5) + 0.1 * target.data[i];
  const double w = 0.03;
  auto l1 = [&] {
    double v = 0;
    ops().l1_forward(40, pred.data, target.data, &v);
    return w * v;
  };
  ops().l1_backward(40, pred.data, target.data, w, dpred.data);
  check_gradients(l1, {{"pred/l1", pred, dpred}}, {.max_elems = 40});
  zero(dpred);
  auto mse = [&] {
    double v = 0;
    ops().mse_forward(40, pred.data, target.data, &v);
    return w * v;
  };
  ops().mse_backward(40, pred.data, target.data, w, dpred.data);
  check_gradients(mse, {{"pred/mse", pred, dpred}}, {.max_elems = 40});
}

TEST(OpGrad, SoftmaxCrossEntropy) {
  Harness h({});
  auto logits = h.random({3, 7}, 10, 2.0), dlogits = h.tensor(logits.shape);
  const int64_t labels[3] = {0, 6, 3};
  auto loss = [&] {
    double v = 0;
    ops().softmax_ce_forward(3, 7, logits.data, labels, &v);
    return 1e-4 * v;
  };
  ops().softmax_ce_backward(3, 7, logits.data, labels, 1e-4, dlogits.data);
  // Loss is scaled by 1e-4, so the absolute floor scales too.
  check_gradients(loss, {{"logits", logits, dlogits}}, {.h = 1e-4, .floor = 1e-8});
}

TEST(OpGrad, CrossEntropyRejectsBadLabel) {
  const double logits[4] = {0, 1, 2, 3};
  const int64_t bad[1] = {4};
  double out = 0;
  EXPECT_THROW(ops().softmax_ce_forward(1, 4, logits, bad, &out), Error);
}

// The fused attention core, materialised and streamed, for q, k and v; with attention dropout
// the mask is fixed by the key, so the function stays deterministic and differentiable.
struct AttnCase {
  std::string name;
  AttentionDims dims;
  friend void PrintTo(const AttnCase& c, std::ostream* os) { *os << c.name; }
};
class AttentionGrad : public ::testing::TestWithParam<AttnCase> {};

TEST_P(AttentionGrad, QueryKeyValue) {
  AttentionDims d = GetParam().dims;
  d.scale = 1.0 / std::sqrt(double(d.dqk));
  Harness h({});
  auto q = h.random({d.batch, d.nq, d.heads * d.dqk}, 11), k = h.random({d.batch, d.nk, d.heads * d.dqk}, 12);
  auto v = h.random({d.batch, d.nk, d.heads * d.dv}, 13), r = h.random({d.batch, d.nq, d.heads * d.dv}, 14);
  auto o = h.tensor(r.shape), saved = h.tensor({d.saved_elems()});
  auto dq = h.tensor(q.shape), dk = h.tensor(k.shape), dv = h.tensor(v.shape);
  auto loss = [&] {
    ops().attention_forward(d, q.data, k.data, v.data, o.data, saved.data);
    return dot(o, r);
  };
  loss();
  ops().attention_backward(d, q.data, k.data, v.data, o.data, saved.data, r.data, dq.data, dk.data, dv.data);
  check_gradients(loss, {{"q", q, dq}, {"k", k, dk}, {"v", v, dv}});
}

std::vector<AttnCase> attention_cases() {
  auto dims = [](int64_t b, int64_t h, int64_t nq, int64_t nk, int64_t dqk, int64_t dv, int64_t chunk) {
    AttentionDims d;
    d.batch = b, d.heads = h, d.nq = nq, d.nk = nk, d.dqk = dqk, d.dv = dv, d.kv_chunk = chunk;
    return d;
  };
  auto dropout = [](AttentionDims d) {
    d.dropout_p = 0.3, d.dropout_key = 0x1234567890abcdefull, d.dropout_stream = 77, d.dropout_example0 = 5;
    return d;
  };
  return {{"materialised_1head", dims(2, 1, 3, 5, 4, 3, 0)},
          {"materialised_3heads", dims(2, 3, 4, 6, 2, 3, 0)},
          {"streamed_1head_uneven", dims(2, 1, 3, 11, 4, 3, 4)},
          {"streamed_2heads_many_chunks", dims(1, 2, 70, 37, 3, 2, 3)},
          {"materialised_3heads_dropout", dropout(dims(2, 3, 4, 6, 2, 3, 0))},
          {"materialised_4pairs_dropout", dropout(dims(2, 2, 5, 9, 2, 3, 0))},  // pairs in parallel
          {"streamed_1head_uneven_dropout", dropout(dims(2, 1, 3, 11, 4, 3, 4))},
          {"streamed_2heads_many_chunks_dropout", dropout(dims(1, 2, 70, 37, 3, 2, 3))}};
}

INSTANTIATE_TEST_SUITE_P(Cases, AttentionGrad, ::testing::ValuesIn(attention_cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace perceiver::testing

namespace perceiver::testing {
namespace {

// The checker itself must be able to fail: a gradient off by 1e-4 relative is caught.
TEST(GradCheck, DetectsAWrongGradient) {
  EXPECT_NONFATAL_FAILURE(check_softmax([](TensorView<double> dx) { dx.data[5] *= 1.0001; }), "x[5]");
}

}  // namespace
}  // namespace perceiver::testing
