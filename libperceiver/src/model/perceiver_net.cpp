#include "model/perceiver_net.h"

#include <algorithm>
#include <string>

#include "model/loss.h"

namespace perceiver {
namespace {

const std::string kModel = "perceiver.";
const std::string kPre = "perceiver.input_preprocessor.";
const std::string kDecoder = "perceiver.decoder.";
const std::string kHeads = "perceiver.output_postprocessor.modalities.";

// Rows of the encoder input handled at once by LN_kv and the K/V projections: large enough for
// efficient GEMMs, small enough that the chunk buffers stay small (backward holds four of
// 2048 × 704 floats, plus the products' temporaries that scale with them). kinetics700 batch 1:
// 4096 rows peaked 57-63 MB higher (fp32 and bf16) at the same speed; 1024 was slower with bf16.
// The CPU's size: a backend may ask for another (Backend::preferred_row_chunk), and a net for
// another again (NetOptions::kv_row_chunk).
constexpr int64_t kEncoderKvRowChunk = 2048;

AttentionBlockConfig block(const ModelConfig& c, bool cross, int64_t q, int64_t kv, int64_t heads, int64_t widening) {
  AttentionBlockConfig b;
  b.cross = cross;
  b.q_dim = q;
  b.kv_dim = kv;
  b.heads = heads;
  b.widening = widening;
  b.qk_from_q = c.cross_attention_shape_for_attention == "q";
  b.gelu = c.hidden_act;
  b.eps = c.ln_eps;
  b.attention_dropout = c.attention_probs_dropout_prob;  // every attention layer; train mode only
  return b;
}

}  // namespace

EncoderConfig multimodal_encoder_config(const ModelConfig& c, EncoderMemory memory) {
  EncoderConfig e;
  e.num_latents = c.num_latents;
  e.d_latents = c.d_latents;
  e.num_blocks = c.num_blocks;
  e.self_attends_per_block = c.num_self_attends_per_block;
  e.cross = block(c, true, c.d_latents, c.input_channels(), c.num_cross_attention_heads, c.cross_attention_widening_factor);
  e.cross.query_residual = c.use_query_residual;
  e.cross.qk_channels = c.qk_channels;
  e.cross.v_channels = c.v_channels;
  e.cross.kv_row_chunk = memory.kv_row_chunk > 0 ? memory.kv_row_chunk : kEncoderKvRowChunk;
  e.cross.kv_bf16 = memory.kv_bf16;
  e.cross.keep_scores = memory.keep_scores;
  e.keep_keys = memory.keep_keys;
  e.fold_kv = memory.fold_kv;
  e.self = block(c, false, c.d_latents, 0, c.num_self_attention_heads, c.self_attention_widening_factor);
  e.self.qk_channels = c.qk_channels;
  e.self.v_channels = c.v_channels;
  return e;
}

DecoderConfig multimodal_decoder_config(const ModelConfig& c) {
  DecoderConfig d;
  // HF: one head, no qk/v channel overrides, no query residual (spec §2.4, HF notes).
  d.cross = block(c, true, c.query_channels(), c.d_latents, c.decoder_num_heads, c.decoder_widening_factor);
  d.cross.query_residual = c.decoder_use_query_residual;
  d.output_channels = c.output_num_channels;
  return d;
}

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
  r.add(PerceiverEncoder<T>(multimodal_encoder_config(c), kModel).param_specs());
  r.add(std::vector<ParamSpec>{label_query_param_spec(c)}, kDecoder);
  r.add(PerceiverDecoder<T>(multimodal_decoder_config(c), kModel).param_specs());
  r.add(query_padding_param_specs(c), kDecoder);
  return r;
}

