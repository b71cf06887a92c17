// The Perceiver layer (HF PerceiverLayer), pre-LN, in its two forms (spec §2.3):
//   cross-attention block:  a = MHA(LN_q(xq), LN_kv(xkv)); x = xq + a (or x = a without the
//                           query residual); out = x + MLP(LN_m(x))
//   self-attention block:   the same with kv = q: LN_1's output feeds Q, K and V, no LN_kv.
// HF names relative to the layer: attention.self.layernorm1 (LN_q), attention.self.layernorm2
// (LN_kv, cross only), attention.self.{query,key,value}, attention.output.dense, layernorm
// (LN_m), mlp.dense1, mlp.dense2.
#pragma once

#include <functional>

#include "layers/attention.h"
#include "layers/layer_norm.h"
#include "layers/mlp.h"

namespace perceiver {

struct AttentionBlockConfig {
  bool cross = true;            // false: self-attention (kv = q)
  bool query_residual = true;   // x = xq + a; the decoder turns it off
  int64_t q_dim = 0, kv_dim = 0;
  int64_t heads = 1;
  int64_t qk_channels = 0;      // 0: default (spec §2.2)
  int64_t v_channels = 0;       // 0: default
  bool qk_from_q = false;       // cross_attention_shape_for_attention "q" instead of "kv"
  int64_t widening = 1;
  GeluKind gelu = GeluKind::kErf;
  double eps = 1e-5;
  int64_t kv_chunk = -1;        // see AttentionConfig
  double attention_dropout = 0; // on the attention probabilities, train mode only (AttentionConfig)
  // Cross only. > 0: LN_kv and the K/V projections run over this many kv rows at a time, so
  // LN_kv(xkv) is never stored (it is recomputed in backward) and the kv input gradient is made
  // chunk by chunk (and can go to a sink instead of a full tensor); the kv input itself can be
  // made chunk by chunk too (a RowSource). The encoder uses both to keep three [B, 52097, 704]
  // tensors out of memory: LN_kv(x), its gradient, and x.
  int64_t kv_row_chunk = 0;
  // Chunked only: keep the saved K and V as bf16 where the backend can (AttentionConfig::kv_bf16):
  // the encoder's two [B, 52097, 704] tensors at half the size.
  bool kv_bf16 = false;
  // Save the attention scores for the backward pass (AttentionConfig::keep_scores).
  bool keep_scores = false;
  // Chunked only, for a pass that runs forward only (set per pass where can_stream_kv says so):
  // each row chunk's K and V go straight into the attention, which merges them into its result
  // so far (AttentionDims::continues), so K and V are never held whole or saved. No backward
  // may follow.
  bool stream_kv = false;
  // Chunked, one head, streamed attention, set per pass where can_fold_kv says so: the K and V
  // projections are folded into the queries and the output, so no 52k-row K or V is ever made.
  // With X = LN_kv(xkv): Q·Kᵀ = (Q·W_k)·Xᵀ + Q·b_k, whose last term is the same for every key of
  // a row and cancels in the softmax, and P·V = (P·X)·W_vᵀ + b_v since P's rows sum to 1. The
  // attention runs on queries Q·W_k with X as its keys and values, a row chunk at a time merged
  // into the result so far (forward) or added up (backward, AttentionDims::key0), and b_k gets
  // no gradient (it has none). Training and forward-only passes alike; replaces stream_kv.
  bool fold_kv = false;
  // Folded over the kv rows' factors (RowSource::factors) with bf16 operands, for a pass with
  // backward (set per pass): the kernel's keys, this many bf16 values a row, are kept from forward
  // for the backward's key sums (the saved "kept_keys") instead of made again. Kinetics700: 416
  // values a row, 43 MB an example, for one of the two passes over the 52097 embedded rows. 0: made
  // again.
  int64_t kept_key_width = 0;
  bool chunked_kv() const { return cross && kv_row_chunk > 0; }

