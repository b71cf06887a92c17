#include "model/loss.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <vector>

namespace perceiver {

LossConfig parse_loss_config(const std::string& recon, const std::string& weights) {
  PCV_CHECK(recon == "l1" || recon == "mse", "recon_loss: '", recon, "' must be l1 or mse");
  LossConfig lc;
  lc.recon = recon == "mse" ? ReconLoss::kMse : ReconLoss::kL1;
  std::vector<double> w;
  std::stringstream ss(weights);
  for (std::string part; std::getline(ss, part, ',');) {
    size_t used = 0;
    double v = 0;
    try {
      v = std::stod(part, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    PCV_CHECK(used == part.size() && !part.empty() && std::isfinite(v), "loss_weights: '", part,
              "' is not a finite number (expected V,A,L)");
    w.push_back(v);
  }
  PCV_CHECK(w.size() == 3, "loss_weights: expected 3 values V,A,L, got '", weights, "'");
  lc.w_image = w[0], lc.w_audio = w[1], lc.w_label = w[2];
  return lc;
}

template <class T>
void gather_targets(const ModelConfig& c, const OutputPoints& pts, int64_t B, const T* video, const T* audio,
                    T* image_targets, T* audio_targets) {
  const int64_t clip = c.pixels() * 3, pi = int64_t(pts.image.size()), pa = int64_t(pts.audio.size());
  const int64_t spp = c.samples_per_patch;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i < pi; ++i)
      std::copy_n(video + b * clip + pts.image[i] * 3, 3, image_targets + (b * pi + i) * 3);
    for (int64_t i = 0; i < pa; ++i)
      std::copy_n(audio + b * c.audio_samples() + pts.audio[i] * spp, spp, audio_targets + (b * pa + i) * spp);
  }
}

template <class T>
LossTerms compute_loss(const ModelConfig& c, const LossConfig& lc, const DecoderOutputs<T>& out,
                       const OutputPoints& pts, const T* video, const T* audio, const int64_t* labels,
                       Context<T>& ctx, const std::type_identity_t<DecoderOutputs<T>>* grads) {
  const int64_t B = out.label.shape[0];
  ScratchScope<T> scope(ctx.scratch);
  TensorView<T> ti = ctx.scratch.take(out.image.shape), ta = ctx.scratch.take(out.audio.shape);
  gather_targets(c, pts, B, video, audio, ti.data, ta.data);
  const auto& k = ctx.k;
  const bool l1 = lc.recon == ReconLoss::kL1;
  auto recon = [&](ConstView<T> pred, ConstView<T> target, double w, TensorView<T> d) {
    if (pred.numel() == 0) return 0.0;
    const double v = l1 ? k.l1_forward(pred.numel(), pred.data, target.data) : k.mse_forward(pred.numel(), pred.data, target.data);
    if (!d.empty()) (l1 ? k.l1_backward : k.mse_backward)(pred.numel(), pred.data, target.data, w, d.data);
    return v;
  };
  LossTerms t;
  t.image = recon(out.image, ti, lc.w_image, grads ? grads->image : TensorView<T>{});
  t.audio = recon(out.audio, ta, lc.w_audio, grads ? grads->audio : TensorView<T>{});
  t.label = k.softmax_ce_forward(B, c.num_labels, out.label.data, labels);
  if (grads) k.softmax_ce_backward(B, c.num_labels, out.label.data, labels, lc.w_label, grads->label.data);
  t.total = lc.w_image * t.image + lc.w_audio * t.audio + lc.w_label * t.label;
  return t;
}

#define PCV_INSTANTIATE(T)                                                                              \
  template void gather_targets<T>(const ModelConfig&, const OutputPoints&, int64_t, const T*, const T*, \
                                  T*, T*);                                                              \
  template LossTerms compute_loss<T>(const ModelConfig&, const LossConfig&, const DecoderOutputs<T>&,   \
                                     const OutputPoints&, const T*, const T*, const int64_t*,           \
                                     Context<T>&, const DecoderOutputs<T>*);
PCV_INSTANTIATE(float)
PCV_INSTANTIATE(double)
#undef PCV_INSTANTIATE

}  // namespace perceiver
