#include "model/perceiver_net.h"

#include <algorithm>
#include <string>

namespace perceiver {
namespace {

const std::string kPre = "perceiver.input_preprocessor.";
const std::string kLatents = "perceiver.embeddings.latents";
const std::string kEncCross = "perceiver.encoder.cross_attention.";
const std::string kDecoder = "perceiver.decoder.";
const std::string kDecCross = "perceiver.decoder.decoder.decoding_cross_attention.";
const std::string kFinal = "perceiver.decoder.decoder.final_layer.";
const std::string kHeads = "perceiver.output_postprocessor.modalities.";

// Rows of the encoder input handled at once by LN_kv and the K/V projections: large enough for
// efficient GEMMs, small enough that the chunk buffers (2 × 4096 × 704 floats) stay small.
constexpr int64_t kEncoderKvRowChunk = 4096;

std::string self_prefix(int64_t i) { return "perceiver.encoder.self_attends." + std::to_string(i) + "."; }

AttentionBlockConfig encoder_cross(const ModelConfig& c) {
  AttentionBlockConfig b;
  b.cross = true;
  b.query_residual = c.use_query_residual;
  b.q_dim = c.d_latents;
  b.kv_dim = c.input_channels();
  b.heads = c.num_cross_attention_heads;
  b.qk_channels = c.qk_channels;
  b.v_channels = c.v_channels;
  b.qk_from_q = c.cross_attention_shape_for_attention == "q";
  b.widening = c.cross_attention_widening_factor;
  b.gelu = c.hidden_act;
  b.eps = c.ln_eps;
  b.kv_row_chunk = kEncoderKvRowChunk;
  return b;
}

AttentionBlockConfig latent_self(const ModelConfig& c) {
  AttentionBlockConfig b;
  b.cross = false;
  b.query_residual = true;
  b.q_dim = c.d_latents;
  b.heads = c.num_self_attention_heads;
  b.qk_channels = c.qk_channels;
  b.v_channels = c.v_channels;
  b.widening = c.self_attention_widening_factor;
  b.gelu = c.hidden_act;
  b.eps = c.ln_eps;
  return b;
}

AttentionBlockConfig decoder_cross(const ModelConfig& c) {
  AttentionBlockConfig b;
  b.cross = true;
  b.query_residual = c.decoder_use_query_residual;
  b.q_dim = c.query_channels();
  b.kv_dim = c.d_latents;
  b.heads = c.decoder_num_heads;
  b.qk_from_q = c.cross_attention_shape_for_attention == "q";
  b.widening = c.decoder_widening_factor;
  b.gelu = c.hidden_act;
  b.eps = c.ln_eps;
  return b;
}

// Copies rows [row0, row0+n) of every batch item of src [B, O, F] into dst [B, n, F], or back.
template <class T>
void gather_rows(const T* src, int64_t B, int64_t O, int64_t F, int64_t row0, int64_t n, T* dst) {
  for (int64_t b = 0; b < B; ++b) std::copy(src + (b * O + row0) * F, src + (b * O + row0 + n) * F, dst + b * n * F);
}
template <class T>
void scatter_add_rows(const T* src, int64_t B, int64_t O, int64_t F, int64_t row0, int64_t n, T* dst) {
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < n * F; ++i) dst[(b * O + row0) * F + i] += src[b * n * F + i];
}

}  // namespace

template <class T>
ParamRegistry PerceiverNet<T>::make_registry(const ModelConfig& c) {
  c.validate();
  // HF's state_dict order: input_preprocessor, output_postprocessor, embeddings, encoder, decoder
  // (the label query, the shared decoder, then the paddings).
  ParamRegistry r;
  r.add(preprocessor_param_specs(c), kPre);
  auto head = [](int64_t in, int64_t out) { return LinearConfig{in, out, ParamRole::kHeadWeight}; };
  r.add(linear_param_specs(head(c.output_num_channels, c.samples_per_patch)), kHeads + "audio.classifier.");
  r.add(linear_param_specs(head(c.output_num_channels, 3)), kHeads + "image.classifier.");
  r.add(linear_param_specs(head(c.output_num_channels, c.num_labels)), kHeads + "label.classifier.");
  r.add({kLatents, Shape{c.num_latents, c.d_latents}, ParamRole::kEmbedding, 0});
  r.add(attention_block_param_specs(encoder_cross(c)), kEncCross);
  for (int64_t i = 0; i < c.num_self_attends_per_block; ++i) r.add(attention_block_param_specs(latent_self(c)), self_prefix(i));
  auto dq = decoder_query_param_specs(c);
  r.add(std::vector<ParamSpec>{dq[3]}, kDecoder);
  r.add(attention_block_param_specs(decoder_cross(c)), kDecCross);
  r.add(linear_param_specs(head(c.query_channels(), c.output_num_channels)), kFinal);
  r.add(std::vector<ParamSpec>{dq[0], dq[1], dq[2]}, kDecoder);
  return r;
}

