// perceiver::Model: the public front door, a thin layer over PerceiverNet<float>.
#include "perceiver/model.h"

#include "io/weights.h"
#include "model/sampling.h"
#include "model/step.h"

namespace perceiver {

struct Model::Impl {
  Impl(const ModelConfig& c, uint64_t s, const std::string& device)
      : backend(make_backend(device)), net(c, *backend), seed(s) {}
  std::unique_ptr<Backend> backend;
  PerceiverNet<float> net;
  uint64_t seed;

  void check(const BatchView& b) const {
    PCV_CHECK(b.size > 0 && b.video && b.audio && b.labels, "batch needs video, audio, labels and a positive size");
  }
  LossValues run(const BatchView& b, const OutputPoints& pts, const std::vector<uint8_t>& mask, const LossConfig& lc,
                 bool backward, const TrainingMode& mode = {}) {
    check(b);
    return run_step(net, b.video, b.audio, b.labels, b.size, pts, mask, lc, backward, nullptr, mode);
  }
  std::span<float> in_place(Arena<float>& a, const char* what) {
    PCV_CHECK(backend->host_accessible(), "Model::", what, "() on device '", backend->name(),
              "': its memory is not host memory; HINT: use read_", what, "() / write_parameters()");
    return {a.data(), a.size()};
  }
};

Model::Model(const ModelConfig& cfg, uint64_t seed, InitScheme init, const std::string& device)
    : impl_(std::make_unique<Impl>(cfg, seed, device)) {
  impl_->net.store().initialize(seed, init);
}
Model::~Model() = default;
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;

const ModelConfig& Model::config() const { return impl_->net.config(); }
int64_t Model::num_parameters() const { return impl_->net.store().registry().num_parameters(); }
std::string Model::device() const { return impl_->backend->name(); }

std::vector<ParameterInfo> Model::parameter_info() const {
  std::vector<ParameterInfo> out;
  for (const auto& e : impl_->net.store().registry().entries()) out.push_back({e.spec.name, e.spec.shape.dims(), e.offset});
  return out;
}

std::span<float> Model::parameters() { return impl_->in_place(impl_->net.store().params(), "parameters"); }
std::span<float> Model::gradients() { return impl_->in_place(impl_->net.store().grads(), "gradients"); }
std::vector<float> Model::read_parameters() const { return impl_->net.store().params().to_host(); }
std::vector<float> Model::read_gradients() const { return impl_->net.store().grads().to_host(); }
void Model::write_parameters(std::span<const float> values) {
  Arena<float>& p = impl_->net.store().params();
  PCV_CHECK(values.size() == p.size(), "write_parameters: ", values.size(), " values for ", p.size(), " parameters");
  p.upload(values.data(), values.size());
}
void Model::zero_grad() { impl_->net.store().zero_grad(); }

void Model::load_weights(const std::string& path) {
  with_host_params(impl_->net.store(), true, [&](ParamStore<float>& s) { perceiver::load_weights(s, path); });
}

void Model::save_weights(const std::string& path) {
  const std::optional<WeightFormat> format = weight_format_by_extension(path);
  PCV_CHECK(format, "save_weights: '", path, "': the name must end in .safetensors, .h5 or .hdf5 (it picks the format)");
  with_host_params(impl_->net.store(), false, [&](ParamStore<float>& s) {
    if (*format == WeightFormat::kSafetensors) save_safetensors(s, path);
    else save_weights_h5(s, path);
  });
}

// The batch is checked before the masks are drawn for its size.
LossValues Model::train_step(const BatchView& b, int64_t step, const LossConfig& lc, int64_t first) {
  impl_->check(b);
  const ModelConfig& c = config();
  return impl_->run(b, draw_output_points(c, impl_->seed, step), draw_masks(c, b.size, impl_->seed, step, first), lc, true,
                    TrainingMode{true, impl_->seed, step, first});
}

LossValues Model::evaluate_loss(const BatchView& b, int64_t step, const LossConfig& lc, int64_t first) {
  impl_->check(b);
  const ModelConfig& c = config();
  return impl_->run(b, draw_output_points(c, impl_->seed, step), draw_masks(c, b.size, impl_->seed, step, first), lc, false);
}

std::vector<float> Model::classify(const BatchView& b) {
  impl_->check(b);
  const ModelConfig& c = config();
  impl_->net.encode(b.video, b.audio, b.labels, b.size, draw_masks(c, b.size, impl_->seed, 0, 0, true),
                    Pass::kForwardOnly);
  const DecoderOutputs<float> out = impl_->net.decode(OutputPoints{});
  return download(*impl_->backend, ConstView<float>(out.label));
}

Reconstruction Model::reconstruct(const BatchView& b, int64_t chunks) {
  impl_->check(b);
  const ModelConfig& c = config();
  PCV_CHECK(chunks > 0, "reconstruct: chunks must be positive, got ", chunks);
  impl_->net.encode(b.video, b.audio, b.labels, b.size, draw_masks(c, b.size, impl_->seed, 0, 0, true),
                    Pass::kForwardOnly);
  Reconstruction r;
  decode_everything(impl_->net, chunks, r.video, r.audio, r.label_logits);
  return r;
}

}  // namespace perceiver
