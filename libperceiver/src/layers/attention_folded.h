// The chunked cross-attention with its K and V projections folded into the queries and the
// output (AttentionBlockConfig::fold_kv): the attention part of the block, from LN_q's output to
// the attention output before the query residual. Internal to attention_block.cpp.
#pragma once

#include "layers/attention_block.h"

namespace perceiver {

/// q_norm [B,Nq,q_dim] = LN_q(xq) -> s.x [B,Nq,out] (overwritten), saving what the backward
/// pass needs in s.attn (q, q_folded, o_folded, o, softmax) and LN_kv's row statistics.
template <class T>
void folded_attention_forward(const AttentionBlockConfig& cfg, const AttentionBlockParams<T>& p, ConstView<T> q_norm,
                              AttentionBlockSaved<T>& s, Context<T>& ctx);

/// The gradient dx of s.x's attention part -> parameter gradients (+=), dq_norm (+=) and the kv
/// input gradient: its sums over `groups` where the block can give them (see KvGradGroups), else
/// a row chunk at a time into dxkv (+=, unless empty) and to `sink` (if set).
template <class T>
void folded_attention_backward(const AttentionBlockConfig& cfg, const AttentionBlockParams<T>& p,
                               const AttentionBlockSaved<T>& s, ConstView<T> q_norm, ConstView<T> dx,
                               const AttentionBlockGrads<T>& g, TensorView<T> dq_norm, TensorView<T> dxkv,
                               const RowSink<T>& sink, const KvGradGroups<T>& groups, Context<T>& ctx);

}  // namespace perceiver