  /// Widths resolved as DM and HF do (spec §2.2).
  AttentionConfig attention() const;
  int64_t out_dim() const { return attention().out; }
  LayerNormConfig ln_q() const { return {q_dim, eps}; }
  LayerNormConfig ln_kv() const { return {kv_dim, eps}; }
  LayerNormConfig ln_mlp() const { return {out_dim(), eps}; }
  MlpConfig mlp() const { return {out_dim(), widening, gelu}; }
  /// Refuses inconsistent widths with a message naming the value.
  void validate() const;
};

/// Whether a forward-only pass of this chunked cross-attention at this shape can stream its K
/// and V (AttentionBlockConfig::stream_kv): the attention is streamed, the backend merges chunks
/// (Backend::merges_attention_chunks) and `mode` draws no dropout.
bool can_stream_kv(const AttentionBlockConfig& cfg, int64_t batch, int64_t nq, int64_t nk, const Backend& backend,
                   const TrainingMode& mode);

/// Whether this chunked cross-attention at this shape can fold its K/V projections
/// (AttentionBlockConfig::fold_kv): one head, a streamed attention on a backend that merges chunks
/// (Backend::merges_attention_chunks), no dropout drawn by `mode`, and fewer FLOPs than projecting:
/// per key row 2·Nq·kv_dim against kv_dim·(qk + v) + Nq·(qk + v).
bool can_fold_kv(const AttentionBlockConfig& cfg, int64_t batch, int64_t nq, int64_t nk, const Backend& backend,
                 const TrainingMode& mode);

std::vector<ParamSpec> attention_block_param_specs(const AttentionBlockConfig& cfg);
std::vector<TensorSpec> attention_block_saved_specs(const AttentionBlockConfig& cfg, int64_t batch,
                                                    int64_t nq, int64_t nk);

template <class T>
struct AttentionBlockParams {
  LayerNormParams<T> ln_q, ln_kv, ln_mlp;  // ln_kv is unbound for self-attention
  AttentionParams<T> attn;
  MlpParams<T> mlp;
  static AttentionBlockParams bind(const AttentionBlockConfig& cfg, const ParamBinder<T>& b);
};
template <class T>
struct AttentionBlockGrads {
  LayerNormGrads<T> ln_q, ln_kv, ln_mlp;
  AttentionGrads<T> attn;
  MlpGrads<T> mlp;
  static AttentionBlockGrads bind(const AttentionBlockConfig& cfg, const ParamBinder<T>& b);
};
/// A kv input [B·Nk, kv_dim] made on demand. `rows` makes rows [row0, row0 + rows.rows()) into
/// `rows`. `normalised` (optional) makes the same rows layer-normalised into `y` with their mean
/// and rstd, bitwise LN_kv of what `rows` makes, in one pass (Kernels::embeds_normalised): where
/// LN_kv needs no input rows afterwards (forward, and the folded backward), they never go
/// through memory. With `y16` (Kernels::stores_bf16) it also rounds them to bf16 there; `y` may
/// then have its shape only (no data).
template <class T>
struct RowSource {
  std::function<void(int64_t row0, TensorView<T> rows)> rows;
  std::function<void(int64_t row0, const LayerNormParams<T>& p, double eps, TensorView<T> y, uint16_t* y16, T* mean,
                     T* rstd)>
      normalised;
  // Optional, with `normalised`: the rows normalised without gain and shift, X̂, as factors F
  // [rows, factor_width] with X̂ = F·M_b (EmbedFactors), M [B, factor_width, C] from
  // factor_matrix. f and f16 as y and y16 above; mean and rstd as there. factor_columns: the
  // columns of F that rows [row0, row0 + n) of every item can be nonzero in (≤ factor_width).
  int64_t factor_width = 0;
  std::function<void(int64_t row0, double eps, TensorView<T> f, uint16_t* f16, T* mean, T* rstd)> factors;
  std::function<void(TensorView<T> m)> factor_matrix;
  std::function<int64_t(int64_t row0, int64_t n)> factor_columns;
  explicit operator bool() const { return bool(rows); }
};

template <class T>
struct AttentionBlockSaved {
  ConstView<T> xq, xkv;           // the inputs (views of the caller's tensors, not copies)
  RowSource<T> xkv_rows;          // set: xkv has its shape only (no data) and its rows come from here
  LayerNormSaved<T> ln_q, ln_kv;  // [B·Nq], [B·Nk] mean and rstd
  AttentionSaved<T> attn;
  TensorView<T> x;                // [B,Nq,out] after the attention residual
  LayerNormSaved<T> ln_mlp;       // [B·Nq]
  MlpSaved<T> mlp;
  // Cross only: [B·Nk·kept_key_width] bf16 values in as many floats / 2 (none without
  // kept_key_width), a range of kv_row_chunk rows after the other, each [B, rows, width].
  TensorView<T> kept_keys;
  static AttentionBlockSaved bind(const AttentionBlockConfig& cfg, const SavedBinder<T>& b);
};

/// xq [B,Nq,q_dim], xkv [B,Nk,kv_dim] (ignored for self-attention) -> y [B,Nq,out].
/// xq and xkv must stay alive and unchanged until backward.
template <class T>
void attention_block_forward(const AttentionBlockConfig& cfg, const AttentionBlockParams<T>& p,
                             ConstView<T> xq, ConstView<T> xkv, AttentionBlockSaved<T>& saved,
                             TensorView<T> y, Context<T>& ctx);

/// The chunked cross-attention (cfg.kv_row_chunk > 0) with its kv input [B,Nk,kv_dim] made on
/// demand by `xkv_rows`, a chunk of rows at a time, in forward and again in backward, so the
/// input is never stored whole; it must make the same rows both times.
template <class T>
void attention_block_forward(const AttentionBlockConfig& cfg, const AttentionBlockParams<T>& p, ConstView<T> xq,
                             RowSource<T> xkv_rows, Shape xkv_shape, AttentionBlockSaved<T>& saved, TensorView<T> y,
                             Context<T>& ctx);

/// Receives the kv input gradient a block of rows at a time: rows [row0, row0 + rows.rows()) of
/// xkv seen as [B·Nk, kv_dim].
template <class T>
using RowSink = std::function<void(int64_t row0, ConstView<T> rows)>;

/// The kv input gradient wanted only as sums over groups of its rows (the net's padding and mask
/// tokens): row r of xkv seen as [B·Nk, kv_dim] is in group ids[r] (< count; any other value: in
/// none). A folded block (fold_kv) on a backend with Kernels::folds_kv_norm adds the groups' sums
/// into `sums` [count, kv_dim] without ever forming the gradient's rows, and then calls no sink;
/// any other block, or one given a dxkv to fill, gives the rows to the sink instead and leaves
/// `sums` alone. A caller passes both and adds up what it gets.
template <class T>
struct KvGradGroups {
  const uint8_t* ids = nullptr;  // [B·Nk], backend memory
  int64_t count = 0;
  TensorView<T> sums;            // [count, kv_dim], +=
  explicit operator bool() const { return ids != nullptr && count > 0; }
};

/// Accumulates parameter gradients, dxq and (cross only) dxkv; either may be empty. With a sink,
/// the kv input gradient also goes to it (in row order), so dxkv can stay empty; with `groups`,
/// its group sums may replace both (KvGradGroups).
template <class T>
void attention_block_backward(const AttentionBlockConfig& cfg, const AttentionBlockParams<T>& p,
                              const AttentionBlockSaved<T>& saved, ConstView<T> dy,
                              const AttentionBlockGrads<T>& g, TensorView<T> dxq,
                              TensorView<T> dxkv, Context<T>& ctx, const RowSink<T>& sink = {},
                              const KvGradGroups<T>& groups = {});

}  // namespace perceiver
