#include "model/perceiver_core.h"


namespace perceiver {
namespace {

const char* kLatents = "embeddings.latents";
const char* kCross = "encoder.cross_attention.";
const char* kDecCross = "decoder.decoder.decoding_cross_attention.";
const char* kFinal = "decoder.decoder.final_layer.";

std::string self_name(int64_t i) { return "encoder.self_attends." + std::to_string(i) + "."; }

// The attention dropout stream of one layer application: its parameter prefix and, for weight-
// shared self-attention layers, the block index (applications of the same weights draw
// different masks).
uint32_t dropout_stream(const std::string& prefix, int64_t application = 0) {
  return hash32(prefix + "#" + std::to_string(application));
}

}  // namespace

void EncoderConfig::validate() const {
  PCV_CHECK(num_latents > 0 && d_latents > 0, "encoder: latents must be positive, got ", num_latents, "×", d_latents);
  PCV_CHECK(num_blocks > 0 && self_attends_per_block > 0, "encoder: num_blocks and self_attends_per_block must be positive");
  PCV_CHECK(cross.q_dim == d_latents && self.q_dim == d_latents, "encoder: attention widths must equal d_latents ", d_latents);
  cross.validate();
  self.validate();
}

void DecoderConfig::validate() const {
  PCV_CHECK(output_channels > 0, "decoder: output channels must be positive, got ", output_channels);
  cross.validate();
}

// ---- encoder ----------------------------------------------------------------------------------

template <class T>
PerceiverEncoder<T>::PerceiverEncoder(EncoderConfig cfg, std::string prefix) : cfg_(std::move(cfg)), prefix_(std::move(prefix)) {
  cfg_.validate();
}

template <class T>
std::vector<ParamSpec> PerceiverEncoder<T>::param_specs() const {
  std::vector<ParamSpec> s{{prefix_ + kLatents, Shape{cfg_.num_latents, cfg_.d_latents}, ParamRole::kEmbedding, 0}};
  for (auto& p : prefixed(attention_block_param_specs(cfg_.cross), prefix_ + kCross)) s.push_back(p);
  for (int64_t i = 0; i < cfg_.self_attends_per_block; ++i)
    for (auto& p : prefixed(attention_block_param_specs(cfg_.self), prefix_ + self_name(i))) s.push_back(p);
  return s;
}

template <class T>
void PerceiverEncoder<T>::bind(ParamStore<T>& store) {
  if (store.params().data() == bound_) return;
  const ParamBinder<T> pb{store, prefix_};
  latents_ = store.param(prefix_ + kLatents);
  d_latents_ = store.grad(prefix_ + kLatents);
  latents_offset_ = store.registry().at(prefix_ + kLatents).offset;
  cross_p_ = AttentionBlockParams<T>::bind(cfg_.cross, pb.sub(kCross));
  cross_g_ = AttentionBlockGrads<T>::bind(cfg_.cross, pb.sub(kCross));
  self_p_.clear(), self_g_.clear(), self_offsets_.clear();
  for (int64_t i = 0; i < cfg_.self_attends_per_block; ++i) {
    self_p_.push_back(AttentionBlockParams<T>::bind(cfg_.self, pb.sub(self_name(i))));
    self_g_.push_back(AttentionBlockGrads<T>::bind(cfg_.self, pb.sub(self_name(i))));
    self_offsets_.push_back(store.registry().first_offset(prefix_ + self_name(i)));
  }
  bound_ = store.params().data();
}

template <class T>
void PerceiverEncoder<T>::plan(int64_t B, int64_t M, Pass pass, int64_t factor_width, Context<T>& ctx) {
  const int64_t N = cfg_.num_latents;
  AttentionBlockConfig cross = cfg_.cross;  // as this pass runs it
  cross.keep_scores = cross.keep_scores && pass == Pass::kWithBackward;
  cross.fold_kv = cfg_.fold_kv && can_fold_kv(cross, B, N, M, ctx.backend, ctx.mode);
  cross.stream_kv = !cross.fold_kv && pass == Pass::kForwardOnly && can_stream_kv(cross, B, N, M, ctx.backend, ctx.mode);
  // Where the folded attention takes bf16 keys over factors (attention_folded.cpp: bf16 storage, an
  // even input width, LN_kv's gain folded); otherwise the buffer would be planned and never used.
  const bool keep_keys = cfg_.keep_keys && cross.fold_kv && pass == Pass::kWithBackward && ctx.k.stores_bf16() &&
                         cross.kv_dim % 2 == 0 && ctx.k.folds_kv_norm() && factor_width > 0 && factor_width % 2 == 0;
  cross.kept_key_width = keep_keys ? factor_width : 0;
  if (B == batch_ && M == tokens_ && pass == pass_ && cross.stream_kv == cross_.stream_kv &&
      cross.fold_kv == cross_.fold_kv && cross.kept_key_width == cross_.kept_key_width)
    return;
  // Forward only, nothing is kept for backward: one set of saved state serves every latent layer
  // in turn, and their outputs alternate between two buffers.
  const bool share = pass == Pass::kForwardOnly;
  const auto saved_name = [share](int64_t k) { return "self" + std::to_string(share ? 0 : k) + "."; };
  const auto z_name = [share](int64_t k) { return "z_self" + std::to_string(share ? k % 2 : k); };
  const int64_t D = cfg_.d_latents, apps = cfg_.num_blocks * cfg_.self_attends_per_block;
  ArenaPlan plan;
  plan.add("latents_in", Shape{B, N, D});
  plan.add(attention_block_saved_specs(cross, B, N, M), "cross.");
  plan.add("z_cross", Shape{B, N, D});
  for (int64_t k = 0; k < apps; ++k) {
    if (!share || k == 0) plan.add(attention_block_saved_specs(cfg_.self, B, N, N), saved_name(k));
    if (!share || k < 2) plan.add(z_name(k), Shape{B, N, D});
  }
  // The old arena goes first (the peak is the larger of the two), and the plan counts as made
  // only once the new one exists: after a failed allocation the next forward plans again.
  batch_ = 0;
  acts_ = {};
  acts_ = PlannedArena<T>(ctx.backend, std::move(plan));
  cross_ = cross;
  pass_ = pass;
  cross_saved_ = AttentionBlockSaved<T>::bind(cross_, {acts_, "cross."});
  cross_saved_.attn.dropout_stream = dropout_stream(prefix_ + kCross);
  self_saved_.clear();
  z_.clear();
  for (int64_t k = 0; k < apps; ++k) {
    self_saved_.push_back(AttentionBlockSaved<T>::bind(cfg_.self, {acts_, saved_name(k)}));
    self_saved_.back().attn.dropout_stream =
        dropout_stream(prefix_ + self_name(k % cfg_.self_attends_per_block), k / cfg_.self_attends_per_block);
    z_.push_back(acts_[z_name(k)]);
  }
  latents_in_ = acts_["latents_in"];
  z_cross_ = acts_["z_cross"];
  batch_ = B, tokens_ = M;
}

template <class T>
ConstView<T> PerceiverEncoder<T>::forward(ParamStore<T>& store, ConstView<T> x, Context<T>& ctx, Pass pass) {
  begin(store, x.shape, pass, 0, ctx);
  attention_block_forward(cross_, cross_p_, ConstView<T>(latents_in_), x, cross_saved_, z_cross_, ctx);
  return latent_stack(ctx);
}

template <class T>
ConstView<T> PerceiverEncoder<T>::forward(ParamStore<T>& store, RowSource<T> x_rows, Shape x_shape, Context<T>& ctx,
                                          Pass pass) {
  begin(store, x_shape, pass, x_rows.factors ? x_rows.factor_width : 0, ctx);
  attention_block_forward(cross_, cross_p_, ConstView<T>(latents_in_), std::move(x_rows), x_shape, cross_saved_,
                          z_cross_, ctx);
  return latent_stack(ctx);
}

template <class T>
void PerceiverEncoder<T>::begin(ParamStore<T>& store, const Shape& x_shape, Pass pass, int64_t factor_width,
                                Context<T>& ctx) {
  PCV_CHECK(x_shape.rank() == 3 && x_shape[2] == cfg_.cross.kv_dim, "encoder input ", x_shape.str(),
            " does not have ", cfg_.cross.kv_dim, " channels");
  plan(x_shape[0], x_shape[1], pass, factor_width, ctx);
  bind(store);
  ctx.k.broadcast_rows(batch_, latents_.numel(), latents_.data, latents_in_.data);
}

template <class T>
ConstView<T> PerceiverEncoder<T>::latent_stack(Context<T>& ctx) {
  TensorView<T> z = z_cross_;
  for (size_t k = 0; k < z_.size(); ++k) {
    const size_t layer = k % size_t(cfg_.self_attends_per_block);  // weights shared across blocks
    attention_block_forward(cfg_.self, self_p_[layer], ConstView<T>(z), ConstView<T>(z), self_saved_[k], z_[k], ctx);
    z = z_[k];
  }
  return z;
}

template <class T>
void PerceiverEncoder<T>::backward(ParamStore<T>& store, ConstView<T> dz_out, const RowSink<T>& dx_sink, Context<T>& ctx,
                                   const GradsReady& ready, const KvGradGroups<T>& dx_groups) {
  PCV_CHECK(batch_ > 0, "encoder backward() before forward()");
  PCV_CHECK(pass_ == Pass::kWithBackward, "encoder backward() after a forward-only pass (Pass::kForwardOnly), which keeps "
            "nothing for it: run the forward with Pass::kWithBackward");
  bind(store);
  ScratchScope<T> scope(ctx.scratch);
  TensorView<T> dz = ctx.scratch.take(dz_out.shape);
  ctx.k.axpy(dz.numel(), T(1), dz_out.data, dz.data);
  for (int64_t k = int64_t(z_.size()) - 1; k >= 0; --k) {  // last application first
    const size_t layer = size_t(k % cfg_.self_attends_per_block);
    TensorView<T> d_in = ctx.scratch.take(dz.shape);
    attention_block_backward(cfg_.self, self_p_[layer], self_saved_[size_t(k)], ConstView<T>(dz), self_g_[layer], d_in,
                             TensorView<T>{}, ctx);
    dz = d_in;
    // With shared weights a layer is final after its first application (the last one backward).
    if (ready && k < cfg_.self_attends_per_block) ready(self_offsets_[layer]);
  }
  TensorView<T> d_latents_in = ctx.scratch.take(latents_in_.shape);
  attention_block_backward(cross_, cross_p_, cross_saved_, ConstView<T>(dz), cross_g_, d_latents_in,
                           TensorView<T>{}, ctx, dx_sink, dx_groups);
  for (int64_t b = 0; b < batch_; ++b)  // broadcast over the batch: sum, in batch order
    ctx.k.axpy(d_latents_.numel(), T(1), d_latents_in.data + b * d_latents_.numel(), d_latents_.data);
  if (ready) ready(latents_offset_);
}

// ---- decoder ----------------------------------------------------------------------------------

template <class T>
PerceiverDecoder<T>::PerceiverDecoder(DecoderConfig cfg, std::string prefix) : cfg_(std::move(cfg)), prefix_(std::move(prefix)) {
  cfg_.validate();
}

template <class T>
std::vector<ParamSpec> PerceiverDecoder<T>::param_specs() const {
  auto s = prefixed(attention_block_param_specs(cfg_.cross), prefix_ + kDecCross);
  for (auto& p : prefixed(linear_param_specs(cfg_.final_layer()), prefix_ + kFinal)) s.push_back(p);
  return s;
}

template <class T>
void PerceiverDecoder<T>::bind(ParamStore<T>& store) {
  if (store.params().data() == bound_) return;
  const ParamBinder<T> pb{store, prefix_};
  cross_p_ = AttentionBlockParams<T>::bind(cfg_.cross, pb.sub(kDecCross));
  cross_g_ = AttentionBlockGrads<T>::bind(cfg_.cross, pb.sub(kDecCross));
  final_p_ = LinearParams<T>::bind(pb.sub(kFinal));
  final_g_ = LinearGrads<T>::bind(pb.sub(kFinal));
  bound_ = store.params().data();
}

template <class T>
ConstView<T> PerceiverDecoder<T>::forward(ParamStore<T>& store, ConstView<T> q, ConstView<T> z, Context<T>& ctx) {
  const int64_t B = q.shape[0], O = q.shape[1], N = z.shape[1];
  const Shape key{B, O, N};
  if (!(key == planned_)) {
    ArenaPlan plan;
    plan.add(attention_block_saved_specs(cfg_.cross, B, O, N), "cross.");
    plan.add("y", Shape{B, O, cfg_.cross.out_dim()});
    plan.add("f", Shape{B, O, cfg_.output_channels});
    acts_ = PlannedArena<T>(ctx.backend, std::move(plan));
    saved_ = AttentionBlockSaved<T>::bind(cfg_.cross, {acts_, "cross."});
    saved_.attn.dropout_stream = dropout_stream(prefix_ + kDecCross);
    planned_ = key;
  }
  bind(store);
  TensorView<T> y = acts_["y"], f = acts_["f"];
  attention_block_forward(cfg_.cross, cross_p_, q, z, saved_, y, ctx);
  linear_forward(cfg_.final_layer(), final_p_, ConstView<T>(y), f, ctx);
  return f;
}

template <class T>
void PerceiverDecoder<T>::backward(ParamStore<T>& store, ConstView<T> df, TensorView<T> dq, TensorView<T> dz,
                                   Context<T>& ctx) {
  PCV_CHECK(planned_.rank() == 3, "decoder backward() before forward()");
  bind(store);
  ScratchScope<T> scope(ctx.scratch);
  TensorView<T> y = acts_["y"], d_y = ctx.scratch.take(y.shape);
  linear_backward(cfg_.final_layer(), final_p_, ConstView<T>(y), df, final_g_, d_y, ctx);
  attention_block_backward(cfg_.cross, cross_p_, saved_, ConstView<T>(d_y), cross_g_, dq, dz, ctx);
}

template class PerceiverEncoder<float>;
template class PerceiverEncoder<double>;
template class PerceiverDecoder<float>;
template class PerceiverDecoder<double>;

}  // namespace perceiver
