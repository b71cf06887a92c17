// Multi-head attention with separate query and key/value inputs (spec §2.1):
//   Q = Linear(q_in → qk), K = Linear(kv_in → qk), V = Linear(kv_in → v),
//   O = softmax(Q·Kᵀ / sqrt(qk/heads))·V per head, out = Linear(v → out)(O).
// HF names: "self.query", "self.key", "self.value", "output.dense" (relative to "attention.").
// Shapes: B batch, Nq query rows, Nk key rows.
#pragma once

#include "layers/linear.h"

namespace perceiver {

struct AttentionConfig {
  int64_t q_dim = 0, kv_dim = 0;  // input widths
  int64_t qk = 0, v = 0, out = 0;  // projection widths (already resolved; see attention_block.h)
  int64_t heads = 1;
  // Key/value chunk for the streamed kernel: <0 choose by size, 0 materialise, >0 stream.
  int64_t kv_chunk = -1;
  // With the streamed kernel, backward writes dK/dV over the saved K/V (AttentionDims).
  bool kv_grad_in_place = false;
  // With kv_grad_in_place, keep K and V (and then dK, dV) as bf16 where the backend can
  // (Kernels::stores_bf16, bf16 products): AttentionDims::kv_bf16. The saved "k" and "v" then
  // hold two bf16 values per element, [B,Nk,qk/2] and [B,Nk,v/2].
  bool kv_bf16 = false;
  // Streamed only: save the scores for the backward pass instead of recomputing them
  // (AttentionDims::keep_scores); the saved "softmax" then holds B·H·Nq·(1 + Nk) values.
  bool keep_scores = false;
  // False: the caller makes K and V a row chunk at a time and runs the kernel on each
  // (attention_block's stream_kv, forward only), so the saved "k" and "v" have no rows.
  bool save_kv = true;
  // One head, streamed: the K and V projections are folded into the queries and the output
  // (attention_block's fold_kv), so the kernel runs with the kv input (normalised) as its keys
  // and values, kv_dim wide: dims() gives dqk = dv = kv_dim with the scale of the real qk width,
  // and the saved "k" and "v" have no rows; "q_folded" and "o_folded" hold what replaces them.
  bool fold_kv = false;
  // Attention dropout on the probabilities, applied only in train mode (Context::mode).
  double dropout = 0;

