#include "layers/attention.h"

#include <cmath>

namespace perceiver {

void AttentionConfig::validate() const {
  PCV_CHECK(heads > 0, "attention heads must be positive, got ", heads);
  PCV_CHECK(qk % heads == 0, "qk_channels ", qk, " is not divisible by the number of heads ", heads);
  PCV_CHECK(v % heads == 0, "v_channels ", v, " is not divisible by the number of heads ", heads);
  PCV_CHECK(dropout >= 0 && dropout < 1, "attention dropout must be in [0, 1), got ", dropout);
  PCV_CHECK(!fold_kv || heads == 1, "folded K/V projections (fold_kv) need one head, got ", heads);
  PCV_CHECK(!fold_kv || save_kv, "folded K/V projections (fold_kv) replace streaming K/V (save_kv false): set one");
}

AttentionDims AttentionConfig::dims(int64_t batch, int64_t nq, int64_t nk) const {
  AttentionDims d;
  d.batch = batch;
  d.heads = heads;
  d.nq = nq;
  d.nk = nk;
  d.dqk = qk / heads;
  d.dv = v / heads;
  d.scale = 1.0 / std::sqrt(double(d.dqk));
  if (kv_chunk >= 0) {
    d.kv_chunk = kv_chunk;
  } else {
    const int64_t p_bytes = batch * heads * nq * nk * int64_t(sizeof(float));
    d.kv_chunk = p_bytes > kMaterialiseLimitBytes ? kDefaultKvChunk : 0;
  }
  d.kv_grad_in_place = kv_grad_in_place && d.streamed();
  d.keep_scores = keep_scores && d.streamed();
  d.kv_bf16 = kv_bf16 && d.kv_grad_in_place && qk % 2 == 0 && v % 2 == 0;  // whole rows of bf16 pairs
  if (fold_kv) {  // keys and values are the kv input itself; the scale stays that of the qk width
    d.dqk = d.dv = kv_dim;
    d.kv_grad_in_place = d.kv_bf16 = false;
  }
  return d;
}

AttentionDims AttentionConfig::dims(int64_t batch, int64_t nq, int64_t nk, const TrainingMode& mode,
                                    uint32_t stream) const {
  AttentionDims d = dims(batch, nq, nk);
  if (mode.training && dropout > 0) {
    d.dropout_p = dropout;
    d.dropout_key = mode.dropout_key();
    d.dropout_stream = stream;
    d.dropout_example0 = mode.first_example;
  }
  return d;
}

std::vector<ParamSpec> attention_param_specs(const AttentionConfig& cfg) {
  std::vector<ParamSpec> specs;
  for (auto& s : prefixed(linear_param_specs(cfg.query()), "self.query.")) specs.push_back(s);
  for (auto& s : prefixed(linear_param_specs(cfg.key()), "self.key.")) specs.push_back(s);
  for (auto& s : prefixed(linear_param_specs(cfg.value()), "self.value.")) specs.push_back(s);
  for (auto& s : prefixed(linear_param_specs(cfg.output()), "output.dense.")) specs.push_back(s);
  return specs;
}

std::vector<TensorSpec> attention_saved_specs(const AttentionConfig& cfg, int64_t batch, int64_t nq,
                                              int64_t nk) {
  const AttentionDims d = cfg.dims(batch, nq, nk);
  const int64_t per_value = d.kv_bf16 ? 2 : 1;  // bf16 values per stored element of K and V
  const int64_t kv_rows = cfg.save_kv && !cfg.fold_kv ? nk : 0, folded_rows = cfg.fold_kv ? nq : 0;
  return {{"q", Shape{batch, nq, cfg.qk}},
          {"k", Shape{batch, kv_rows, cfg.qk / per_value}},
          {"v", Shape{batch, kv_rows, cfg.v / per_value}},
          {"o", Shape{batch, nq, cfg.v}},
          {"softmax", Shape{d.saved_elems()}},
          {"q_folded", Shape{batch, folded_rows, cfg.kv_dim}},
          {"o_folded", Shape{batch, folded_rows, cfg.kv_dim}}};
}

template <class T>
void attention_forward(const AttentionConfig& cfg, const AttentionParams<T>& p, ConstView<T> xq,
                       ConstView<T> xkv, const AttentionSaved<T>& s, TensorView<T> y,
                       Context<T>& ctx) {
  const int64_t batch = xq.shape[0], nq = xq.shape[1], nk = xkv.shape[1];
  PCV_ASSERT(xkv.shape[0] == batch && xq.cols() == cfg.q_dim && xkv.cols() == cfg.kv_dim);
  PCV_ASSERT(s.softmax.numel() == cfg.dims(batch, nq, nk).saved_elems(), "attention saved state planned for another shape");
  linear_forward(cfg.key(), p.key, xkv, s.k, ctx);
  linear_forward(cfg.value(), p.value, xkv, s.v, ctx);
  attention_forward_from_kv(cfg, p, xq, s, y, ctx);
}

template <class T>
void attention_forward_from_kv(const AttentionConfig& cfg, const AttentionParams<T>& p, ConstView<T> xq,
                               const AttentionSaved<T>& s, TensorView<T> y, Context<T>& ctx) {
  const int64_t batch = xq.shape[0], nq = xq.shape[1], nk = s.k.shape[1];
  linear_forward(cfg.query(), p.query, xq, s.q, ctx);
  ctx.k.attention_forward(cfg.dims(batch, nq, nk, ctx.mode, s.dropout_stream), s.q.data, s.k.data, s.v.data,
                          s.o.data, s.softmax.data);
  linear_forward(cfg.output(), p.output, ConstView<T>(s.o), y, ctx);
}

template <class T>
void attention_backward_core(const AttentionConfig& cfg, const AttentionParams<T>& p, ConstView<T> xq,
                             const AttentionSaved<T>& s, ConstView<T> dy, const AttentionGrads<T>& g,
                             TensorView<T> dxq, TensorView<T> d_k, TensorView<T> d_v, Context<T>& ctx) {
  const int64_t batch = xq.shape[0], nq = xq.shape[1], nk = s.k.shape[1];
  const AttentionDims d = cfg.dims(batch, nq, nk, ctx.mode, s.dropout_stream);
  ScratchScope<T> scope(ctx.scratch);
  TensorView<T> d_o = ctx.scratch.take(s.o.shape);  // [B,Nq,v]
  TensorView<T> d_q = ctx.scratch.take(s.q.shape);  // [B,Nq,qk]
  linear_backward(cfg.output(), p.output, ConstView<T>(s.o), dy, g.output, d_o, ctx);
  ctx.k.attention_backward(d, s.q.data, s.k.data, s.v.data, s.o.data, s.softmax.data, d_o.data, d_q.data,
                           d_k.data, d_v.data);
  linear_backward(cfg.query(), p.query, xq, ConstView<T>(d_q), g.query, dxq, ctx);
}

template <class T>
void attention_backward(const AttentionConfig& cfg, const AttentionParams<T>& p, ConstView<T> xq,
                        ConstView<T> xkv, const AttentionSaved<T>& s, ConstView<T> dy,
                        const AttentionGrads<T>& g, TensorView<T> dxq, TensorView<T> dxkv,
                        Context<T>& ctx) {
  ScratchScope<T> scope(ctx.scratch);
  TensorView<T> d_k = ctx.scratch.take(s.k.shape);  // [B,Nk,qk]
  TensorView<T> d_v = ctx.scratch.take(s.v.shape);  // [B,Nk,v]
  attention_backward_core(cfg, p, xq, s, dy, g, dxq, d_k, d_v, ctx);
  linear_backward(cfg.key(), p.key, xkv, ConstView<T>(d_k), g.key, dxkv, ctx);
  linear_backward(cfg.value(), p.value, xkv, ConstView<T>(d_v), g.value, dxkv, ctx);
}

#define PCV_INSTANTIATE(T)                                                                         \
  template void attention_forward<T>(const AttentionConfig&, const AttentionParams<T>&,            \
                                     ConstView<T>, ConstView<T>, const AttentionSaved<T>&,         \
                                     TensorView<T>, Context<T>&);                                  \
  template void attention_forward_from_kv<T>(const AttentionConfig&, const AttentionParams<T>&,      \
                                             ConstView<T>, const AttentionSaved<T>&, TensorView<T>,   \
                                             Context<T>&);                                           \
  template void attention_backward_core<T>(const AttentionConfig&, const AttentionParams<T>&,      \
                                           ConstView<T>, const AttentionSaved<T>&, ConstView<T>,  \
                                           const AttentionGrads<T>&, TensorView<T>, TensorView<T>, \
                                           TensorView<T>, Context<T>&);                           \
  template void attention_backward<T>(const AttentionConfig&, const AttentionParams<T>&,           \
                                      ConstView<T>, ConstView<T>, const AttentionSaved<T>&,        \
                                      ConstView<T>, const AttentionGrads<T>&, TensorView<T>,       \
                                      TensorView<T>, Context<T>&);
PCV_INSTANTIATE(float)
PCV_INSTANTIATE(double)
#undef PCV_INSTANTIATE

}  // namespace perceiver