namespace {

template <class T>
EncoderMemory encoder_memory(const Kernels<T>& k, const Backend& backend, const NetOptions& o) {
  PCV_CHECK(o.kv_row_chunk >= 0, "kv_row_chunk must be 0 (the backend's choice) or a number of rows, got ",
            o.kv_row_chunk);
  EncoderMemory m;
  m.kv_bf16 = k.stores_bf16();  // the products round K and V to bf16 anyway: where the backend can, stored so
  m.keep_scores = o.keep_attention_scores && backend.keeps_attention_scores();
  // Where the scores are not kept, bf16 keys are: what the backward would otherwise make again.
  m.keep_keys = o.keep_attention_scores && !m.keep_scores;
  m.fold_kv = o.fold_kv_projections;
  m.kv_row_chunk = o.kv_row_chunk > 0 ? o.kv_row_chunk : backend.preferred_row_chunk();
  return m;
}

}  // namespace

template <class T>
PerceiverNet<T>::PerceiverNet(const ModelConfig& cfg, Backend& backend, NetOptions options)
    : cfg_(cfg),
      factor_inputs_(options.factor_kv_inputs),
      ctx_(backend),
      store_(backend, make_registry(cfg)),
      positions_(backend, cfg),
      query_tables_(backend, cfg),
      encoder_(multimodal_encoder_config(cfg, encoder_memory(ctx_.k, backend, options)), kModel),
      decoder_(multimodal_decoder_config(cfg), kModel),
      audio_head_{cfg.output_num_channels, cfg.samples_per_patch, ParamRole::kHeadWeight},
      image_head_{cfg.output_num_channels, 3, ParamRole::kHeadWeight},
      label_head_{cfg.output_num_channels, cfg.num_labels, ParamRole::kHeadWeight},
      loss_(backend, size_t(kLossTermCount)) {
  loss_.name("loss_terms");
  const ParamBinder<T> pb{store_, ""};
  pre_p_ = PreprocessorParams<T>::bind(pb.sub(kPre));
  pre_g_ = PreprocessorGrads<T>::bind(pb.sub(kPre));
  query_p_ = DecoderQueryParams<T>::bind(pb.sub(kDecoder));
  query_g_ = DecoderQueryGrads<T>::bind(pb.sub(kDecoder));
  audio_p_ = LinearParams<T>::bind(pb.sub(kHeads + "audio.classifier."));
  image_p_ = LinearParams<T>::bind(pb.sub(kHeads + "image.classifier."));
  label_p_ = LinearParams<T>::bind(pb.sub(kHeads + "label.classifier."));
  audio_g_ = LinearGrads<T>::bind(pb.sub(kHeads + "audio.classifier."));
  image_g_ = LinearGrads<T>::bind(pb.sub(kHeads + "image.classifier."));
  label_g_ = LinearGrads<T>::bind(pb.sub(kHeads + "label.classifier."));
}

namespace {

// Grows `a` to hold at least n elements (contents are not kept).
template <class U>
void reserve(Arena<U>& a, Backend& backend, size_t n) {
  if (a.size() < n) a = Arena<U>(backend, n);
}

}  // namespace

template <class T>
void PerceiverNet<T>::upload_inputs(const T* video, const T* audio, const int64_t* labels, int64_t B,
                                    const std::vector<uint8_t>& mask) {
  const int64_t M = cfg_.input_tokens(), clip = cfg_.pixels() * 3, S = cfg_.audio_samples();
  PCV_CHECK(B > 0, "batch size must be positive, got ", B);
  PCV_CHECK(int64_t(mask.size()) == B * M, "mask has ", mask.size(), " entries, expected ", B * M);
  for (int64_t b = 0; b < B; ++b)
    PCV_CHECK(labels[b] >= 0 && labels[b] < cfg_.num_labels, "label ", labels[b], " of example ", b,
              " is outside [0, ", cfg_.num_labels, ")");
  Backend& be = ctx_.backend;
  reserve(video_, be, size_t(B * clip));
  reserve(audio_, be, size_t(B * S));
  reserve(labels_, be, size_t(B));
  reserve(mask_, be, size_t(B * M));
  reserve(input_groups_, be, size_t(B * M));
  video_.upload(video, size_t(B * clip));
  audio_.upload(audio, size_t(B * S));
  labels_.upload(labels, size_t(B));
  mask_.upload(mask.data(), mask.size());
  input_grad_groups(cfg_, B, mask, input_groups_host_);
  input_groups_.upload(input_groups_host_.data(), input_groups_host_.size());
}

