#include "layers/attention_folded.h"

#include <algorithm>
#include <functional>
#include <vector>

#include "layers/bf16_scratch.h"
#include "layers/kv_rows.h"

namespace perceiver {
namespace {

using kv_rows::kv_input_rows;
using kv_rows::normalised_kv_rows;
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

// With Kernels::folds_kv_norm, LN_kv's gain γ and shift β go the same way as the projections:
// with X = X̂·diag(γ) + β (X̂ the normalised rows), (Q·W_k)·Xᵀ = (Q·W_k ⊙ γ)·X̂ᵀ + a term per query,
// and P·X = (P·X̂) ⊙ γ + β. The kernel then runs on queries Q·W_k ⊙ γ with X̂ as keys and values,
// so its key gradient is LN_kv's dX̂, whose reductions attention_backward_key_sums gives without
// forming it (see folded_attention_backward). LN_kv's parameter gradients come from the Nq rows:
// dγ = Σ_i dQg_i ⊙ (Q·W_k)_i + dOf_i ⊙ (P·X̂)_i, dβ = Σ_i dOf_i.
template <class T>
struct NormFold {
  bool on = false;
  ConstView<T> gain, shift;  // LN_kv's own parameters (on), or ones and zeros: X̂ without them
};

// LN_kv as the kernel's keys: X̂ where the fold is on, else LN_kv itself.
template <class T>
NormFold<T> norm_fold(const AttentionBlockConfig& cfg, const AttentionBlockParams<T>& p, Context<T>& ctx) {
  NormFold<T> f;
  f.on = ctx.k.folds_kv_norm();
  if (!f.on) {
    f.gain = p.ln_kv.weight, f.shift = p.ln_kv.bias;
    return f;
  }
  TensorView<T> ones = ctx.scratch.take_for_write(Shape{cfg.kv_dim});
  ctx.k.fill(cfg.kv_dim, T(1), ones.data);
  f.gain = ConstView<T>(ones);
  f.shift = ConstView<T>(ctx.scratch.take(Shape{cfg.kv_dim}));
  return f;
}
template <class T>
LayerNormParams<T> key_norm(const NormFold<T>& f) {
  return {f.gain, f.shift};
}

// The kernel's queries Q·W_k ⊙ γ (fold on) into scratch, else Q·W_k itself.
template <class T>
ConstView<T> kernel_queries(const NormFold<T>& f, const AttentionBlockParams<T>& p, ConstView<T> q_folded,
                            Context<T>& ctx) {
  if (!f.on) return q_folded;
  TensorView<T> qg = ctx.scratch.take_for_write(q_folded.shape);
  ctx.k.scale_columns(q_folded.rows(), q_folded.cols(), q_folded.data, p.ln_kv.weight.data, nullptr, qg.data);
  return ConstView<T>(qg);
}

// The attention output in the kv input's space, P·X: (P·X̂) ⊙ γ + β into scratch (fold on), else
// the kernel's output itself.
template <class T>
ConstView<T> folded_output(const NormFold<T>& f, const AttentionBlockParams<T>& p, ConstView<T> o_kernel,
                           Context<T>& ctx) {
  if (!f.on) return o_kernel;
  TensorView<T> of = ctx.scratch.take_for_write(o_kernel.shape);
  ctx.k.scale_columns(o_kernel.rows(), o_kernel.cols(), o_kernel.data, p.ln_kv.weight.data, p.ln_kv.bias.data,
                      of.data);
  return ConstView<T>(of);
}

// Where the backend stores bf16 (its products are bf16: Kernels::stores_bf16), the kernel takes
// its queries and keys as bf16 (AttentionDims::q_bf16, kv_bf16): the queries rounded once a pass
// rather than once per key range, the keys as LN_kv makes them: with RowSource::normalised their
// float rows never go through memory (without it they are normalised into scratch, then rounded).
// The products' operands, and so their results, are the same.
template <class T>
bool bf16_operands(const AttentionBlockConfig& cfg, const Context<T>& ctx) {
  return ctx.k.stores_bf16() && cfg.kv_dim % 2 == 0;
}
// A range's keys [rows, C] in scratch as the kernel takes them: float rows, or (bf16_operands)
// bf16 ones, which `data` then points at as well.
template <class T>
struct KernelKeys {
  T* data;
  uint16_t* bf16;
};
template <class T>
KernelKeys<T> kernel_keys(int64_t rows, int64_t c, bool bf16, Context<T>& ctx) {
  if (!bf16) return {ctx.scratch.take_for_write(Shape{rows, c}).data, nullptr};
  uint16_t* x16 = bf16_scratch(rows * c, ctx);
  return {reinterpret_cast<T*>(x16), x16};
}
// Rows [r0, r0 + n) of the keys as the layer norm writes them: float rows (y), or bf16 ones (y16,
// with y its shape only).
template <class T>
TensorView<T> float_rows(const KernelKeys<T>& x, int64_t r0, int64_t n, int64_t c) {
  return {x.bf16 ? nullptr : x.data + r0 * c, Shape{n, c}};
}
template <class T>
uint16_t* bf16_rows(const KernelKeys<T>& x, int64_t r0, int64_t c) {
  return x.bf16 ? x.bf16 + r0 * c : nullptr;
}
// Whether this pass's keys were kept from forward (AttentionBlockConfig::kept_key_width): over the
// rows' factors, with bf16 operands, the width planned.
template <class T>
bool keeps_keys(const AttentionBlockConfig& cfg, const AttentionBlockSaved<T>& s, int64_t factor_width, bool bf16) {
  return bf16 && factor_width > 0 && cfg.kept_key_width == factor_width &&
         s.kept_keys.numel() * 2 == s.xkv.shape[0] * s.xkv.shape[1] * factor_width;
}
// The range from row r0 of the kept keys, [B, rows, width] bf16 like kernel_keys' (the ranges of
// kv_row_chunk rows lie one after the other).
template <class T>
KernelKeys<T> kept_range(const AttentionBlockSaved<T>& s, int64_t batch, int64_t r0, int64_t width) {
  uint16_t* x16 = reinterpret_cast<uint16_t*>(s.kept_keys.data) + batch * r0 * width;
  return {reinterpret_cast<T*>(x16), x16};
}
// The kernel's queries as it takes them: as they are, or rounded into scratch (bf16_operands).
template <class T>
const T* kernel_query_data(ConstView<T> queries, bool bf16, Context<T>& ctx) {
  if (!bf16) return queries.data;
  return reinterpret_cast<const T*>(rounded_into_scratch(queries.rows(), queries.cols(), queries.data, ctx));
}
// The kernel's dims over keys [r0, r0 + n) of width `width` (C, or the factors'), of which the
// first `columns` can be nonzero there, with its operands in bf16 or not. The scale stays the
// model's.
AttentionDims range_dims(const AttentionDims& d, int64_t r0, int64_t n, int64_t width, int64_t columns, bool bf16) {
  AttentionDims e = key_range(d, r0, n);
  e.dqk = e.dv = width;
  e.key_columns = columns < width ? columns : 0;
  e.q_bf16 = e.kv_bf16 = bf16;
  return e;
}

// With the fold on, where the rows offer factors (RowSource::factors, EmbedFactors: X̂ = F·M_b for
// item b) the kernel runs over F [Nk, width] instead of X̂ [Nk, C]: queries Qg·M_bᵀ score F as Qg
// scores X̂, and with F as the values its output is P·F, of which P·X̂ = (P·F)·M_b. Its backward
// takes dO·M_bᵀ and gives dQ of Qg·M_bᵀ and key sums over F, both times M_b those over X̂. The
// scores and every gradient are the same to float rounding; the products run over `width`
// channels, or over fewer in a range whose rows are zero past them (AttentionDims::key_columns,
// EmbedFactors::columns). o_folded then holds P·F [B·Nq, width] in its first values.
template <class T>
struct KeyFactors {
  int64_t width = 0;  // 0: the kernel runs over X̂
  ConstView<T> m;     // [B, width, C]
  int64_t key_width(int64_t c) const { return width ? width : c; }
  std::function<int64_t(int64_t, int64_t)> columns;  // RowSource::factor_columns
  // The columns of the keys in rows [r0, r0 + n) that can be nonzero (all `c` without factors).
  int64_t key_columns(int64_t r0, int64_t n, int64_t c) const {
    return !width ? c : columns ? columns(r0, n) : width;
  }
};
template <class T>
KeyFactors<T> key_factors(const NormFold<T>& fold, const AttentionBlockSaved<T>& s, int64_t batch, int64_t c,
                          Context<T>& ctx) {
  if (!fold.on || !s.xkv_rows.factors) return {};
  TensorView<T> m = ctx.scratch.take_for_write(Shape{batch, s.xkv_rows.factor_width, c});
  s.xkv_rows.factor_matrix(m);
  return {s.xkv_rows.factor_width, ConstView<T>(m), s.xkv_rows.factor_columns};
}
// x [B·r, C] in the factors' space, x_b·M_bᵀ [B·r, width], into scratch; x itself without factors.
template <class T>
ConstView<T> to_factors(const KeyFactors<T>& f, ConstView<T> x, Context<T>& ctx) {
  if (!f.width) return x;
  const int64_t batch = f.m.shape[0], c = f.m.shape[2], r = x.numel() / c / batch;
  TensorView<T> y = ctx.scratch.take_for_write(Shape{batch * r, f.width});
  ctx.k.gemm_batched(Transpose::kNo, Transpose::kYes, r, f.width, c, T(1), x.data, c, r * c, f.m.data, c,
                     f.width * c, T(0), y.data, f.width, r * f.width, batch);
  return ConstView<T>(y);
}
// y [B·r, C] = (+= where accumulate) x_b·M_b from x [B·r, width] in the factors' space.
template <class T>
void from_factors(const KeyFactors<T>& f, const T* x, int64_t rows, T* y, bool accumulate, Context<T>& ctx) {
  const int64_t batch = f.m.shape[0], c = f.m.shape[2], r = rows / batch;
  ctx.k.gemm_batched(Transpose::kNo, Transpose::kNo, r, c, f.width, T(1), x, f.width, r * f.width, f.m.data, c,
                     f.width * c, accumulate ? T(1) : T(0), y, c, r * c, batch);
}
// The kernel's output over X̂, P·X̂ [B·Nq, C]: o_folded itself, or (P·F)·M into scratch.
template <class T>
ConstView<T> kernel_output(const KeyFactors<T>& f, const AttentionBlockSaved<T>& s, Context<T>& ctx) {
  if (!f.width) return ConstView<T>(s.attn.o_folded);
  TensorView<T> o = ctx.scratch.take_for_write(s.attn.o_folded.shape);
  from_factors(f, s.attn.o_folded.data, o.numel() / f.m.shape[2], o.data, false, ctx);
  return ConstView<T>(o);
}
// Rows [row, row + n) of the kernel's keys: LN_kv (or X̂), or their factors.
template <class T>
void kernel_key_rows(const AttentionBlockConfig& cfg, const NormFold<T>& fold, const KeyFactors<T>& f,
                     const AttentionBlockSaved<T>& s, int64_t row, int64_t n, const LayerNormSaved<T>& stats,
                     TensorView<T> y, uint16_t* y16, Context<T>& ctx) {
  if (f.width) return s.xkv_rows.factors(row, cfg.ln_kv().eps, y, y16, stats.mean.data, stats.rstd.data);
  normalised_kv_rows(cfg.ln_kv(), key_norm(fold), s, row, n, stats, y, ctx, y16);
}
// The same made again, their statistics thrown away (a backward pass).
template <class T>
void kernel_key_rows_again(const AttentionBlockConfig& cfg, const NormFold<T>& fold, const KeyFactors<T>& f,
                           const AttentionBlockSaved<T>& s, int64_t row, int64_t n, TensorView<T> y, uint16_t* y16,
                           Context<T>& ctx) {
  ScratchScope<T> scope(ctx.scratch);
  const LayerNormSaved<T> stats{ctx.scratch.take_for_write(Shape{n}), ctx.scratch.take_for_write(Shape{n})};
  kernel_key_rows(cfg, fold, f, s, row, n, stats, y, y16, ctx);
}

}  // namespace

template <class T>
void folded_attention_forward(const AttentionBlockConfig& cfg, const AttentionBlockParams<T>& p, ConstView<T> q_norm,
                              AttentionBlockSaved<T>& s, Context<T>& ctx) {
  const AttentionConfig a = cfg.attention();
  const AttentionDims d = folded_dims(cfg, s, ctx);
  const int64_t batch = d.batch, nq = d.nq, nk = d.nk, c = cfg.kv_dim;
  ScratchScope<T> scope(ctx.scratch);
  const NormFold<T> fold = norm_fold(cfg, p, ctx);
  linear_forward(a.query(), p.attn.query, q_norm, s.attn.q, ctx);
  // Q·W_k [B·Nq, kv_dim]: the queries that score the normalised kv rows directly.
  ctx.k.gemm(Transpose::kNo, Transpose::kNo, batch * nq, c, a.qk, T(1), s.attn.q.data, a.qk,
             p.attn.key.weight.data, c, T(0), s.attn.q_folded.data, c);
  const KeyFactors<T> factors = key_factors(fold, s, batch, c, ctx);
  const int64_t kw = factors.key_width(c);
  const bool bf16 = bf16_operands(cfg, ctx), keep = keeps_keys(cfg, s, factors.width, bf16);
  const ConstView<T> qg = kernel_queries(fold, p, ConstView<T>(s.attn.q_folded), ctx);
  const T* queries = kernel_query_data(to_factors(factors, qg, ctx), bf16, ctx);
  for (int64_t r0 = 0; r0 < nk; r0 += cfg.kv_row_chunk) {
    const int64_t n = std::min(cfg.kv_row_chunk, nk - r0);
    ScratchScope<T> range(ctx.scratch);
    // LN_kv, X̂ or F of these rows, [B, n, kw]: in scratch, or where the backward will read them
    const KernelKeys<T> x = keep ? kept_range(s, batch, r0, kw) : kernel_keys(batch * n, kw, bf16, ctx);
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t row = b * nk + r0;
      kernel_key_rows(cfg, fold, factors, s, row, n, stats_of(s.ln_kv, row, n), float_rows(x, b * n, n, kw),
                      bf16_rows(x, b * n, kw), ctx);
    }
    AttentionDims e = range_dims(d, r0, n, kw, factors.key_columns(r0, n, c), bf16);
    e.continues = r0 > 0;
    ctx.k.attention_forward(e, queries, x.data, x.data, s.attn.o_folded.data, s.attn.softmax.data);
  }
  linear_forward(a.value(), p.attn.value, folded_output(fold, p, kernel_output(factors, s, ctx), ctx), s.attn.o, ctx);
  linear_forward(a.output(), p.attn.output, ConstView<T>(s.attn.o), s.x, ctx);
}

