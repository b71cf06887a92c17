// Gradient checks of every layer against central finite differences in double, for every input
// and every parameter (issue: relative error ≤ 1e-6).
#include <gtest/gtest.h>

#include "grad/harness.h"
#include "layers/attention_block.h"

namespace perceiver::testing {
namespace {

TEST(LayerGrad, Linear) {
  LinearConfig cfg{5, 4};
  Harness h(linear_param_specs(cfg));
  auto x = h.random({2, 3, 5}, 11), r = h.random({2, 3, 4}, 12);
  auto y = h.tensor({2, 3, 4}), dx = h.tensor(x.shape);
  auto p = LinearParams<double>::bind(h.binder());
  auto loss = [&] {
    linear_forward(cfg, p, ConstView<double>(x), y, h.ctx());
    return dot(y, r);
  };
  loss();
  linear_backward(cfg, p, ConstView<double>(x), ConstView<double>(r), LinearGrads<double>::bind(h.binder()), dx, h.ctx());
  auto tensors = h.param_tensors();
  tensors.push_back({"x", x, dx});
  check_gradients(loss, tensors);
}

TEST(LayerGrad, LayerNorm) {
  LayerNormConfig cfg{7};
  Harness h(layer_norm_param_specs(cfg));
  auto x = h.random({3, 7}, 21, 2.0), r = h.random({3, 7}, 22);
  auto y = h.tensor(x.shape), dx = h.tensor(x.shape), mean = h.tensor({3}), rstd = h.tensor({3});
  LayerNormSaved<double> saved{mean, rstd};
  auto p = LayerNormParams<double>::bind(h.binder());
  auto loss = [&] {
    layer_norm_forward(cfg, p, ConstView<double>(x), saved, y, h.ctx());
    return dot(y, r);
  };
  loss();
  layer_norm_backward(cfg, p, ConstView<double>(x), saved, ConstView<double>(r),
                      LayerNormGrads<double>::bind(h.binder()), dx, h.ctx());
  auto tensors = h.param_tensors();
  tensors.push_back({"x", x, dx});
  check_gradients(loss, tensors);
}

class MlpGrad : public ::testing::TestWithParam<GeluKind> {};

TEST_P(MlpGrad, AllInputsAndParams) {
  MlpConfig cfg{6, 2, GetParam()};
  Harness h(mlp_param_specs(cfg));
  auto x = h.random({2, 4, 6}, 31), r = h.random({2, 4, 6}, 32);
  auto y = h.tensor(x.shape), dx = h.tensor(x.shape);
  MlpSaved<double> saved{h.tensor({8, 12})};
  auto p = MlpParams<double>::bind(h.binder());
  auto loss = [&] {
    mlp_forward(cfg, p, ConstView<double>(x), saved, y, h.ctx());
    return dot(y, r);
  };
  loss();
  mlp_backward(cfg, p, ConstView<double>(x), saved, ConstView<double>(r), MlpGrads<double>::bind(h.binder()), dx, h.ctx());
  auto tensors = h.param_tensors();
  tensors.push_back({"x", x, dx});
  check_gradients(loss, tensors);
}

INSTANTIATE_TEST_SUITE_P(Gelu, MlpGrad, ::testing::Values(GeluKind::kErf, GeluKind::kTanh),
                         [](const auto& info) { return info.param == GeluKind::kErf ? "erf" : "tanh"; });

// Attention blocks: cross with and without query residual, 1 and several heads, explicit
// qk/v widths, self-attention, materialised and streamed kernels, batch > 1.
struct BlockCase {
  std::string name;
  AttentionBlockConfig cfg;
  int64_t batch, nq, nk;
  friend void PrintTo(const BlockCase& c, std::ostream* os) { *os << c.name; }
};

class BlockGrad : public ::testing::TestWithParam<BlockCase> {};

TEST_P(BlockGrad, AllInputsAndParams) {
  const BlockCase& c = GetParam();
  const AttentionBlockConfig& cfg = c.cfg;
  cfg.validate();
  Harness h(attention_block_param_specs(cfg));
  const int64_t nk = cfg.cross ? c.nk : c.nq;
  auto xq = h.random({c.batch, c.nq, cfg.q_dim}, 41), dxq = h.tensor(xq.shape);
  auto xkv = cfg.cross ? h.random({c.batch, nk, cfg.kv_dim}, 42) : xq;
  auto dxkv = cfg.cross ? h.tensor(xkv.shape) : TensorView<double>{};
  auto r = h.random({c.batch, c.nq, cfg.out_dim()}, 43), y = h.tensor(r.shape);
  ArenaPlan plan;
  plan.add(attention_block_saved_specs(cfg, c.batch, c.nq, nk));
  PlannedArena<double> acts(plan);
  auto saved = AttentionBlockSaved<double>::bind(cfg, {acts, ""});
  saved.attn.dropout_stream = 12345;
  if (cfg.attention_dropout > 0) h.ctx().mode = {true, 9, 4, 3};  // train mode: a fixed mask
  auto p = AttentionBlockParams<double>::bind(cfg, h.binder());
  auto loss = [&] {
    attention_block_forward(cfg, p, ConstView<double>(xq), ConstView<double>(xkv), saved, y, h.ctx());
    return dot(y, r);
  };
  loss();
  attention_block_backward(cfg, p, saved, ConstView<double>(r), AttentionBlockGrads<double>::bind(cfg, h.binder()),
                           dxq, dxkv, h.ctx());
  auto tensors = h.param_tensors();
  tensors.push_back({"xq", xq, dxq});
  if (cfg.cross) tensors.push_back({"xkv", xkv, dxkv});
  check_gradients(loss, tensors);
}

AttentionBlockConfig cross(int64_t q, int64_t kv, int64_t heads, bool residual, int64_t chunk = 0) {
  AttentionBlockConfig c;
  c.q_dim = q;
  c.kv_dim = kv;
  c.heads = heads;
  c.query_residual = residual;
  c.kv_chunk = chunk;
  return c;
}

std::vector<BlockCase> block_cases() {
  std::vector<BlockCase> v;
  v.push_back({"cross_residual_1head", cross(6, 5, 1, true), 2, 3, 7});
  v.push_back({"cross_no_residual_1head", cross(6, 5, 1, false), 2, 3, 7});
  auto heads = cross(8, 6, 2, true);
  heads.qk_channels = 4;
  heads.v_channels = 6;
  heads.widening = 2;
  v.push_back({"cross_2heads_explicit_widths", heads, 2, 3, 5});
  v.push_back({"cross_streamed_uneven_chunks", cross(6, 5, 1, true, 3), 2, 4, 11});
  auto chunked = cross(6, 5, 1, true, 3);
  chunked.kv_row_chunk = 4;  // 2×11 kv rows in chunks of 4: LN_kv recomputed, dxkv made per chunk
  v.push_back({"cross_chunked_kv_rows_streamed", chunked, 2, 4, 11});
  // The K/V projections folded into the queries and the output (fold_kv): the key bias then gets
  // no gradient, as the finite differences say it has none.
  auto folded = chunked;
  folded.fold_kv = true;
  v.push_back({"cross_chunked_folded_kv", folded, 2, 4, 11});
  auto folded_widths = folded;
  folded_widths.qk_channels = 4;
  folded_widths.v_channels = 7;
  folded_widths.query_residual = false;
  folded_widths.keep_scores = true;  // the backward reads P from the scores of each key range
  v.push_back({"cross_chunked_folded_kv_explicit_widths", folded_widths, 3, 5, 9});
  auto self = cross(8, 0, 4, true);
  self.cross = false;
  self.gelu = GeluKind::kTanh;
  v.push_back({"self_4heads_tanh", self, 2, 5, 5});
  auto self_streamed = self;
  self_streamed.kv_chunk = 2;
  v.push_back({"self_4heads_streamed", self_streamed, 2, 5, 5});
  auto q_shape = cross(6, 5, 2, false);
  q_shape.qk_from_q = true;
  v.push_back({"cross_shape_q_2heads", q_shape, 1, 3, 4});
  // Attention dropout 0.3 (train mode), materialised, streamed and with chunked kv rows.
  auto drop = heads;
  drop.attention_dropout = 0.3;
  v.push_back({"cross_2heads_dropout", drop, 2, 3, 5});
  auto drop_chunked = chunked;
  drop_chunked.attention_dropout = 0.3;
  v.push_back({"cross_chunked_kv_rows_streamed_dropout", drop_chunked, 2, 4, 11});
  auto drop_self = self_streamed;
  drop_self.attention_dropout = 0.3;
  v.push_back({"self_4heads_streamed_dropout", drop_self, 2, 5, 5});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Blocks, BlockGrad, ::testing::ValuesIn(block_cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace perceiver::testing