template <class T>
void PerceiverNet<T>::encode(const T* video, const T* audio, const int64_t* labels, int64_t B,
                             const std::vector<uint8_t>& mask, Pass pass) {
  upload_inputs(video, audio, labels, B, mask);
  batch_ = B;
  // x [B,M,C] is never stored: the encoder has it made a chunk of rows at a time where it needs
  // it, in forward and again in backward (the inputs and parameters stay put in between).
  RowSource<T> x_rows;
  x_rows.rows = [this](int64_t row0, TensorView<T> rows) {
    preprocessor_forward_rows(cfg_, positions_, pre_p_, video_.data(), audio_.data(), labels_.data(), mask_.data(),
                              batch_, row0, rows, ctx_);
  };
  if (ctx_.k.embeds_normalised())  // LN_kv made with the rows, which then never go through memory
    x_rows.normalised = [this](int64_t row0, const LayerNormParams<T>& p, double eps, TensorView<T> y, uint16_t* y16,
                               T* mean, T* rstd) {
      preprocessor_forward_normalised_rows(cfg_, positions_, pre_p_, video_.data(), audio_.data(), labels_.data(),
                                           mask_.data(), batch_, row0, p, eps, y, y16, mean, rstd, ctx_);
    };
  factor_width_ = factor_inputs_ && ctx_.k.embeds_factors() && ctx_.k.embeds_normalised()
                     ? input_factors(cfg_, B).width
                     : 0;
  if (factor_width_ > 0) {  // LN_kv's X̂ as factors, where the encoder folds it into its attention
    x_rows.factor_width = factor_width_;
    x_rows.factors = [this](int64_t row0, double eps, TensorView<T> f, uint16_t* f16, T* mean, T* rstd) {
      preprocessor_forward_factors(cfg_, positions_, pre_p_, video_.data(), audio_.data(), labels_.data(),
                                   mask_.data(), batch_, row0, eps, f, f16, mean, rstd, ctx_);
    };
    x_rows.factor_matrix = [this](TensorView<T> m) {
      preprocessor_factor_matrix(cfg_, pre_p_, labels_.data(), batch_, m, ctx_);
    };
    x_rows.factor_columns = [this](int64_t row0, int64_t n) { return input_factor_columns(cfg_, batch_, row0, n); };
  }
  z_ = encoder_.forward(store_, x_rows, Shape{B, cfg_.input_tokens(), cfg_.input_channels()}, ctx_, pass);
  decoded_ = false;
}

template <class T>
double PerceiverNet<T>::kv_factor_columns() const {
  if (kv_factor_width() == 0) return 0.0;
  const int64_t M = cfg_.input_tokens(), chunk = encoder_.config().cross.kv_row_chunk;
  double columns = 0;  // summed over the rows, a range at a time
  for (int64_t r0 = 0; r0 < M; r0 += chunk) {
    const int64_t n = std::min(chunk, M - r0);
    columns += double(n * input_factor_columns(cfg_, batch_, r0, n));
  }
  return columns / double(M);
}

template <class T>
ConstView<T> PerceiverNet<T>::encoder_input() {
  PCV_CHECK(batch_ > 0, "encoder_input() before encode()");
  const Shape shape{batch_, cfg_.input_tokens(), cfg_.input_channels()};
  if (!(x_.shape == shape)) {
    ArenaPlan plan;
    plan.add("x", shape);
    x_arena_ = PlannedArena<T>(ctx_.backend, std::move(plan));
    x_ = x_arena_["x"];
  }
  preprocessor_forward_rows(cfg_, positions_, pre_p_, video_.data(), audio_.data(), labels_.data(), mask_.data(),
                            batch_, 0, x_.reshaped(Shape{shape[0] * shape[1], shape[2]}), ctx_);
  return x_;
}