template <class T>
PerceiverNet<T>::PerceiverNet(const ModelConfig& cfg, const Backend& backend)
    : cfg_(cfg),
      ctx_(backend),
      store_(make_registry(cfg)),
      positions_(cfg),
      enc_cfg_(encoder_cross(cfg)),
      self_cfg_(latent_self(cfg)),
      dec_cfg_(decoder_cross(cfg)),
      final_cfg_{cfg.query_channels(), cfg.output_num_channels, ParamRole::kHeadWeight},
      audio_head_{cfg.output_num_channels, cfg.samples_per_patch, ParamRole::kHeadWeight},
      image_head_{cfg.output_num_channels, 3, ParamRole::kHeadWeight},
      label_head_{cfg.output_num_channels, cfg.num_labels, ParamRole::kHeadWeight} {
  enc_cfg_.validate();
  self_cfg_.validate();
  dec_cfg_.validate();
}

template <class T>
void PerceiverNet<T>::plan_encoder(int64_t B) {
  if (B == batch_) return;
  const ModelConfig& c = cfg_;
  const int64_t M = c.input_tokens(), N = c.num_latents, D = c.d_latents;
  const int64_t apps = c.num_blocks * c.num_self_attends_per_block;
  ArenaPlan plan;
  plan.add("x", Shape{B, M, c.input_channels()});
  plan.add("latents_in", Shape{B, N, D});
  plan.add(attention_block_saved_specs(enc_cfg_, B, N, M), "enc.");
  plan.add("z_enc", Shape{B, N, D});
  for (int64_t k = 0; k < apps; ++k) {
    plan.add(attention_block_saved_specs(self_cfg_, B, N, N), "self" + std::to_string(k) + ".");
    plan.add("z_self" + std::to_string(k), Shape{B, N, D});
  }
  enc_acts_ = PlannedArena<T>(std::move(plan));
  enc_saved_ = AttentionBlockSaved<T>::bind(enc_cfg_, {enc_acts_, "enc."});
  self_saved_.clear();
  z_.clear();
  for (int64_t k = 0; k < apps; ++k) {
    self_saved_.push_back(AttentionBlockSaved<T>::bind(self_cfg_, {enc_acts_, "self" + std::to_string(k) + "."}));
    z_.push_back(enc_acts_["z_self" + std::to_string(k)]);
  }
  x_ = enc_acts_["x"];
  z0_ = enc_acts_["latents_in"];
  batch_ = B;
}

template <class T>
void PerceiverNet<T>::encode(const T* video, const T* audio, const int64_t* labels, int64_t B,
                             std::vector<uint8_t> mask) {
  PCV_CHECK(B > 0, "batch size must be positive, got ", B);
  PCV_CHECK(int64_t(mask.size()) == B * cfg_.input_tokens(), "mask has ", mask.size(), " entries, expected ",
            B * cfg_.input_tokens());
  plan_encoder(B);
  video_ = video, audio_ = audio, labels_ = labels, mask_ = std::move(mask);
  ParamBinder<T> pb{store_, ""};
  preprocessor_forward(cfg_, positions_, PreprocessorParams<T>::bind(pb.sub(kPre)), video, audio, labels,
                       mask_.data(), x_);
  ConstView<T> latents = store_.param(kLatents);
  for (int64_t b = 0; b < B; ++b) std::copy(latents.data, latents.data + latents.numel(), z0_.data + b * latents.numel());
  TensorView<T> z = enc_acts_["z_enc"];
  attention_block_forward(enc_cfg_, AttentionBlockParams<T>::bind(enc_cfg_, pb.sub(kEncCross)), ConstView<T>(z0_),
                          ConstView<T>(x_), enc_saved_, z, ctx_);
  for (size_t k = 0; k < z_.size(); ++k) {
    const int64_t layer = int64_t(k) % cfg_.num_self_attends_per_block;  // weights shared across blocks
    attention_block_forward(self_cfg_, AttentionBlockParams<T>::bind(self_cfg_, pb.sub(self_prefix(layer))),
                            ConstView<T>(z), ConstView<T>(z), self_saved_[k], z_[k], ctx_);
    z = z_[k];
  }
  z_final_ = z;
}

