// perceiver::Model: the public front door, a thin layer over PerceiverNet<float>.
#include "perceiver/model.h"

#include <algorithm>

#include "io/weights.h"
#include "model/loss.h"
#include "model/sampling.h"

namespace perceiver {

struct Model::Impl {
  Impl(const ModelConfig& c, uint64_t s) : net(c, cpu_backend()), seed(s) {}
  PerceiverNet<float> net;
  uint64_t seed;

  void check(const BatchView& b) const {
    PCV_CHECK(b.size > 0 && b.video && b.audio && b.labels, "batch needs video, audio, labels and a positive size");
  }
  // Forward on `pts`; with `grads`, also the loss gradient and backward.
  LossValues run(const BatchView& b, const OutputPoints& pts, std::vector<uint8_t> mask, const LossConfig& lc, bool backward) {
    check(b);
    const ModelConfig& c = net.config();
    net.encode(b.video, b.audio, b.labels, b.size, std::move(mask));
    DecoderOutputs<float> out = net.decode(pts);
    std::vector<float> gi(out.image.numel()), ga(out.audio.numel()), gl(out.label.numel());
    DecoderOutputs<float> d{{gi.data(), out.image.shape}, {ga.data(), out.audio.shape}, {gl.data(), out.label.shape}};
    const LossTerms t = compute_loss(c, lc, out, pts, b.video, b.audio, b.labels, net.context(), backward ? &d : nullptr);
    if (backward) net.backward(ConstView<float>(d.image), ConstView<float>(d.audio), ConstView<float>(d.label));
    return {t.total, t.image, t.audio, t.label};
  }
};

Model::Model(const ModelConfig& cfg, uint64_t seed, InitScheme init) : impl_(std::make_unique<Impl>(cfg, seed)) {
  impl_->net.store().initialize(seed, init);
}
Model::~Model() = default;
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;

const ModelConfig& Model::config() const { return impl_->net.config(); }
int64_t Model::num_parameters() const { return impl_->net.store().registry().num_parameters(); }

std::vector<ParameterInfo> Model::parameter_info() const {
  std::vector<ParameterInfo> out;
  for (const auto& e : impl_->net.store().registry().entries()) out.push_back({e.spec.name, e.spec.shape.dims(), e.offset});
  return out;
}

std::span<float> Model::parameters() { return {impl_->net.store().params().data(), impl_->net.store().params().size()}; }
std::span<float> Model::gradients() { return {impl_->net.store().grads().data(), impl_->net.store().grads().size()}; }
void Model::zero_grad() { impl_->net.store().zero_grad(); }

void Model::load_weights(const std::string& path) { perceiver::load_weights(impl_->net.store(), path); }

void Model::save_weights(const std::string& path) {
  const bool st = path.size() >= 12 && path.compare(path.size() - 12, 12, ".safetensors") == 0;
  if (st) save_safetensors(impl_->net.store(), path);
  else save_weights_h5(impl_->net.store(), path);
}

LossValues Model::train_step(const BatchView& b, int64_t step, const LossConfig& lc, int64_t first) {
  const ModelConfig& c = config();
  return impl_->run(b, draw_output_points(c, impl_->seed, step), draw_masks(c, b.size, impl_->seed, step, first), lc, true);
}

LossValues Model::evaluate_loss(const BatchView& b, int64_t step, const LossConfig& lc, int64_t first) {
  const ModelConfig& c = config();
  return impl_->run(b, draw_output_points(c, impl_->seed, step), draw_masks(c, b.size, impl_->seed, step, first), lc, false);
}

std::vector<float> Model::classify(const BatchView& b) {
  impl_->check(b);
  const ModelConfig& c = config();
  impl_->net.encode(b.video, b.audio, b.labels, b.size, draw_masks(c, b.size, impl_->seed, 0, 0, true));
  DecoderOutputs<float> out = impl_->net.decode(OutputPoints{});
  return {out.label.data, out.label.data + out.label.numel()};
}

Reconstruction Model::reconstruct(const BatchView& b, int64_t chunks) {
  impl_->check(b);
  const ModelConfig& c = config();
  PCV_CHECK(chunks > 0, "reconstruct: chunks must be positive, got ", chunks);
  impl_->net.encode(b.video, b.audio, b.labels, b.size, draw_masks(c, b.size, impl_->seed, 0, 0, true));
  const int64_t B = b.size, P = c.pixels(), S = c.audio_samples(), spp = c.samples_per_patch;
  Reconstruction r{std::vector<float>(B * P * 3), std::vector<float>(B * S), {}};
  for (int64_t k = 0; k < chunks; ++k) {
    const OutputPoints pts = chunk_points(c, k, chunks);
    DecoderOutputs<float> out = impl_->net.decode(pts);
    const int64_t pi = int64_t(pts.image.size()), pa = int64_t(pts.audio.size());
    for (int64_t bi = 0; bi < B; ++bi) {
      if (pi) std::copy_n(out.image.data + bi * pi * 3, pi * 3, r.video.data() + (bi * P + pts.image[0]) * 3);
      if (pa) std::copy_n(out.audio.data + bi * pa * spp, pa * spp, r.audio.data() + bi * S + pts.audio[0] * spp);
    }
    // Queries do not interact, so every chunk gives the same label logits; keep the first.
    if (k == 0) r.label_logits.assign(out.label.data, out.label.data + out.label.numel());
  }
  return r;
}

}  // namespace perceiver