template <class T>
void PerceiverNet<T>::plan_io(int64_t B, const OutputPoints& pts) {
  const int64_t pi = int64_t(pts.image.size()), pa = int64_t(pts.audio.size());
  if (B == io_batch_ && pi == io_pi_ && pa == io_pa_) return;
  const int64_t F = cfg_.output_num_channels;
  ArenaPlan plan;
  plan.add("q", Shape{B, pts.count(), cfg_.query_channels()});
  plan.add("f_audio", Shape{B, pa, F});
  plan.add("f_image", Shape{B, pi, F});
  plan.add("f_label", Shape{B, 1, F});
  for (const std::string p : {"out_", "d_out_"}) {
    plan.add(p + "audio", Shape{B, pa * cfg_.samples_per_patch});
    plan.add(p + "image", Shape{B, pi, 3});
    plan.add(p + "label", Shape{B, cfg_.num_labels});
  }
  io_acts_ = PlannedArena<T>(ctx_.backend, std::move(plan));
  io_batch_ = B, io_pi_ = pi, io_pa_ = pa;
}

template <class T>
DecoderOutputs<T> PerceiverNet<T>::decode(const OutputPoints& pts) {
  PCV_CHECK(batch_ > 0, "decode() before encode()");
  const int64_t B = batch_, O = pts.count(), F = cfg_.output_num_channels;
  const int64_t pi = int64_t(pts.image.size()), pa = int64_t(pts.audio.size());
  for (int64_t p : pts.image) PCV_CHECK(p >= 0 && p < cfg_.pixels(), "output pixel ", p, " outside [0, ", cfg_.pixels(), ")");
  for (int64_t p : pts.audio)
    PCV_CHECK(p >= 0 && p < cfg_.audio_tokens(), "output audio patch ", p, " outside [0, ", cfg_.audio_tokens(), ")");
  plan_io(B, pts);
  reserve(points_, ctx_.backend, size_t(pi + pa));
  points_.upload(pts.image.data(), size_t(pi));
  points_.upload(pts.audio.data(), size_t(pa), size_t(pi));
  decoded_ = true;
  pts_ = pts;
  TensorView<T> q = io_acts_["q"];
  decoder_queries_forward(query_dims(cfg_, query_tables_, B, pa, pi), query_tables_, query_p_, points_.data() + pi,
                          points_.data(), q, ctx_);
  f_ = decoder_.forward(store_, ConstView<T>(q), z_, ctx_);
  TensorView<T> fa = io_acts_["f_audio"], fi = io_acts_["f_image"], fl = io_acts_["f_label"];
  ctx_.k.gather_rows(B, O, F, 0, pa, f_.data, fa.data);
  ctx_.k.gather_rows(B, O, F, pa, pi, f_.data, fi.data);
  ctx_.k.gather_rows(B, O, F, O - 1, 1, f_.data, fl.data);
  DecoderOutputs<T> out{io_acts_["out_image"], io_acts_["out_audio"], io_acts_["out_label"]};
  linear_forward(audio_head_, audio_p_, ConstView<T>(fa), out.audio.reshaped(Shape{B, pa, cfg_.samples_per_patch}), ctx_);
  linear_forward(image_head_, image_p_, ConstView<T>(fi), out.image, ctx_);
  linear_forward(label_head_, label_p_, ConstView<T>(fl), out.label.reshaped(Shape{B, 1, cfg_.num_labels}), ctx_);
  return out;
}

template <class T>
DecoderOutputs<T> PerceiverNet<T>::last_outputs() {
  PCV_CHECK(decoded_, "last_outputs() needs a decode() after the last encode()");
  return {io_acts_["out_image"], io_acts_["out_audio"], io_acts_["out_label"]};
}

template <class T>
DecoderOutputs<T> PerceiverNet<T>::output_grads() {
  PCV_CHECK(decoded_, "output_grads() needs a decode() after the last encode()");
  DecoderOutputs<T> d{io_acts_["d_out_image"], io_acts_["d_out_audio"], io_acts_["d_out_label"]};
  for (TensorView<T> v : {d.image, d.audio, d.label}) ctx_.backend.zero(v.data, size_t(v.numel()) * sizeof(T));
  return d;
}