template <class T>
void PerceiverNet<T>::plan_decoder(int64_t B, const OutputPoints& pts) {
  const int64_t pi = int64_t(pts.image.size()), pa = int64_t(pts.audio.size());
  if (B == dec_batch_ && pi == dec_pi_ && pa == dec_pa_) return;
  const int64_t O = pts.count(), E = cfg_.query_channels(), F = cfg_.output_num_channels;
  ArenaPlan plan;
  plan.add("q", Shape{B, O, E});
  plan.add(attention_block_saved_specs(dec_cfg_, B, O, cfg_.num_latents), "dec.");
  plan.add("y", Shape{B, O, E});
  plan.add("f", Shape{B, O, F});
  plan.add("f_audio", Shape{B, pa, F});
  plan.add("f_image", Shape{B, pi, F});
  plan.add("f_label", Shape{B, 1, F});
  plan.add("out_audio", Shape{B, pa * cfg_.samples_per_patch});
  plan.add("out_image", Shape{B, pi, 3});
  plan.add("out_label", Shape{B, cfg_.num_labels});
  dec_acts_ = PlannedArena<T>(std::move(plan));
  dec_saved_ = AttentionBlockSaved<T>::bind(dec_cfg_, {dec_acts_, "dec."});
  dec_batch_ = B, dec_pi_ = pi, dec_pa_ = pa;
}

template <class T>
DecoderOutputs<T> PerceiverNet<T>::decode(const OutputPoints& pts) {
  PCV_CHECK(batch_ > 0, "decode() before encode()");
  const int64_t B = batch_, O = pts.count(), F = cfg_.output_num_channels;
  const int64_t pi = int64_t(pts.image.size()), pa = int64_t(pts.audio.size());
  plan_decoder(B, pts);
  pts_ = pts;
  ParamBinder<T> pb{store_, ""};
  TensorView<T> q = dec_acts_["q"], y = dec_acts_["y"], f = dec_acts_["f"];
  decoder_queries_forward(cfg_, DecoderQueryParams<T>::bind(pb.sub(kDecoder)), pts, q);
  attention_block_forward(dec_cfg_, AttentionBlockParams<T>::bind(dec_cfg_, pb.sub(kDecCross)), ConstView<T>(q),
                          ConstView<T>(z_final_), dec_saved_, y, ctx_);
  linear_forward(final_cfg_, LinearParams<T>::bind(pb.sub(kFinal)), ConstView<T>(y), f, ctx_);
  TensorView<T> fa = dec_acts_["f_audio"], fi = dec_acts_["f_image"], fl = dec_acts_["f_label"];
  gather_rows(f.data, B, O, F, 0, pa, fa.data);
  gather_rows(f.data, B, O, F, pa, pi, fi.data);
  gather_rows(f.data, B, O, F, O - 1, 1, fl.data);
  DecoderOutputs<T> out{dec_acts_["out_image"], dec_acts_["out_audio"], dec_acts_["out_label"]};
  linear_forward(audio_head_, LinearParams<T>::bind(pb.sub(kHeads + "audio.classifier.")), ConstView<T>(fa),
                 out.audio.reshaped(Shape{B, pa, cfg_.samples_per_patch}), ctx_);
  linear_forward(image_head_, LinearParams<T>::bind(pb.sub(kHeads + "image.classifier.")), ConstView<T>(fi),
                 out.image, ctx_);
  linear_forward(label_head_, LinearParams<T>::bind(pb.sub(kHeads + "label.classifier.")), ConstView<T>(fl),
                 out.label.reshaped(Shape{B, 1, cfg_.num_labels}), ctx_);
  return out;
}