namespace {

// The kernel's key gradient row by row (dX, or dX̂ with the fold), through LN_kv's backward into
// the kv input gradient (dxkv and the sink), a row chunk at a time; dQ of the kernel's queries into
// d_queries (+=). o: the kernel's output over these rows (kernel_output).
template <class T>
void key_rows_backward(const AttentionBlockConfig& cfg, const AttentionBlockParams<T>& p,
                       const AttentionBlockSaved<T>& s, const NormFold<T>& fold, const AttentionDims& d,
                       ConstView<T> queries, ConstView<T> o, ConstView<T> d_out, TensorView<T> d_queries,
                       const AttentionBlockGrads<T>& g, TensorView<T> dxkv, const RowSink<T>& sink, Context<T>& ctx) {
  const int64_t batch = d.batch, nk = d.nk, c = cfg.kv_dim;
  // With the fold, LN_kv's backward runs without γ and β, whose gradients come from the queries'
  // side: its own ones go to scratch.
  const LayerNormGrads<T> ln_grads =
      fold.on ? LayerNormGrads<T>{ctx.scratch.take(Shape{c}), ctx.scratch.take(Shape{c})} : g.ln_kv;
  for (int64_t r0 = 0; r0 < nk; r0 += cfg.kv_row_chunk) {
    const int64_t n = std::min(cfg.kv_row_chunk, nk - r0);
    ScratchScope<T> range(ctx.scratch);
    std::vector<ConstView<T>> in(size_t(batch), ConstView<T>{});  // the kv input rows, for LN_kv's backward
    TensorView<T> x = ctx.scratch.take_for_write(Shape{batch * n, c});
    TensorView<T> d_x = ctx.scratch.take(Shape{batch * n, c});  // as keys and as values: one sum
    for (int64_t b = 0; b < batch; ++b) {
      in[size_t(b)] = kv_input_rows(s, b * nk + r0, n, ctx);
      layer_norm_again(cfg.ln_kv(), key_norm(fold), in[size_t(b)], x.row_slice(b * n, n), ctx);
    }
    ctx.k.attention_backward(key_range(d, r0, n), queries.data, x.data, x.data, o.data,
                             s.attn.softmax.data, d_out.data, d_queries.data, d_x.data, d_x.data);
    for (int64_t b = 0; b < batch; ++b) {
      ScratchScope<T> item(ctx.scratch);
      const int64_t row = b * nk + r0;
      TensorView<T> d_in = dxkv.empty() ? ctx.scratch.take(Shape{n, c}) : rows_of(dxkv, row, n);
      layer_norm_backward(cfg.ln_kv(), key_norm(fold), in[size_t(b)], stats_of(s.ln_kv, row, n),
                          ConstView<T>(d_x.row_slice(b * n, n)), ln_grads, d_in, ctx);
      if (sink) sink(row, ConstView<T>(d_in));
    }
  }
}

// The kv input gradient summed over groups of rows (KvGradGroups), with the fold on, never formed.
// LN_kv's backward without gain gives row j (weight w_j = rstd_j) as
//   dx_j = w_j·(dX̂_j − mean(dX̂_j) − X̂_j·mean(dX̂_j ⊙ X̂_j)),
// so a group's sum is Σ_j w_j·dX̂_j (from the kernel's q_sums: Σ_i q_sums_ig·Qg_i + q_sums_i,G+g·dO_i),
// less its row mean, less (1/C)·Σ_j w_j·(dX̂_j·X̂_j)·X̂_j (the kernel's key_sums).
// With factors (key_factors) the kernel runs on queries, dO, dQ and key sums in their space, and
// dQ and the key sums come back times M; q_sums are the same in either space.
template <class T>
void key_sums_backward(const AttentionBlockConfig& cfg, const AttentionBlockSaved<T>& s, const NormFold<T>& fold,
                       const KeyFactors<T>& factors, const AttentionDims& d, ConstView<T> queries, ConstView<T> d_out,
                       TensorView<T> d_queries, const KvGradGroups<T>& groups, Context<T>& ctx) {
  const int64_t batch = d.batch, nq = d.nq, nk = d.nk, c = cfg.kv_dim, gc = groups.count, kw = factors.key_width(c);
  const T inv_c = T(1) / T(c);
  TensorView<T> q_sums = ctx.scratch.take(Shape{batch * nq, 2 * gc});
  TensorView<T> key_sums = ctx.scratch.take(Shape{batch, gc, c});
  const bool bf16 = bf16_operands(cfg, ctx), kept = keeps_keys(cfg, s, factors.width, bf16);
  const T* kernel_q = kernel_query_data(to_factors(factors, queries, ctx), bf16, ctx);
  const ConstView<T> kernel_dout = to_factors(factors, d_out, ctx);
  const TensorView<T> kernel_dq = factors.width ? ctx.scratch.take(Shape{batch * nq, kw}) : d_queries;
  const TensorView<T> kernel_key_sums = factors.width ? ctx.scratch.take(Shape{batch, gc, kw}) : key_sums;
  for (int64_t r0 = 0; r0 < nk; r0 += cfg.kv_row_chunk) {
    const int64_t n = std::min(cfg.kv_row_chunk, nk - r0);
    ScratchScope<T> range(ctx.scratch);
    const KernelKeys<T> x = kept ? kept_range(s, batch, r0, kw) : kernel_keys(batch * n, kw, bf16, ctx);
    for (int64_t b = 0; b < batch && !kept; ++b)
      kernel_key_rows_again(cfg, fold, factors, s, b * nk + r0, n, float_rows(x, b * n, n, kw), bf16_rows(x, b * n, kw),
                            ctx);
    ctx.k.attention_backward_key_sums(range_dims(d, r0, n, kw, factors.key_columns(r0, n, c), bf16), kernel_q,
                                      x.data, s.attn.o_folded.data, s.attn.softmax.data, kernel_dout.data,
                                      groups.ids, s.ln_kv.rstd.data, gc, kernel_dq.data, q_sums.data,
                                      kernel_key_sums.data);
  }
  if (factors.width) {
    from_factors(factors, kernel_dq.data, batch * nq, d_queries.data, true, ctx);
    from_factors(factors, kernel_key_sums.data, batch * gc, key_sums.data, false, ctx);
  }
  for (int64_t b = 0; b < batch; ++b) ctx.k.axpy(gc * c, -inv_c, key_sums.data + b * gc * c, groups.sums.data);
  TensorView<T> sums = ctx.scratch.take_for_write(Shape{gc, c});  // Σ_j w_j·dX̂_j
  // Σ_j w_j·dX̂_j = Σ_i q_sums_ig·Qg_i + q_sums_i,G+g·dO_i
  ctx.k.gemm(Transpose::kYes, Transpose::kNo, gc, c, batch * nq, T(1), q_sums.data, 2 * gc, queries.data, c, T(0),
             sums.data, c);
  ctx.k.gemm(Transpose::kYes, Transpose::kNo, gc, c, batch * nq, T(1), q_sums.data + gc, 2 * gc, d_out.data, c, T(1),
             sums.data, c);
  // less each row's mean: sums·1/C as a column, times a row of ones (the fold's unit gain)
  const T* ones = fold.gain.data;
  TensorView<T> means = ctx.scratch.take_for_write(Shape{gc});
  ctx.k.gemm(Transpose::kNo, Transpose::kNo, gc, 1, c, inv_c, sums.data, c, ones, 1, T(0), means.data, 1);
  ctx.k.axpy(gc * c, T(1), sums.data, groups.sums.data);
  ctx.k.gemm(Transpose::kNo, Transpose::kNo, gc, c, 1, T(-1), means.data, 1, ones, c, T(1), groups.sums.data, c);
}

}  // namespace

