// PerceiverForMultimodalAutoencoding as explicit forward/backward passes (spec §2.4):
//   x  [B,M,C] = preprocessor(video, audio, label)
//   z  [B,N,D] = cross_attention(latents, x); then num_blocks × the self-attention block
//   q  [B,O,E] = decoder queries of the output points
//   y  [B,O,E] = decoding_cross_attention(q, z);  f [B,O,F] = final_layer(y)
//   outputs    = per-modality heads on f's audio, image and label rows
// Templated on the scalar: float for training, double for gradient checks.
// Activations live in two planned arenas: the encoder's (sized by B) and the decoder's (sized
// by B and the number of output points), so full-output inference can decode in chunks. Every
// tensor is the backend's: the host hands over a batch and output points and reads results back.
#pragma once

#include <vector>

#include "core/context.h"
#include "core/params.h"
#include "model/perceiver_core.h"
#include "model/decoder_queries.h"
#include "model/preprocessor.h"
#include "perceiver/config.h"

namespace perceiver {

template <class T>
struct DecoderOutputs {
  TensorView<T> image;  // [B, Pi, 3]
  TensorView<T> audio;  // [B, Pa·samples_per_patch]
  TensorView<T> label;  // [B, L] logits
};

/// Device views of the inputs of the last encode() and decode(), for the loss.
template <class T>
struct StepInputs {
  const T* video = nullptr;            // [B,T,H,W,3]
  const T* audio = nullptr;            // [B,S]
  const int64_t* labels = nullptr;     // [B]
  const uint8_t* mask = nullptr;       // [B·M]
  const int64_t* image_points = nullptr;  // [Pi]
  const int64_t* audio_points = nullptr;  // [Pa]
  int64_t num_image = 0, num_audio = 0;
};

/// What a net spends memory on for speed.
struct NetOptions {
  /// The encoder cross-attention keeps its scores for the backward pass where the backend reads
  /// them (Backend::keeps_attention_scores): B·Nq·Nk floats more (163 MB per example at
  /// kinetics700) for a backward pass without its costliest product. Where it keeps no scores but
  /// stores bf16 (the CPU with bf16 products), it keeps the bf16 keys of the folded attention over
  /// the input's factors instead (EncoderConfig::keep_keys: 43 MB per example at kinetics700), so
  /// the backward does not embed and normalise the inputs again. A forward-only encode
  /// (Pass::kForwardOnly) keeps none either way.
  bool keep_attention_scores = true;
  /// The encoder cross-attention folds its K and V projections into its queries and output where
  /// that takes fewer FLOPs (AttentionBlockConfig::fold_kv, can_fold_kv; one head, a backend that
  /// merges attention chunks): no K or V over the inputs, in training and forward-only passes
  /// (at kinetics700, 2 × 52097 × 704 floats per example and 39% of a training step's FLOPs). The
  /// same model to float rounding; false projects K and V as the model is written.
  bool fold_kv_projections = true;
  /// Rows of the encoder input (over the whole batch) that LN_kv and the K/V projections handle
  /// at once. 0: the backend's choice (Backend::preferred_row_chunk), else 2048. Larger takes more
  /// memory (about four chunk × input_channels floats in the backward) for fewer, larger products.
  int64_t kv_row_chunk = 0;
  /// With the K/V projections and LN_kv's gain folded, the encoder attends over the input rows'
  /// factors (EmbedFactors) where they are narrower than the rows and the backend makes them
  /// (Kernels::embeds_factors) (kinetics700: 416 channels for 704, ~0.6 of the cross-attention's
  /// FLOPs). The same model to float rounding.
  bool factor_kv_inputs = true;
};

/// The encoder's memory-for-speed choices on a backend (NetOptions): `kv_bf16` keeps its K and V
/// as bf16 (bf16 products on a backend that can store bf16; AttentionBlockConfig::kv_bf16),
/// `keep_scores` its cross-attention scores (AttentionBlockConfig::keep_scores), `fold_kv` folds
/// its K/V projections where it pays (EncoderConfig::fold_kv), `kv_row_chunk` is its LN_kv and
/// K/V projections' row chunk (AttentionBlockConfig::kv_row_chunk; 0: 2048).
struct EncoderMemory {
  bool kv_bf16 = false;
  bool keep_scores = false;
  bool keep_keys = false;  // EncoderConfig::keep_keys
  bool fold_kv = false;
  int64_t kv_row_chunk = 0;
};

/// The encoder and decoder settings of PerceiverForMultimodalAutoencoding for a config.
EncoderConfig multimodal_encoder_config(const ModelConfig& cfg, EncoderMemory memory = {});
DecoderConfig multimodal_decoder_config(const ModelConfig& cfg);

template <class T>
class PerceiverNet {
 public:
  PerceiverNet(const ModelConfig& cfg, Backend& backend, NetOptions options = {});
  PerceiverNet(const PerceiverNet&) = delete;
  PerceiverNet& operator=(const PerceiverNet&) = delete;

  /// Every parameter with its HF state_dict name, in HF's state_dict order.
  static ParamRegistry make_registry(const ModelConfig& cfg);