template <class T>
void PerceiverNet<T>::heads_backward(ConstView<T> d_image, ConstView<T> d_audio, ConstView<T> d_label,
                                     TensorView<T> d_final) {
  const int64_t B = batch_, O = pts_.count(), F = cfg_.output_num_channels;
  const int64_t pi = int64_t(pts_.image.size()), pa = int64_t(pts_.audio.size());
  ParamBinder<T> pb{store_, ""};
  ScratchScope<T> scope(ctx_.scratch);
  auto head = [&](const LinearConfig& lc, const std::string& name, const char* input, ConstView<T> dy, int64_t row0,
                  int64_t n) {
    TensorView<T> in = dec_acts_[input];
    TensorView<T> d_in = ctx_.scratch.take(in.shape);
    linear_backward(lc, LinearParams<T>::bind(pb.sub(kHeads + name)), ConstView<T>(in),
                    dy.reshaped(Shape{B, n, lc.out}), LinearGrads<T>::bind(pb.sub(kHeads + name)), d_in, ctx_);
    scatter_add_rows(d_in.data, B, O, F, row0, n, d_final.data);
  };
  head(audio_head_, "audio.classifier.", "f_audio", d_audio, 0, pa);
  head(image_head_, "image.classifier.", "f_image", d_image, pa, pi);
  head(label_head_, "label.classifier.", "f_label", d_label, O - 1, 1);
}

template <class T>
void PerceiverNet<T>::backward(ConstView<T> d_image, ConstView<T> d_audio, ConstView<T> d_label) {
  PCV_CHECK(dec_batch_ == batch_, "backward() needs a decode() after the last encode()");
  ParamBinder<T> pb{store_, ""};
  ScratchScope<T> scope(ctx_.scratch);
  const ModelConfig& c = cfg_;
  // Decoder side.
  TensorView<T> d_f = ctx_.scratch.take(dec_acts_["f"].shape);
  heads_backward(d_image, d_audio, d_label, d_f);
  TensorView<T> d_y = ctx_.scratch.take(dec_acts_["y"].shape);
  linear_backward(final_cfg_, LinearParams<T>::bind(pb.sub(kFinal)), ConstView<T>(dec_acts_["y"]), ConstView<T>(d_f),
                  LinearGrads<T>::bind(pb.sub(kFinal)), d_y, ctx_);
  TensorView<T> d_q = ctx_.scratch.take(dec_acts_["q"].shape);
  TensorView<T> d_z = ctx_.scratch.take(z_final_.shape);
  attention_block_backward(dec_cfg_, AttentionBlockParams<T>::bind(dec_cfg_, pb.sub(kDecCross)), dec_saved_,
                           ConstView<T>(d_y), AttentionBlockGrads<T>::bind(dec_cfg_, pb.sub(kDecCross)), d_q, d_z, ctx_);
  decoder_queries_backward(c, pts_, ConstView<T>(d_q), DecoderQueryGrads<T>::bind(pb.sub(kDecoder)));
  // Latent stack, last application first.
  for (int64_t k = int64_t(z_.size()) - 1; k >= 0; --k) {
    const int64_t layer = k % c.num_self_attends_per_block;
    TensorView<T> d_in = ctx_.scratch.take(d_z.shape);
    attention_block_backward(self_cfg_, AttentionBlockParams<T>::bind(self_cfg_, pb.sub(self_prefix(layer))),
                             self_saved_[k], ConstView<T>(d_z), AttentionBlockGrads<T>::bind(self_cfg_, pb.sub(self_prefix(layer))),
                             d_in, TensorView<T>{}, ctx_);
    d_z = d_in;
  }
  // Encoder cross-attention, latents (summed over the batch) and the preprocessor.
  // The input gradient [B,M,C] is never built: each chunk goes straight into the preprocessor's
  // parameter gradients.
  TensorView<T> d_z0 = ctx_.scratch.take(z0_.shape);
  const auto pre_grads = PreprocessorGrads<T>::bind(pb.sub(kPre));
  RowSink<T> to_preprocessor = [&](int64_t row0, ConstView<T> rows) {
    preprocessor_backward_rows(c, mask_.data(), row0, rows, pre_grads);
  };
  attention_block_backward(enc_cfg_, AttentionBlockParams<T>::bind(enc_cfg_, pb.sub(kEncCross)), enc_saved_,
                           ConstView<T>(d_z), AttentionBlockGrads<T>::bind(enc_cfg_, pb.sub(kEncCross)), d_z0,
                           TensorView<T>{}, ctx_, to_preprocessor);
  TensorView<T> d_latents = store_.grad(kLatents);
  const int64_t per = d_latents.numel();
  for (int64_t b = 0; b < batch_; ++b) ctx_.k.axpy(per, T(1), d_z0.data + b * per, d_latents.data);
}

template class PerceiverNet<float>;
template class PerceiverNet<double>;

}  // namespace perceiver
