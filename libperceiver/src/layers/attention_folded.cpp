#include "layers/attention_folded.h"

#include <algorithm>
#include <vector>

#include "layers/kv_rows.h"

namespace perceiver {
namespace {

using kv_rows::kv_input_rows;
using kv_rows::rows_of;
using kv_rows::stats_of;

// The kernel call over kv rows [r0, r0 + n) of every batch item (AttentionDims::key0).
AttentionDims key_range(AttentionDims d, int64_t r0, int64_t n) {
  d.key_count = d.nk;
  d.key0 = r0;
  d.nk = n;
  return d;
}

// Checks the block can run folded at this shape and gives the kernel dims of all its keys.
template <class T>
AttentionDims folded_dims(const AttentionBlockConfig& cfg, const AttentionBlockSaved<T>& s, const Context<T>& ctx) {
  const AttentionDims d =
      cfg.attention().dims(s.xq.shape[0], s.xq.shape[1], s.xkv.shape[1], ctx.mode, s.attn.dropout_stream);
  PCV_CHECK(d.streamed() && !d.dropout(), "attention block: folded K/V projections (fold_kv) need the streamed "
            "attention (kv_chunk > 0, or probabilities too large to materialise) and no attention dropout");
  return d;
}

}  // namespace

template <class T>
void folded_attention_forward(const AttentionBlockConfig& cfg, const AttentionBlockParams<T>& p, ConstView<T> q_norm,
                              AttentionBlockSaved<T>& s, Context<T>& ctx) {
  const AttentionConfig a = cfg.attention();
  const AttentionDims d = folded_dims(cfg, s, ctx);
  const int64_t batch = d.batch, nq = d.nq, nk = d.nk, c = cfg.kv_dim;
  linear_forward(a.query(), p.attn.query, q_norm, s.attn.q, ctx);
  // Q·W_k [B·Nq, kv_dim]: the queries that score the normalised kv rows directly.
  ctx.k.gemm(Transpose::kNo, Transpose::kNo, batch * nq, c, a.qk, T(1), s.attn.q.data, a.qk,
             p.attn.key.weight.data, c, T(0), s.attn.q_folded.data, c);
  for (int64_t r0 = 0; r0 < nk; r0 += cfg.kv_row_chunk) {
    const int64_t n = std::min(cfg.kv_row_chunk, nk - r0);
    ScratchScope<T> range(ctx.scratch);
    TensorView<T> x = ctx.scratch.take_for_write(Shape{batch * n, c});  // LN_kv of these rows, [B, n, C]
    for (int64_t b = 0; b < batch; ++b) {
      ScratchScope<T> item(ctx.scratch);
      const int64_t row = b * nk + r0;
      layer_norm_forward(cfg.ln_kv(), p.ln_kv, kv_input_rows(s, row, n, ctx), stats_of(s.ln_kv, row, n),
                         x.row_slice(b * n, n), ctx);
    }
    AttentionDims e = key_range(d, r0, n);
    e.continues = r0 > 0;
    ctx.k.attention_forward(e, s.attn.q_folded.data, x.data, x.data, s.attn.o_folded.data, s.attn.softmax.data);
  }
  linear_forward(a.value(), p.attn.value, ConstView<T>(s.attn.o_folded), s.attn.o, ctx);
  linear_forward(a.output(), p.attn.output, ConstView<T>(s.attn.o), s.x, ctx);
}

template <class T>
void folded_attention_backward(const AttentionBlockConfig& cfg, const AttentionBlockParams<T>& p,
                               const AttentionBlockSaved<T>& s, ConstView<T> q_norm, ConstView<T> dx,
                               const AttentionBlockGrads<T>& g, TensorView<T> dq_norm, TensorView<T> dxkv,
                               const RowSink<T>& sink, Context<T>& ctx) {
  const AttentionConfig a = cfg.attention();
  const AttentionDims d = folded_dims(cfg, s, ctx);
  const int64_t batch = d.batch, nq = d.nq, nk = d.nk, c = cfg.kv_dim;
  ScratchScope<T> scope(ctx.scratch);
  TensorView<T> d_o = ctx.scratch.take(s.attn.o.shape);
  linear_backward(a.output(), p.attn.output, ConstView<T>(s.attn.o), dx, g.attn.output, d_o, ctx);
  TensorView<T> d_o_folded = ctx.scratch.take(s.attn.o_folded.shape);
  linear_backward(a.value(), p.attn.value, ConstView<T>(s.attn.o_folded), ConstView<T>(d_o), g.attn.value, d_o_folded,
                  ctx);
  TensorView<T> d_q_folded = ctx.scratch.take(s.attn.q_folded.shape);  // the kernel adds each range's part
  for (int64_t r0 = 0; r0 < nk; r0 += cfg.kv_row_chunk) {
    const int64_t n = std::min(cfg.kv_row_chunk, nk - r0);
    ScratchScope<T> range(ctx.scratch);
    std::vector<ConstView<T>> in(size_t(batch), ConstView<T>{});  // the kv input rows, for LN_kv's backward
    TensorView<T> x = ctx.scratch.take_for_write(Shape{batch * n, c});
    TensorView<T> d_x = ctx.scratch.take(Shape{batch * n, c});  // as keys and as values: one sum
    for (int64_t b = 0; b < batch; ++b) {
      in[size_t(b)] = kv_input_rows(s, b * nk + r0, n, ctx);
      layer_norm_again(cfg.ln_kv(), p.ln_kv, in[size_t(b)], x.row_slice(b * n, n), ctx);
    }
    ctx.k.attention_backward(key_range(d, r0, n), s.attn.q_folded.data, x.data, x.data, s.attn.o_folded.data,
                             s.attn.softmax.data, d_o_folded.data, d_q_folded.data, d_x.data, d_x.data);
    for (int64_t b = 0; b < batch; ++b) {
      ScratchScope<T> item(ctx.scratch);
      const int64_t row = b * nk + r0;
      TensorView<T> d_in = dxkv.empty() ? ctx.scratch.take(Shape{n, c}) : rows_of(dxkv, row, n);
      layer_norm_backward(cfg.ln_kv(), p.ln_kv, in[size_t(b)], stats_of(s.ln_kv, row, n),
                          ConstView<T>(d_x.row_slice(b * n, n)), g.ln_kv, d_in, ctx);
      if (sink) sink(row, ConstView<T>(d_in));
    }
  }
  // Q·W_k: dQ = d(Q·W_k)·W_kᵀ, dW_k += Qᵀ·d(Q·W_k). b_k has no gradient (see fold_kv).
  TensorView<T> d_q = ctx.scratch.take_for_write(s.attn.q.shape);
  ctx.k.gemm(Transpose::kNo, Transpose::kYes, batch * nq, a.qk, c, T(1), d_q_folded.data, c, p.attn.key.weight.data, c,
             T(0), d_q.data, a.qk);
  ctx.k.gemm(Transpose::kYes, Transpose::kNo, a.qk, c, batch * nq, T(1), s.attn.q.data, a.qk, d_q_folded.data, c, T(1),
             g.attn.key.weight.data, c);
  linear_backward(a.query(), p.attn.query, q_norm, ConstView<T>(d_q), g.attn.query, dq_norm, ctx);
}

#define PCV_INSTANTIATE(T)                                                                                        \
  template void folded_attention_forward<T>(const AttentionBlockConfig&, const AttentionBlockParams<T>&,          \
                                            ConstView<T>, AttentionBlockSaved<T>&, Context<T>&);                 \
  template void folded_attention_backward<T>(const AttentionBlockConfig&, const AttentionBlockParams<T>&,         \
                                             const AttentionBlockSaved<T>&, ConstView<T>, ConstView<T>,          \
                                             const AttentionBlockGrads<T>&, TensorView<T>, TensorView<T>,        \
                                             const RowSink<T>&, Context<T>&);
PCV_INSTANTIATE(float)
PCV_INSTANTIATE(double)
#undef PCV_INSTANTIATE

}  // namespace perceiver
