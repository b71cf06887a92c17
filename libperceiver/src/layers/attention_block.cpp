#include "layers/attention_block.h"

#include "layers/attention_folded.h"
#include "layers/bf16_scratch.h"
#include "layers/kv_rows.h"

namespace perceiver {

AttentionConfig AttentionBlockConfig::attention() const {
  AttentionConfig a;
  a.q_dim = q_dim;
  a.kv_dim = cross ? kv_dim : q_dim;
  a.heads = heads;
  a.kv_chunk = kv_chunk;
  a.dropout = attention_dropout;
  a.kv_grad_in_place = chunked_kv();  // K/V gradients are consumed chunk by chunk right after
  a.kv_bf16 = chunked_kv() && kv_bf16;
  a.keep_scores = keep_scores;
  a.save_kv = !stream_kv;
  a.fold_kv = fold_kv;
  if (cross) {
    // Shape "kv": qk defaults to the kv width; "q": to the q width. Output goes back to q width.
    a.qk = qk_channels ? qk_channels : (qk_from_q ? q_dim : kv_dim);
    a.v = v_channels ? v_channels : a.qk;
    a.out = q_dim;
  } else {
    a.qk = qk_channels ? qk_channels : q_dim;
    a.v = v_channels ? v_channels : a.qk;
    a.out = a.v;
  }
  return a;
}

void AttentionBlockConfig::validate() const {
  PCV_CHECK(q_dim > 0, "attention block query width must be positive, got ", q_dim);
  PCV_CHECK(!cross || kv_dim > 0, "cross-attention kv width must be positive, got ", kv_dim);
  PCV_CHECK(widening > 0, "widening factor must be positive, got ", widening);
  const AttentionConfig a = attention();
  a.validate();
  PCV_CHECK(!query_residual || a.out == q_dim, "query residual needs output width ", a.out,
            " to equal the query width ", q_dim);
  PCV_CHECK(!stream_kv || (chunked_kv() && !keep_scores), "streaming K/V (forward only) needs the chunked "
            "cross-attention and no kept scores");
  PCV_CHECK(!fold_kv || (chunked_kv() && !stream_kv), "folding the K/V projections needs the chunked cross-attention "
            "(kv_row_chunk > 0) and replaces stream_kv");
  PCV_CHECK(kept_key_width == 0 || (fold_kv && kept_key_width > 0 && kept_key_width % 2 == 0),
            "kept kernel keys (kept_key_width ", kept_key_width, ") need the folded K/V projections and an even width");
}

bool can_stream_kv(const AttentionBlockConfig& cfg, int64_t batch, int64_t nq, int64_t nk, const Backend& backend,
                   const TrainingMode& mode) {
  if (!cfg.chunked_kv() || !backend.merges_attention_chunks()) return false;
  const AttentionDims d = cfg.attention().dims(batch, nq, nk, mode, 0);
  return d.streamed() && !d.dropout();
}

bool can_fold_kv(const AttentionBlockConfig& cfg, int64_t batch, int64_t nq, int64_t nk, const Backend& backend,
                 const TrainingMode& mode) {
  if (!cfg.chunked_kv() || cfg.heads != 1 || !backend.merges_attention_chunks()) return false;
  const AttentionConfig a = cfg.attention();  // streaming and dropout do not depend on folding
  const AttentionDims d = a.dims(batch, nq, nk, mode, 0);
  const int64_t c = cfg.kv_dim, projected = c * (a.qk + a.v) + nq * (a.qk + a.v);
  return d.streamed() && !d.dropout() && 2 * nq * c < projected;
}

std::vector<ParamSpec> attention_block_param_specs(const AttentionBlockConfig& cfg) {
  std::vector<ParamSpec> s = prefixed(layer_norm_param_specs(cfg.ln_q()), "attention.self.layernorm1.");
  auto add = [&](std::vector<ParamSpec> more) { s.insert(s.end(), more.begin(), more.end()); };
  if (cfg.cross) add(prefixed(layer_norm_param_specs(cfg.ln_kv()), "attention.self.layernorm2."));
  add(prefixed(attention_param_specs(cfg.attention()), "attention."));
  add(prefixed(layer_norm_param_specs(cfg.ln_mlp()), "layernorm."));
  add(prefixed(mlp_param_specs(cfg.mlp()), "mlp."));
  return s;
}

std::vector<TensorSpec> attention_block_saved_specs(const AttentionBlockConfig& cfg, int64_t batch,
                                                    int64_t nq, int64_t nk) {
  const int64_t out = cfg.out_dim();
  if (!cfg.cross) nk = nq;
  std::vector<TensorSpec> s;
  append_specs(s, layer_norm_saved_specs(batch * nq), "ln_q.");
  if (cfg.cross) append_specs(s, layer_norm_saved_specs(batch * nk), "ln_kv.");
  if (cfg.cross) s.push_back({"kept_keys", Shape{batch * nk * cfg.kept_key_width / 2}});
  append_specs(s, attention_saved_specs(cfg.attention(), batch, nq, nk), "attn.");
  s.push_back({"x", Shape{batch, nq, out}});
  append_specs(s, layer_norm_saved_specs(batch * nq), "ln_mlp.");
  append_specs(s, mlp_saved_specs(cfg.mlp(), batch * nq), "mlp.");
  return s;
}

template <class T>
AttentionBlockParams<T> AttentionBlockParams<T>::bind(const AttentionBlockConfig& cfg,
                                                      const ParamBinder<T>& b) {
  AttentionBlockParams p;
  p.ln_q = LayerNormParams<T>::bind(b.sub("attention.self.layernorm1."));
  if (cfg.cross) p.ln_kv = LayerNormParams<T>::bind(b.sub("attention.self.layernorm2."));
  p.attn = AttentionParams<T>::bind(b.sub("attention."));
  p.ln_mlp = LayerNormParams<T>::bind(b.sub("layernorm."));
  p.mlp = MlpParams<T>::bind(b.sub("mlp."));
  return p;
}

template <class T>
AttentionBlockGrads<T> AttentionBlockGrads<T>::bind(const AttentionBlockConfig& cfg,
                                                    const ParamBinder<T>& b) {
  AttentionBlockGrads g;
  g.ln_q = LayerNormGrads<T>::bind(b.sub("attention.self.layernorm1."));
  if (cfg.cross) g.ln_kv = LayerNormGrads<T>::bind(b.sub("attention.self.layernorm2."));
  g.attn = AttentionGrads<T>::bind(b.sub("attention."));
  g.ln_mlp = LayerNormGrads<T>::bind(b.sub("layernorm."));
  g.mlp = MlpGrads<T>::bind(b.sub("mlp."));
  return g;
}

template <class T>
AttentionBlockSaved<T> AttentionBlockSaved<T>::bind(const AttentionBlockConfig& cfg,
                                                    const SavedBinder<T>& b) {
  AttentionBlockSaved s;
  s.ln_q = LayerNormSaved<T>::bind(b.sub("ln_q."));
  if (cfg.cross) s.ln_kv = LayerNormSaved<T>::bind(b.sub("ln_kv."));
  if (cfg.cross) s.kept_keys = b("kept_keys");
  s.attn = AttentionSaved<T>::bind(b.sub("attn."));
  s.x = b("x");
  s.ln_mlp = LayerNormSaved<T>::bind(b.sub("ln_mlp."));
  s.mlp = MlpSaved<T>::bind(b.sub("mlp."));
  return s;
}

namespace {

using kv_rows::kv_input_rows;
using kv_rows::normalised_kv_rows;
using kv_rows::rows_of;
using kv_rows::stats_of;

// Whether this application keeps K and V (and then dK, dV) as bf16 (AttentionDims::kv_bf16).
template <class T>
bool kv_in_bf16(const AttentionBlockConfig& cfg, const AttentionBlockSaved<T>& s) {
  return cfg.attention().dims(s.xq.shape[0], s.xq.shape[1], s.xkv.shape[1]).kv_bf16;
}

// Rows [r0, r0+n) of a saved K or V (or its gradient) held as bf16: `width` values per row.
template <class T>
uint16_t* bf16_rows(TensorView<T> t, int64_t r0, int64_t width) {
  return reinterpret_cast<uint16_t*>(t.data) + r0 * width;
}

// With K and V kept as bf16, the products of the K/V path read bf16 operands: the normalised
// chunk rounded once for both projections, each weight rounded once for all chunks, and dK, dV as
// stored. The same values gemm would round (so the same results), without rounding them again.
// Null pointers: float operands (the plain linear layers).
struct KvOperands16 {
  const uint16_t* norm = nullptr;    // this chunk's LN_kv output [n, kv_dim]
  const uint16_t* weight = nullptr;  // this projection's weight [out, in]
};

// The K and V weights rounded into scratch for one pass over the chunks (`bf16`), else null.
struct KvWeights16 {
  const uint16_t* key = nullptr;
  const uint16_t* value = nullptr;
};
template <class T>
KvWeights16 kv_weights16(bool bf16, const AttentionConfig& a, const AttentionBlockParams<T>& p, Context<T>& ctx) {
  if (!bf16) return {};
  return {rounded_into_scratch(a.key().out, a.key().in, p.attn.key.weight.data, ctx),
          rounded_into_scratch(a.value().out, a.value().in, p.attn.value.weight.data, ctx)};
}

// One K or V projection of a chunk of normalised kv rows into rows [r0, r0+n) of its saved
// tensor: directly, or (x16: bf16 operands) through float scratch rounded into the bf16 store.
template <class T>
void project_kv_rows(const LinearConfig& lc, const LinearParams<T>& p, ConstView<T> norm, TensorView<T> saved,
                     int64_t r0, const KvOperands16& x16, Context<T>& ctx) {
  const int64_t n = norm.rows();
  if (!x16.norm) return linear_forward(lc, p, norm, rows_of(saved, r0, n), ctx);
  ScratchScope<T> scope(ctx.scratch);
  TensorView<T> out = ctx.scratch.take_for_write(Shape{n, lc.out});
  ctx.k.gemm_stored_bf16(Transpose::kNo, Transpose::kYes, n, lc.out, lc.in, T(1), x16.norm, lc.in, x16.weight, lc.in,
                         T(0), out.data, lc.out);
  ctx.k.bias_forward(n, lc.out, p.bias.data, out.data);
  ctx.k.store_bf16(n, lc.out, out.data, lc.out, bf16_rows(saved, r0, lc.out), lc.out);
}

// LN_kv and the K/V projections, a chunk of kv rows at a time.
template <class T>
void kv_chunks_forward(const AttentionBlockConfig& cfg, const AttentionBlockParams<T>& p, AttentionBlockSaved<T>& s,
                       Context<T>& ctx) {
  const AttentionConfig a = cfg.attention();
  const int64_t rows = s.xkv.rows();
  const bool bf16 = kv_in_bf16(cfg, s);
  PCV_CHECK(!bf16 || ctx.k.stores_bf16(), "attention block: K/V kept as bf16 (kv_bf16) needs a backend with bf16 "
            "products that can store bf16 (--precision bf16 on the cpu device)");
  ScratchScope<T> weights_scope(ctx.scratch);
  const KvWeights16 w16 = kv_weights16(bf16, a, p, ctx);
  for (int64_t r0 = 0; r0 < rows; r0 += cfg.kv_row_chunk) {
    const int64_t n = std::min(cfg.kv_row_chunk, rows - r0);
    ScratchScope<T> scope(ctx.scratch);
    TensorView<T> norm = ctx.scratch.take_for_write(Shape{n, cfg.kv_dim});
    normalised_kv_rows(cfg.ln_kv(), p.ln_kv, s, r0, n, stats_of(s.ln_kv, r0, n), norm, ctx);
    const uint16_t* norm16 = bf16 ? rounded_into_scratch(n, cfg.kv_dim, norm.data, ctx) : nullptr;
    project_kv_rows(a.key(), p.attn.key, ConstView<T>(norm), s.attn.k, r0, {norm16, w16.key}, ctx);
    project_kv_rows(a.value(), p.attn.value, ConstView<T>(norm), s.attn.v, r0, {norm16, w16.value}, ctx);
  }
}

// One K or V projection's backward over a chunk: its output gradient is rows [r0, r0+n) of
// `grad`, float, or (x16: bf16 operands) bf16 as stored, which the products read directly and the
// bias gradient reads back into float scratch.
template <class T>
void project_kv_rows_backward(const LinearConfig& lc, const LinearParams<T>& p, ConstView<T> norm, TensorView<T> grad,
                              int64_t r0, const KvOperands16& x16, const LinearGrads<T>& g, TensorView<T> d_norm,
                              Context<T>& ctx) {
  const int64_t n = norm.rows();
  if (!x16.norm) return linear_backward(lc, p, norm, rows_of(ConstView<T>(grad), r0, n), g, d_norm, ctx);
  const uint16_t* dy16 = bf16_rows(grad, r0, lc.out);
  // dW [out,in] += dyᵀ [out,n] · x [n,in]; dx [n,in] += dy [n,out] · W [out,in] (as linear_backward)
  ctx.k.gemm_stored_bf16(Transpose::kYes, Transpose::kNo, lc.out, lc.in, n, T(1), dy16, lc.out, x16.norm, lc.in, T(1),
                         g.weight.data, lc.in);
  ctx.k.gemm_stored_bf16(Transpose::kNo, Transpose::kNo, n, lc.in, lc.out, T(1), dy16, lc.out, x16.weight, lc.in, T(1),
                         d_norm.data, lc.in);
  ScratchScope<T> scope(ctx.scratch);
  TensorView<T> dy = ctx.scratch.take_for_write(Shape{n, lc.out});
  ctx.k.load_bf16(n, lc.out, dy16, lc.out, dy.data, lc.out);
  ctx.k.bias_backward(n, lc.out, dy.data, g.bias.data);
}

// Forward only (cfg.stream_kv): the query projection, then for each row chunk of every batch item
// LN_kv, the K and V projections and the attention over those keys, merged into the output so
// far (AttentionDims::continues), then the output projection. K and V exist one chunk at a time.
template <class T>
void streamed_kv_attention_forward(const AttentionBlockConfig& cfg, const AttentionBlockParams<T>& p,
                                   ConstView<T> q_norm, AttentionBlockSaved<T>& s, Context<T>& ctx) {
  const AttentionConfig a = cfg.attention();
  const int64_t batch = s.xq.shape[0], nq = s.xq.shape[1], nk = s.xkv.shape[1];
  AttentionDims d = a.dims(batch, nq, nk, ctx.mode, s.attn.dropout_stream);
  PCV_ASSERT(d.streamed() && !d.dropout() && !d.keep_scores, "streamed K/V needs the streamed attention");
  linear_forward(a.query(), p.attn.query, q_norm, s.attn.q, ctx);
  for (int64_t r0 = 0; r0 < nk; r0 += cfg.kv_row_chunk) {
    const int64_t n = std::min(cfg.kv_row_chunk, nk - r0);
    ScratchScope<T> scope(ctx.scratch);
    TensorView<T> k = ctx.scratch.take_for_write(Shape{batch * n, a.qk});
    TensorView<T> v = ctx.scratch.take_for_write(Shape{batch * n, a.v});
    for (int64_t b = 0; b < batch; ++b) {
      ScratchScope<T> item(ctx.scratch);
      const int64_t row = b * nk + r0;  // in [B·Nk]
      TensorView<T> norm = ctx.scratch.take_for_write(Shape{n, cfg.kv_dim});
      normalised_kv_rows(cfg.ln_kv(), p.ln_kv, s, row, n, stats_of(s.ln_kv, row, n), norm, ctx);
      linear_forward(a.key(), p.attn.key, ConstView<T>(norm), k.row_slice(b * n, n), ctx);
      linear_forward(a.value(), p.attn.value, ConstView<T>(norm), v.row_slice(b * n, n), ctx);
    }
    d.nk = n;
    d.continues = r0 > 0;
    d.kv_grad_in_place = d.kv_bf16 = false;
    ctx.k.attention_forward(d, s.attn.q.data, k.data, v.data, s.attn.o.data, s.attn.softmax.data);
  }
  linear_forward(a.output(), p.attn.output, ConstView<T>(s.attn.o), s.x, ctx);
}

// The K/V projections' and LN_kv's backward a chunk at a time, recomputing LN_kv(xkv). `bf16`:
// d_k and d_v are held as bf16 (AttentionDims::kv_bf16).
template <class T>
void kv_chunks_backward(const AttentionBlockConfig& cfg, const AttentionBlockParams<T>& p,
                        const AttentionBlockSaved<T>& s, TensorView<T> d_k, TensorView<T> d_v, bool bf16,
                        const AttentionBlockGrads<T>& g, TensorView<T> dxkv, const RowSink<T>& sink, Context<T>& ctx) {
  const AttentionConfig a = cfg.attention();
  const int64_t rows = s.xkv.rows();
  ScratchScope<T> weights_scope(ctx.scratch);
  const KvWeights16 w16 = kv_weights16(bf16, a, p, ctx);
  for (int64_t r0 = 0; r0 < rows; r0 += cfg.kv_row_chunk) {
    const int64_t n = std::min(cfg.kv_row_chunk, rows - r0);
    ScratchScope<T> scope(ctx.scratch);
    TensorView<T> d_norm = ctx.scratch.take(Shape{n, cfg.kv_dim});
    ConstView<T> x = kv_input_rows(s, r0, n, ctx);
    const TensorView<T> norm = layer_norm_into_scratch(cfg.ln_kv(), p.ln_kv, x, ctx);
    const uint16_t* norm16 = bf16 ? rounded_into_scratch(n, cfg.kv_dim, norm.data, ctx) : nullptr;
    project_kv_rows_backward(a.key(), p.attn.key, ConstView<T>(norm), d_k, r0, {norm16, w16.key}, g.attn.key, d_norm,
                             ctx);
    project_kv_rows_backward(a.value(), p.attn.value, ConstView<T>(norm), d_v, r0, {norm16, w16.value}, g.attn.value,
                             d_norm, ctx);
    TensorView<T> dx = dxkv.empty() ? ctx.scratch.take(Shape{n, cfg.kv_dim}) : rows_of(dxkv, r0, n);
    layer_norm_backward(cfg.ln_kv(), p.ln_kv, x, stats_of(s.ln_kv, r0, n), ConstView<T>(d_norm), g.ln_kv, dx, ctx);
    if (sink) sink(r0, ConstView<T>(dx));
  }
}

// The block's forward once s.xq and s.xkv (or its row source) are set. The LN outputs live in
// scratch only: backward makes them again from the inputs (attention_block.h).
template <class T>
void block_forward(const AttentionBlockConfig& cfg, const AttentionBlockParams<T>& p, AttentionBlockSaved<T>& s,
                   TensorView<T> y, Context<T>& ctx) {
  ScratchScope<T> scope(ctx.scratch);
  const ConstView<T> xq = s.xq, xkv = s.xkv;
  TensorView<T> q_norm = ctx.scratch.take_for_write(xq.shape);
  layer_norm_forward(cfg.ln_q(), p.ln_q, xq, s.ln_q, q_norm, ctx);
  if (cfg.fold_kv) {
    folded_attention_forward(cfg, p, ConstView<T>(q_norm), s, ctx);
  } else if (cfg.stream_kv) {
    streamed_kv_attention_forward(cfg, p, ConstView<T>(q_norm), s, ctx);
  } else if (cfg.chunked_kv()) {
    kv_chunks_forward(cfg, p, s, ctx);
    attention_forward_from_kv(cfg.attention(), p.attn, ConstView<T>(q_norm), s.attn, s.x, ctx);
  } else {
    ConstView<T> kv_in = q_norm;
    if (cfg.cross) {
      TensorView<T> kv_norm = ctx.scratch.take_for_write(xkv.shape);
      layer_norm_forward(cfg.ln_kv(), p.ln_kv, xkv, s.ln_kv, kv_norm, ctx);
      kv_in = kv_norm;
    }
    attention_forward(cfg.attention(), p.attn, ConstView<T>(q_norm), kv_in, s.attn, s.x, ctx);
  }
  if (cfg.query_residual) ctx.k.axpy(s.x.numel(), T(1), xq.data, s.x.data);
  TensorView<T> x_norm = ctx.scratch.take_for_write(s.x.shape);
  layer_norm_forward(cfg.ln_mlp(), p.ln_mlp, ConstView<T>(s.x), s.ln_mlp, x_norm, ctx);
  mlp_forward(cfg.mlp(), p.mlp, ConstView<T>(x_norm), s.mlp, y, ctx);
  ctx.k.axpy(y.numel(), T(1), s.x.data, y.data);
}

}  // namespace

template <class T>
void attention_block_forward(const AttentionBlockConfig& cfg, const AttentionBlockParams<T>& p,
                             ConstView<T> xq, ConstView<T> xkv, AttentionBlockSaved<T>& s,
                             TensorView<T> y, Context<T>& ctx) {
  s.xq = xq;
  s.xkv = cfg.cross ? xkv : xq;
  s.xkv_rows = {};
  block_forward(cfg, p, s, y, ctx);
}

template <class T>
void attention_block_forward(const AttentionBlockConfig& cfg, const AttentionBlockParams<T>& p, ConstView<T> xq,
                             RowSource<T> xkv_rows, Shape xkv_shape, AttentionBlockSaved<T>& s, TensorView<T> y,
                             Context<T>& ctx) {
  PCV_CHECK(cfg.chunked_kv(), "a kv input made on demand needs the chunked cross-attention (kv_row_chunk > 0)");
  PCV_CHECK(xkv_shape.rank() == 3 && xkv_shape[2] == cfg.kv_dim, "kv input ", xkv_shape.str(), " does not have ",
            cfg.kv_dim, " channels");
  s.xq = xq;
  s.xkv = ConstView<T>{nullptr, xkv_shape};
  s.xkv_rows = std::move(xkv_rows);
  block_forward(cfg, p, s, y, ctx);
}

template <class T>
void attention_block_backward(const AttentionBlockConfig& cfg, const AttentionBlockParams<T>& p,
                              const AttentionBlockSaved<T>& s, ConstView<T> dy,
                              const AttentionBlockGrads<T>& g, TensorView<T> dxq,
                              TensorView<T> dxkv, Context<T>& ctx, const RowSink<T>& sink,
                              const KvGradGroups<T>& groups) {
  PCV_CHECK(!cfg.stream_kv, "attention block backward after a forward-only pass (stream_kv): it kept no K and V");
  ScratchScope<T> scope(ctx.scratch);
  // dx = dy (the MLP residual) + the MLP branch through LN_m.
  const Shape x_shape = s.x.shape;                    // [B,Nq,out]
  TensorView<T> dx = ctx.scratch.take(x_shape);
  ctx.k.axpy(dx.numel(), T(1), dy.data, dx.data);
  {
    ScratchScope<T> mlp_scope(ctx.scratch);
    TensorView<T> dx_norm = ctx.scratch.take(x_shape);
    const TensorView<T> x_norm = layer_norm_into_scratch(cfg.ln_mlp(), p.ln_mlp, ConstView<T>(s.x), ctx);
    mlp_backward(cfg.mlp(), p.mlp, ConstView<T>(x_norm), s.mlp, dy, g.mlp, dx_norm, ctx);
    layer_norm_backward(cfg.ln_mlp(), p.ln_mlp, ConstView<T>(s.x), s.ln_mlp, ConstView<T>(dx_norm), g.ln_mlp, dx,
                        ctx);
  }
  if (cfg.query_residual && !dxq.empty()) ctx.k.axpy(dx.numel(), T(1), dx.data, dxq.data);

  const ConstView<T> q_norm = layer_norm_into_scratch(cfg.ln_q(), p.ln_q, s.xq, ctx);  // [B,Nq,q_dim]
  TensorView<T> dq_norm = ctx.scratch.take(q_norm.shape);
  if (cfg.fold_kv) {
    folded_attention_backward(cfg, p, s, q_norm, ConstView<T>(dx), g, dq_norm, dxkv, sink, groups, ctx);
  } else if (cfg.chunked_kv()) {
    const AttentionDims dims = cfg.attention().dims(q_norm.shape[0], q_norm.shape[1], s.attn.k.shape[1]);
    TensorView<T> d_k = dims.kv_grad_in_place ? s.attn.k : ctx.scratch.take(s.attn.k.shape);
    TensorView<T> d_v = dims.kv_grad_in_place ? s.attn.v : ctx.scratch.take(s.attn.v.shape);
    attention_backward_core(cfg.attention(), p.attn, q_norm, s.attn, ConstView<T>(dx), g.attn, dq_norm, d_k, d_v,
                            ctx);
    kv_chunks_backward(cfg, p, s, d_k, d_v, dims.kv_bf16, g, dxkv, sink, ctx);
  } else {
    const ConstView<T> kv_in = cfg.cross ? ConstView<T>(layer_norm_into_scratch(cfg.ln_kv(), p.ln_kv, s.xkv, ctx)) : q_norm;
    TensorView<T> dkv_norm = cfg.cross ? ctx.scratch.take(kv_in.shape) : dq_norm;
    attention_backward(cfg.attention(), p.attn, q_norm, kv_in, s.attn, ConstView<T>(dx), g.attn, dq_norm, dkv_norm,
                       ctx);
    if (cfg.cross) {
      TensorView<T> d_in = dxkv.empty() ? ctx.scratch.take(s.xkv.shape) : dxkv;
      layer_norm_backward(cfg.ln_kv(), p.ln_kv, s.xkv, s.ln_kv, ConstView<T>(dkv_norm), g.ln_kv, d_in, ctx);
      if (sink) sink(0, ConstView<T>(d_in).reshaped(Shape{d_in.rows(), d_in.cols()}));
    }
  }
  // LN parameter gradients are needed even when the caller wants no input gradient.
  layer_norm_backward(cfg.ln_q(), p.ln_q, s.xq, s.ln_q, ConstView<T>(dq_norm), g.ln_q,
                      dxq.empty() ? ctx.scratch.take(q_norm.shape) : dxq, ctx);
}

#define PCV_INSTANTIATE(T)                                                                        \
  template struct AttentionBlockParams<T>;                                                        \
  template struct AttentionBlockGrads<T>;                                                         \
  template struct AttentionBlockSaved<T>;                                                         \
  template void attention_block_forward<T>(const AttentionBlockConfig&,                           \
                                           const AttentionBlockParams<T>&, ConstView<T>,          \
                                           ConstView<T>, AttentionBlockSaved<T>&, TensorView<T>,  \
                                           Context<T>&);                                          \
  template void attention_block_forward<T>(const AttentionBlockConfig&,                           \
                                           const AttentionBlockParams<T>&, ConstView<T>,          \
                                           RowSource<T>, Shape, AttentionBlockSaved<T>&,          \
                                           TensorView<T>, Context<T>&);                           \
  template void attention_block_backward<T>(const AttentionBlockConfig&,                          \
                                            const AttentionBlockParams<T>&,                       \
                                            const AttentionBlockSaved<T>&, ConstView<T>,          \
                                            const AttentionBlockGrads<T>&, TensorView<T>,         \
                                            TensorView<T>, Context<T>&, const RowSink<T>&,        \
                                            const KvGradGroups<T>&);
PCV_INSTANTIATE(float)
PCV_INSTANTIATE(double)
#undef PCV_INSTANTIATE

}  // namespace perceiver