template <class T>
StepInputs<T> PerceiverNet<T>::inputs() const {
  StepInputs<T> in;
  in.video = video_.data(), in.audio = audio_.data(), in.labels = labels_.data(), in.mask = mask_.data();
  in.image_points = points_.data();
  in.num_image = int64_t(pts_.image.size());
  in.audio_points = points_.data() + in.num_image;
  in.num_audio = int64_t(pts_.audio.size());
  return in;
}

template <class T>
void PerceiverNet<T>::heads_backward(ConstView<T> d_image, ConstView<T> d_audio, ConstView<T> d_label,
                                     TensorView<T> d_final) {
  const int64_t B = batch_, O = pts_.count(), F = cfg_.output_num_channels;
  const int64_t pi = int64_t(pts_.image.size()), pa = int64_t(pts_.audio.size());
  ScratchScope<T> scope(ctx_.scratch);
  auto head = [&](const LinearConfig& lc, const LinearParams<T>& p, const LinearGrads<T>& g, const char* input,
                  ConstView<T> dy, int64_t row0, int64_t n) {
    TensorView<T> in = io_acts_[input];
    TensorView<T> d_in = ctx_.scratch.take(in.shape);
    linear_backward(lc, p, ConstView<T>(in), dy.reshaped(Shape{B, n, lc.out}), g, d_in, ctx_);
    ctx_.k.scatter_add_rows(B, O, F, row0, n, d_in.data, d_final.data);
  };
  head(audio_head_, audio_p_, audio_g_, "f_audio", d_audio, 0, pa);
  head(image_head_, image_p_, image_g_, "f_image", d_image, pa, pi);
  head(label_head_, label_p_, label_g_, "f_label", d_label, O - 1, 1);
}

template <class T>
void PerceiverNet<T>::backward(ConstView<T> d_image, ConstView<T> d_audio, ConstView<T> d_label,
                               const GradsReady& ready) {
  PCV_CHECK(decoded_, "backward() needs a decode() after the last encode()");
  PCV_CHECK(encoder_.pass() == Pass::kWithBackward, "backward() after a forward-only encode (Pass::kForwardOnly), which kept "
            "nothing for it: encode with Pass::kWithBackward");
  ScratchScope<T> scope(ctx_.scratch);
  TensorView<T> d_f = ctx_.scratch.take(f_.shape);
  heads_backward(d_image, d_audio, d_label, d_f);
  TensorView<T> d_q = ctx_.scratch.take(io_acts_["q"].shape);
  TensorView<T> d_z = ctx_.scratch.take(z_.shape);
  decoder_.backward(store_, ConstView<T>(d_f), d_q, d_z, ctx_);
  const int64_t pi = int64_t(pts_.image.size()), pa = int64_t(pts_.audio.size());
  decoder_queries_backward(query_dims(cfg_, query_tables_, batch_, pa, pi), ConstView<T>(d_q), query_g_, ctx_);
  // Everything from the label query on (the decoder, in HF order) is final now.
  if (ready) ready(store_.registry().at(kDecoder + label_query_param_spec(cfg_).name).offset);
  // The input gradient [B,M,C] is never built: each chunk goes straight into the preprocessor's
  // parameter gradients, or a folded encoder gives only its sums over the rows each parameter
  // takes (KvGradGroups), never forming it at all.
  const RowSink<T> to_preprocessor = [&](int64_t row0, ConstView<T> rows) {
    preprocessor_backward_rows(cfg_, batch_, mask_.data(), row0, rows, pre_g_, ctx_);
  };
  const KvGradGroups<T> groups{input_groups_.data(), kInputGradGroups,
                               ctx_.scratch.take(Shape{kInputGradGroups, cfg_.input_channels()})};
  encoder_.backward(store_, ConstView<T>(d_z), to_preprocessor, ctx_, ready, groups);
  preprocessor_backward_sums(cfg_, ConstView<T>(groups.sums), pre_g_, ctx_);
}

template class PerceiverNet<float>;
template class PerceiverNet<double>;

}  // namespace perceiver