  LinearConfig query() const { return {q_dim, qk}; }
  LinearConfig key() const { return {kv_dim, qk}; }
  LinearConfig value() const { return {kv_dim, v}; }
  LinearConfig output() const { return {v, out}; }
  /// The kernel dims for a call, with the materialise/stream choice resolved (no dropout).
  AttentionDims dims(int64_t batch, int64_t nq, int64_t nk) const;
  /// dims() plus, in train mode with dropout > 0, the pass's dropout key and `stream`.
  AttentionDims dims(int64_t batch, int64_t nq, int64_t nk, const TrainingMode& mode, uint32_t stream) const;
  /// Refuses widths the heads do not divide, naming the value.
  void validate() const;
};

/// Probabilities beyond this many bytes (B·H·Nq·Nk floats) switch to the streamed kernel. At
/// kinetics700 this streams the encoder (163 MB per example) and the latent self-attention
/// (20 MB per layer and example, 157 MB over the 8 layers).
inline constexpr int64_t kMaterialiseLimitBytes = int64_t(16) << 20;
inline constexpr int64_t kDefaultKvChunk = 512;

std::vector<ParamSpec> attention_param_specs(const AttentionConfig& cfg);
/// "q" [B,Nq,qk], "k" [B,Nk,qk], "v" [B,Nk,v] (half the width when kv_bf16; no rows without
/// save_kv or with fold_kv), "o" [B,Nq,v], "softmax" (P, or the row lse and, with keep_scores, the
/// scores), and with fold_kv (else no rows) "q_folded" and "o_folded" [B,Nq,kv_dim].
std::vector<TensorSpec> attention_saved_specs(const AttentionConfig& cfg, int64_t batch, int64_t nq,
                                              int64_t nk);

template <class T>
struct AttentionParams {
  LinearParams<T> query, key, value, output;
  static AttentionParams bind(const ParamBinder<T>& b) {
    return {LinearParams<T>::bind(b.sub("self.query.")), LinearParams<T>::bind(b.sub("self.key.")),
            LinearParams<T>::bind(b.sub("self.value.")), LinearParams<T>::bind(b.sub("output.dense."))};
  }
};
template <class T>
struct AttentionGrads {
  LinearGrads<T> query, key, value, output;
  static AttentionGrads bind(const ParamBinder<T>& b) {
    return {LinearGrads<T>::bind(b.sub("self.query.")), LinearGrads<T>::bind(b.sub("self.key.")),
            LinearGrads<T>::bind(b.sub("self.value.")), LinearGrads<T>::bind(b.sub("output.dense."))};
  }
};
template <class T>
struct AttentionSaved {
  TensorView<T> q;        // [B,Nq,qk]
  TensorView<T> k;        // [B,Nk,qk]
  TensorView<T> v;        // [B,Nk,v]
  TensorView<T> o;        // [B,Nq,v]  heads merged, before the output projection
  TensorView<T> softmax;  // [B,H,Nq,Nk] probabilities, or [B,H,Nq] log-sum-exp when streamed
  TensorView<T> q_folded;  // fold_kv: [B,Nq,kv_dim] Q·W_k, the queries in the kv input's space
  TensorView<T> o_folded;  // fold_kv: [B,Nq,kv_dim] P·LN_kv(x), the output before the value projection
                           // (P·X̂, without LN_kv's gain and shift, where those are folded too)
  // The dropout stream of this layer application (its owner sets a distinct one per
  // application, e.g. a hash of the parameter prefix and the application index).
  uint32_t dropout_stream = 0;
  static AttentionSaved bind(const SavedBinder<T>& b) {
    return {b("q"), b("k"), b("v"), b("o"), b("softmax"), b("q_folded"), b("o_folded")};
  }
};

/// xq [B,Nq,q_dim], xkv [B,Nk,kv_dim] -> y [B,Nq,out] (overwritten).
template <class T>
void attention_forward(const AttentionConfig& cfg, const AttentionParams<T>& p, ConstView<T> xq,
                       ConstView<T> xkv, const AttentionSaved<T>& saved, TensorView<T> y,
                       Context<T>& ctx);

/// The attention layer's forward once K and V are in `saved` (the query projection, the
/// attention core and the output projection), for callers that project K/V themselves in row
/// chunks (attention_block's kv_row_chunk).
template <class T>
void attention_forward_from_kv(const AttentionConfig& cfg, const AttentionParams<T>& p, ConstView<T> xq,
                               const AttentionSaved<T>& saved, TensorView<T> y, Context<T>& ctx);

/// Everything but the K/V projections' backward: output projection, attention core and query
/// projection. Writes the gradients of K and V into d_k [B,Nk,qk] and d_v [B,Nk,v] (+=), so a
/// caller can run the K/V projections' backward over row chunks (attention_block's kv_row_chunk).
template <class T>
void attention_backward_core(const AttentionConfig& cfg, const AttentionParams<T>& p, ConstView<T> xq,
                             const AttentionSaved<T>& saved, ConstView<T> dy, const AttentionGrads<T>& g,
                             TensorView<T> dxq, TensorView<T> d_k, TensorView<T> d_v, Context<T>& ctx);

/// Accumulates parameter gradients, dxq and dxkv. For self-attention pass the same buffer as
/// dxq and dxkv: Q, K and V gradients then sum as they should (spec §9).
template <class T>
void attention_backward(const AttentionConfig& cfg, const AttentionParams<T>& p, ConstView<T> xq,
                        ConstView<T> xkv, const AttentionSaved<T>& saved, ConstView<T> dy,
                        const AttentionGrads<T>& g, TensorView<T> dxq, TensorView<T> dxkv,
                        Context<T>& ctx);

}  // namespace perceiver