  const ModelConfig& config() const { return cfg_; }
  ParamStore<T>& store() { return store_; }
  Context<T>& context() { return ctx_; }
  Backend& backend() { return ctx_.backend; }

  /// Preprocessor, encoder cross-attention and latent stack. Host inputs video [B,T,H,W,3],
  /// audio [B,S], labels [B] and mask [B·M] (1 = replace the token by its mask token) are
  /// checked and uploaded once; the device copies live until the next encode. `pass`: whether a
  /// backward follows (evaluation and inference say kForwardOnly, which keeps nothing for one:
  /// no kept scores, and K and V streamed where the backend can; see Pass).
  void encode(const T* video, const T* audio, const int64_t* labels, int64_t batch, const std::vector<uint8_t>& mask,
              Pass pass = Pass::kWithBackward);

  /// Decoder over the encoded latents for the given output points (uploaded). The views stay
  /// valid until the next decode.
  DecoderOutputs<T> decode(const OutputPoints& pts);

  /// The outputs of the last decode (device views).
  DecoderOutputs<T> last_outputs();

  /// Zeroed device buffers shaped like the last decode's outputs, for the loss gradient.
  DecoderOutputs<T> output_grads();

  /// Backward from output gradients (shapes of DecoderOutputs) through the last decode and
  /// encode. Parameter gradients accumulate into store().grads().
  /// `ready` (optional) hears when trailing parameter ranges are final (see GradsReady).
  void backward(ConstView<T> d_image, ConstView<T> d_audio, ConstView<T> d_label, const GradsReady& ready = {});

  /// The device inputs of the last encode and decode.
  StepInputs<T> inputs() const;
  /// kLossTermCount device doubles that compute_loss() writes and reads back.
  double* loss_slot() { return loss_.data(); }

  /// Whether the last encode folded the encoder's K/V projections (NetOptions::fold_kv_projections;
  /// a benchmark counts the FLOPs it ran with it, forward_flops).
  bool folds_kv_projections() const { return encoder_.folds_kv(); }
  /// Whether its backward gives the encoder's input gradient only as the sums that the padding and
  /// mask tokens take (a folded encoder on a backend with Kernels::folds_kv_norm; training_flops).
  bool sums_input_gradient() const { return encoder_.folds_kv() && ctx_.k.folds_kv_norm(); }
  /// Channels of the input rows' factors that the last encode attended over (0: the rows
  /// themselves; NetOptions::factor_kv_inputs).
  int64_t kv_factor_width() const { return sums_input_gradient() ? factor_width_ : 0; }
  /// The factors' columns that the attention's products ran over, averaged over the input rows
  /// (AttentionDims::key_columns: fewer in ranges without the wider modality's rows); 0 as above.
  double kv_factor_columns() const;

  /// The latents after the encoder [B,N,D] (a device view).
  ConstView<T> latents() const { return z_; }
  /// The preprocessed input [B,M,C] of the last encode, for parity dumps and debugging: made
  /// whole on request (training never stores it; the encoder makes it a chunk at a time).
  ConstView<T> encoder_input();

 private:
  void upload_inputs(const T* video, const T* audio, const int64_t* labels, int64_t batch,
                     const std::vector<uint8_t>& mask);
  void plan_io(int64_t batch, const OutputPoints& pts);
  void heads_backward(ConstView<T> d_image, ConstView<T> d_audio, ConstView<T> d_label, TensorView<T> d_final);

  ModelConfig cfg_;
  bool factor_inputs_ = true;  // NetOptions::factor_kv_inputs
  int64_t factor_width_ = 0;   // of the last encode
  Context<T> ctx_;
  ParamStore<T> store_;
  PositionTables positions_;
  QueryTables query_tables_;
  PerceiverEncoder<T> encoder_;
  PerceiverDecoder<T> decoder_;
  LinearConfig audio_head_, image_head_, label_head_;
  // Parameter and gradient views, bound once (the arenas never move).
  PreprocessorParams<T> pre_p_;
  PreprocessorGrads<T> pre_g_;
  DecoderQueryParams<T> query_p_;
  DecoderQueryGrads<T> query_g_;
  LinearParams<T> audio_p_, image_p_, label_p_;
  LinearGrads<T> audio_g_, image_g_, label_g_;

  // Inputs of the last encode (grown to the largest batch seen, never shrunk).
  int64_t batch_ = 0;
  Arena<T> video_, audio_;
  Arena<int64_t> labels_;
  Arena<uint8_t> mask_;
  Arena<uint8_t> input_groups_;  // [B·M] the input rows' gradient groups (input_grad_groups)
  std::vector<uint8_t> input_groups_host_;  // their host copy, reused every step
  Arena<double> loss_;
  PlannedArena<T> x_arena_;  // x [B,M,C], only once encoder_input() was asked for
  TensorView<T> x_;
  ConstView<T> z_;

  // The last decode: its points (host copy and device [image | audio]) and activations.
  OutputPoints pts_;
  Arena<int64_t> points_;
  bool decoded_ = false;  // a decode() followed the last encode()
  int64_t io_batch_ = -1, io_pi_ = -1, io_pa_ = -1;
  PlannedArena<T> io_acts_;  // queries, head inputs and outputs, output gradients
  ConstView<T> f_;
};

}  // namespace perceiver
