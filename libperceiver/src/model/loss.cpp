#include "model/loss.h"

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

LossValues loss_terms(const double* t, const LossConfig& lc) {
  LossValues r;
  r.image = t[0], r.audio = t[1], r.label = t[2];
  r.total = lc.w_image * r.image + lc.w_audio * r.audio + lc.w_label * r.label;
  return r;
}

template <class T>
void loss_forward_backward(PerceiverNet<T>& net, const LossConfig& lc, const DecoderOutputs<T>& out,
                           const std::type_identity_t<DecoderOutputs<T>>* grads, double* terms) {
  Context<T>& ctx = net.context();
  const StepInputs<T> in = net.inputs();
  const ModelConfig& c = net.config();
  const int64_t B = out.label.shape[0];
  ScratchScope<T> scope(ctx.scratch);
  TensorView<T> ti = ctx.scratch.take(out.image.shape), ta = ctx.scratch.take(out.audio.shape);
  TargetDims td;
  td.batch = B, td.pixels = c.pixels(), td.audio_samples = c.audio_samples(), td.samples_per_patch = c.samples_per_patch;
  td.num_image = in.num_image, td.num_audio = in.num_audio;
  ctx.k.gather_targets(td, in.image_points, in.audio_points, in.video, in.audio, ti.data, ta.data);
  const bool l1 = lc.recon == ReconLoss::kL1;
  auto recon = [&](ConstView<T> pred, ConstView<T> target, double w, TensorView<T> d, double* out_term) {
    if (pred.numel() == 0) {  // no queries of this modality: a zero term
      ctx.backend.zero(out_term, sizeof(double));
      return;
    }
    if (l1) ctx.k.l1_forward(pred.numel(), pred.data, target.data, out_term);
    else ctx.k.mse_forward(pred.numel(), pred.data, target.data, out_term);
    if (d.empty()) return;
    if (l1) ctx.k.l1_backward(pred.numel(), pred.data, target.data, w, d.data);
    else ctx.k.mse_backward(pred.numel(), pred.data, target.data, w, d.data);
  };
  recon(out.image, ti, lc.w_image, grads ? grads->image : TensorView<T>{}, terms + 0);
  recon(out.audio, ta, lc.w_audio, grads ? grads->audio : TensorView<T>{}, terms + 1);
  ctx.k.softmax_ce_forward(B, c.num_labels, out.label.data, in.labels, terms + 2);
  if (grads) ctx.k.softmax_ce_backward(B, c.num_labels, out.label.data, in.labels, lc.w_label, grads->label.data);
}

template <class T>
LossValues compute_loss(PerceiverNet<T>& net, const LossConfig& lc, const DecoderOutputs<T>& out,
                       const std::type_identity_t<DecoderOutputs<T>>* grads) {
  double* slot = net.loss_slot();
  loss_forward_backward(net, lc, out, grads, slot);
  double host[kLossTermCount];
  net.context().backend.copy_to_host(host, slot, sizeof host);
  return loss_terms(host, lc);
}

#define PCV_INSTANTIATE(T)                                                                           \
  template void loss_forward_backward<T>(PerceiverNet<T>&, const LossConfig&, const DecoderOutputs<T>&, \
                                         const DecoderOutputs<T>*, double*);                         \
  template LossValues compute_loss<T>(PerceiverNet<T>&, const LossConfig&, const DecoderOutputs<T>&,   \
                                     const DecoderOutputs<T>*);
PCV_INSTANTIATE(float)
PCV_INSTANTIATE(double)
#undef PCV_INSTANTIATE

}  // namespace perceiver
