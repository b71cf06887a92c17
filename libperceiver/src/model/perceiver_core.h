// The modality-agnostic Perceiver IO core (spec §2.4): an encoder that attends a trainable latent
// array to any input array x [B,M,C] and refines it with a stack of self-attention layers, and a
// decoder that attends any query array q [B,O,E] to the latents. They know nothing about video,
// audio or labels: a model with other modalities or other queries builds its own x and q and
// reuses these classes unchanged (apps/examples/av_autoencoder.cpp does, for video + audio only).
//
// Parameters are registered under a prefix with HF's names:
//   <prefix>embeddings.latents, <prefix>encoder.cross_attention.*, <prefix>encoder.self_attends.<i>.*
//   <prefix>decoder.decoder.decoding_cross_attention.*, <prefix>decoder.decoder.final_layer.*
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "layers/attention_block.h"

namespace perceiver {

/// Called during backward whenever the gradients of every parameter at flat offset >= `offset`
/// are final, with decreasing offsets (parameters are laid out in forward order and backward
/// finishes them from the end), so a data-parallel allreduce can start on them early.
using GradsReady = std::function<void(int64_t offset)>;

/// What follows a forward pass. A forward-only pass (evaluation, inference) keeps nothing that
/// only backward reads: the encoder cross-attention plans no kept scores
/// (AttentionBlockConfig::keep_scores), and where the backend merges attention over key chunks but
/// the K/V projections are not folded away (fold_kv) it makes K and V a row chunk at a time and
/// never holds them whole (stream_kv); the latent layers share one set of saved state. No backward
/// may follow it.
enum class Pass { kWithBackward, kForwardOnly };

struct EncoderConfig {
  int64_t num_latents = 0, d_latents = 0;
  int64_t num_blocks = 1;                  // applications of the self-attention stack (shared weights)
  int64_t self_attends_per_block = 1;
  AttentionBlockConfig cross;              // q: latents [D], kv: inputs [C]
  AttentionBlockConfig self;               // [D]
  // Fold the cross-attention's K/V projections (AttentionBlockConfig::fold_kv) in every pass
  // where can_fold_kv says it pays; each pass's plan decides.
  bool fold_kv = false;
  // Keep the folded cross-attention's bf16 keys from forward for backward where its input comes
  // as factors (AttentionBlockConfig::kept_key_width); each pass's plan decides.
  bool keep_keys = false;
  void validate() const;
};

struct DecoderConfig {
  AttentionBlockConfig cross;              // q: queries [E], kv: latents [D]
  int64_t output_channels = 0;             // final_layer: E -> F
  LinearConfig final_layer() const { return {cross.q_dim, output_channels, ParamRole::kHeadWeight}; }
  void validate() const;
};

template <class T>
class PerceiverEncoder {
 public:
  PerceiverEncoder(EncoderConfig cfg, std::string prefix);
  const EncoderConfig& config() const { return cfg_; }
  std::vector<ParamSpec> param_specs() const;  // names include the prefix

  /// x [B,M,C] -> latents z [B,N,D] (valid until the next forward). x must stay alive and
  /// unchanged until backward.
  ConstView<T> forward(ParamStore<T>& store, ConstView<T> x, Context<T>& ctx, Pass pass = Pass::kWithBackward);
  /// The same with x [B,M,C] (`x_shape`) made on demand, a chunk of rows at a time, in forward
  /// and again in backward (the cross-attention must be chunked: cross.kv_row_chunk > 0).
  ConstView<T> forward(ParamStore<T>& store, RowSource<T> x_rows, Shape x_shape, Context<T>& ctx,
                       Pass pass = Pass::kWithBackward);
  /// dz [B,N,D] -> parameter gradients (+=); the input gradient goes to `dx_sink` in row chunks
  /// (it is never built whole), or is dropped if the sink is empty. With `dx_groups`, a folded
  /// cross-attention that can gives the input gradient's group sums there instead, and calls no
  /// sink (KvGradGroups).
  void backward(ParamStore<T>& store, ConstView<T> dz, const RowSink<T>& dx_sink, Context<T>& ctx,
                const GradsReady& ready = {}, const KvGradGroups<T>& dx_groups = {});
  /// The pass the last forward ran as.
  Pass pass() const { return pass_; }
  /// Whether the last forward folded the cross-attention's K/V projections (fold_kv).
  bool folds_kv() const { return cross_.fold_kv; }

 private:
  // factor_width: that of the input's factors (RowSource::factor_width; 0: none).
  void plan(int64_t batch, int64_t tokens, Pass pass, int64_t factor_width, Context<T>& ctx);
  // Checks, plans, binds, broadcasts the latents.
  void begin(ParamStore<T>& store, const Shape& x_shape, Pass pass, int64_t factor_width, Context<T>& ctx);
  ConstView<T> latent_stack(Context<T>& ctx);  // the self-attention layers after the cross-attention
  void bind(ParamStore<T>& store);
  EncoderConfig cfg_;
  std::string prefix_;
  // Views of the store's parameters and gradients, bound once per parameter arena (keyed by its
  // address: arenas never move, and a store assigned anew has a new one).
  const T* bound_ = nullptr;
  ConstView<T> latents_;
  TensorView<T> d_latents_;
  AttentionBlockParams<T> cross_p_;
  AttentionBlockGrads<T> cross_g_;
  std::vector<AttentionBlockParams<T>> self_p_;  // one per layer of the block (shared by its applications)
  std::vector<AttentionBlockGrads<T>> self_g_;
  std::vector<int64_t> self_offsets_;            // each layer's first parameter offset (GradsReady)
  int64_t latents_offset_ = 0;
  int64_t batch_ = 0, tokens_ = 0;
  AttentionBlockConfig cross_;  // cfg_.cross as the last forward ran it (kept scores, streamed K/V)
  Pass pass_ = Pass::kWithBackward;  // what the arena is planned for: the last forward's pass
  PlannedArena<T> acts_;
  AttentionBlockSaved<T> cross_saved_;
  std::vector<AttentionBlockSaved<T>> self_saved_;  // one per application
  TensorView<T> latents_in_, z_cross_;
  std::vector<TensorView<T>> z_;                     // output of each self-attention application
};

template <class T>
class PerceiverDecoder {
 public:
  PerceiverDecoder(DecoderConfig cfg, std::string prefix);
  const DecoderConfig& config() const { return cfg_; }
  std::vector<ParamSpec> param_specs() const;

  /// q [B,O,E], z [B,N,D] -> f [B,O,F] (valid until the next forward). q and z must stay alive
  /// until backward.
  ConstView<T> forward(ParamStore<T>& store, ConstView<T> q, ConstView<T> z, Context<T>& ctx);
  /// df [B,O,F] -> parameter gradients, dq and dz (+=; either may be empty).
  void backward(ParamStore<T>& store, ConstView<T> df, TensorView<T> dq, TensorView<T> dz, Context<T>& ctx);

 private:
  void bind(ParamStore<T>& store);
  DecoderConfig cfg_;
  std::string prefix_;
  const T* bound_ = nullptr;  // as in PerceiverEncoder
  AttentionBlockParams<T> cross_p_;
  AttentionBlockGrads<T> cross_g_;
  LinearParams<T> final_p_;
  LinearGrads<T> final_g_;
  Shape planned_;
  PlannedArena<T> acts_;
  AttentionBlockSaved<T> saved_;
};

}  // namespace perceiver
