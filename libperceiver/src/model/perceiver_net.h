// PerceiverForMultimodalAutoencoding as explicit forward/backward passes (spec §2.4):
//   x  [B,M,C] = preprocessor(video, audio, label)
//   z  [B,N,D] = cross_attention(latents, x); then num_blocks × the self-attention block
//   q  [B,O,E] = decoder queries of the output points
//   y  [B,O,E] = decoding_cross_attention(q, z);  f [B,O,F] = final_layer(y)
//   outputs    = per-modality heads on f's audio, image and label rows
// Templated on the scalar: float for training, double for gradient checks.
// Activations live in two planned arenas: the encoder's (sized by B) and the decoder's (sized
// by B and the number of output points), so full-output inference can decode in chunks.
#pragma once

#include <memory>
#include <vector>

#include "core/context.h"
#include "core/params.h"
#include "layers/attention_block.h"
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

template <class T>
class PerceiverNet {
 public:
  PerceiverNet(const ModelConfig& cfg, const Backend& backend);

  /// Every parameter with its HF state_dict name, in HF's module order.
  static ParamRegistry make_registry(const ModelConfig& cfg);

  const ModelConfig& config() const { return cfg_; }
  ParamStore<T>& store() { return store_; }
  Context<T>& context() { return ctx_; }

  /// Preprocessor, encoder cross-attention and latent stack. video [B,T,H,W,3], audio [B,S],
  /// labels [B], mask [B·M] (1 = replace the token by its mask token). Inputs must outlive
  /// backward.
  void encode(const T* video, const T* audio, const int64_t* labels, int64_t batch, std::vector<uint8_t> mask);

  /// Decoder over the encoded latents for the given output points. The views stay valid until
  /// the next decode.
  DecoderOutputs<T> decode(const OutputPoints& pts);

  /// Backward from output gradients (shapes of DecoderOutputs) through the last decode and
  /// encode. Parameter gradients accumulate into store().grads().
  void backward(ConstView<T> d_image, ConstView<T> d_audio, ConstView<T> d_label);

  /// The latents after the encoder [B,N,D] and the preprocessed input [B,M,C] (for parity
  /// dumps and debugging).
  ConstView<T> latents() const { return z_final_; }
  ConstView<T> encoder_input() const { return x_; }

 private:
  void plan_encoder(int64_t batch);
  void plan_decoder(int64_t batch, const OutputPoints& pts);
  void heads_backward(ConstView<T> d_image, ConstView<T> d_audio, ConstView<T> d_label, TensorView<T> d_final);

  ModelConfig cfg_;
  Context<T> ctx_;
  ParamStore<T> store_;
  PositionTables positions_;
  AttentionBlockConfig enc_cfg_, self_cfg_, dec_cfg_;
  LinearConfig final_cfg_, audio_head_, image_head_, label_head_;

  int64_t batch_ = 0;
  std::vector<uint8_t> mask_;
  const T *video_ = nullptr, *audio_ = nullptr;
  const int64_t* labels_ = nullptr;
  PlannedArena<T> enc_acts_;
  AttentionBlockSaved<T> enc_saved_;
  std::vector<AttentionBlockSaved<T>> self_saved_;  // one per application (num_blocks × per_block)
  TensorView<T> x_, z0_, z_final_;
  std::vector<TensorView<T>> z_;                     // output of each self-attention application

  OutputPoints pts_;
  int64_t dec_batch_ = -1, dec_pi_ = -1, dec_pa_ = -1;
  PlannedArena<T> dec_acts_;
  AttentionBlockSaved<T> dec_saved_;
};

}  // namespace perceiver
