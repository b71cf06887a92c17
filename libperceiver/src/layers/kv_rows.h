// Rows of a chunked cross-attention's kv side (attention_block.h, kv_row_chunk): views of row
// ranges and the kv input a range of rows at a time. Internal to the attention block's files.
#pragma once

#include "layers/attention_block.h"

namespace perceiver::kv_rows {

// Rows [r0, r0+n) of a [B, N, C] tensor seen as [B·N, C].
template <class T>
TensorView<T> rows_of(TensorView<T> t, int64_t r0, int64_t n) {
  return t.reshaped(Shape{t.rows(), t.cols()}).row_slice(r0, n);
}
template <class T>
ConstView<T> rows_of(ConstView<T> t, int64_t r0, int64_t n) {
  return {t.data + r0 * t.cols(), Shape{n, t.cols()}};
}
template <class T>
LayerNormSaved<T> stats_of(const LayerNormSaved<T>& s, int64_t r0, int64_t n) {
  return {{s.mean.data + r0, Shape{n}}, {s.rstd.data + r0, Shape{n}}};
}

// Rows [r0, r0+n) of the kv input: a view of the caller's tensor, or made by the block's row
// source into scratch that lives until the caller's ScratchScope ends.
template <class T>
ConstView<T> kv_input_rows(const AttentionBlockSaved<T>& s, int64_t r0, int64_t n, Context<T>& ctx) {
  if (!s.xkv_rows) return rows_of(s.xkv, r0, n);
  TensorView<T> rows = ctx.scratch.take_for_write(Shape{n, s.xkv.cols()});
  s.xkv_rows.rows(r0, rows);
  return rows;
}

// LN_kv (config ln, parameters p) of rows [r0, r0+n) of the kv input into y, their mean and rstd
// into stats: in one pass where the row source can (RowSource::normalised), else made (or viewed)
// and then normalised. y16 (optional; Kernels::stores_bf16): the rows rounded to bf16 as well, and
// y may then have its shape only (no data).
template <class T>
void normalised_kv_rows(const LayerNormConfig& ln, const LayerNormParams<T>& p, const AttentionBlockSaved<T>& s,
                        int64_t r0, int64_t n, const LayerNormSaved<T>& stats, TensorView<T> y, Context<T>& ctx,
                        uint16_t* y16 = nullptr) {
  if (s.xkv_rows.normalised) return s.xkv_rows.normalised(r0, p, ln.eps, y, y16, stats.mean.data, stats.rstd.data);
  ScratchScope<T> scope(ctx.scratch);
  if (!y.data) y = ctx.scratch.take_for_write(y.shape);
  layer_norm_forward(ln, p, kv_input_rows(s, r0, n, ctx), stats, y, ctx);
  if (y16) ctx.k.store_bf16(y.rows(), y.cols(), y.data, y.cols(), y16, y.cols());
}

}  // namespace perceiver::kv_rows