template <class T>
void folded_attention_backward(const AttentionBlockConfig& cfg, const AttentionBlockParams<T>& p,
                               const AttentionBlockSaved<T>& s, ConstView<T> q_norm, ConstView<T> dx,
                               const AttentionBlockGrads<T>& g, TensorView<T> dq_norm, TensorView<T> dxkv,
                               const RowSink<T>& sink, const KvGradGroups<T>& groups, Context<T>& ctx) {
  const AttentionConfig a = cfg.attention();
  const AttentionDims d = folded_dims(cfg, s, ctx);
  const int64_t batch = d.batch, nq = d.nq, c = cfg.kv_dim;
  ScratchScope<T> scope(ctx.scratch);
  const NormFold<T> fold = norm_fold(cfg, p, ctx);
  const KeyFactors<T> factors = key_factors(fold, s, batch, c, ctx);
  const ConstView<T> o_kernel = kernel_output(factors, s, ctx);  // P·X̂ (or P·LN_kv(x))
  TensorView<T> d_o = ctx.scratch.take(s.attn.o.shape);
  linear_backward(a.output(), p.attn.output, ConstView<T>(s.attn.o), dx, g.attn.output, d_o, ctx);
  TensorView<T> d_o_folded = ctx.scratch.take(s.attn.o_folded.shape);  // d(P·X)
  const ConstView<T> o_folded = folded_output(fold, p, o_kernel, ctx);
  linear_backward(a.value(), p.attn.value, o_folded, ConstView<T>(d_o), g.attn.value, d_o_folded, ctx);
  if (fold.on) {  // P·X = (P·X̂) ⊙ γ + β; then d(P·X̂), in place
    ctx.k.bias_backward(batch * nq, c, d_o_folded.data, g.ln_kv.bias.data);
    ctx.k.column_dots(batch * nq, c, d_o_folded.data, o_kernel.data, g.ln_kv.weight.data);
    ctx.k.scale_columns(batch * nq, c, d_o_folded.data, p.ln_kv.weight.data, nullptr, d_o_folded.data);
  }
  const ConstView<T> d_out(d_o_folded);  // the kernel's output gradient
  const ConstView<T> queries = kernel_queries(fold, p, ConstView<T>(s.attn.q_folded), ctx);
  TensorView<T> d_queries = ctx.scratch.take(s.attn.q_folded.shape);  // the kernel adds each range's part
  if (fold.on && groups && dxkv.empty())
    key_sums_backward(cfg, s, fold, factors, d, queries, d_out, d_queries, groups, ctx);
  else
    key_rows_backward(cfg, p, s, fold, d, queries, o_kernel, d_out, d_queries, g, dxkv, sink, ctx);
  if (fold.on) {  // Qg = (Q·W_k) ⊙ γ; then d(Q·W_k), in place
    ctx.k.column_dots(batch * nq, c, d_queries.data, s.attn.q_folded.data, g.ln_kv.weight.data);
    ctx.k.scale_columns(batch * nq, c, d_queries.data, p.ln_kv.weight.data, nullptr, d_queries.data);
  }
  const TensorView<T> d_q_folded = d_queries;  // d(Q·W_k)
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
                                             const RowSink<T>&, const KvGradGroups<T>&, Context<T>&);
PCV_INSTANTIATE(float)
PCV_INSTANTIATE(double)
#undef PCV_INSTANTIATE

}  // namespace perceiver
