#include "model/step.h"

#include <algorithm>

#include "model/sampling.h"

namespace perceiver {
namespace {

// The context's mode is the pass's only: eval (or whatever it was) afterwards.
struct ModeScope {
  ModeScope(Context<float>& c, const TrainingMode& m) : ctx(c), before(c.mode) { ctx.mode = m; }
  ~ModeScope() { ctx.mode = before; }
  Context<float>& ctx;
  TrainingMode before;
};

void copy_to_host(Backend& backend, std::vector<float>& dst, ConstView<float> src) {
  dst.resize(size_t(src.numel()));
  backend.copy_to_host(dst.data(), src.data, dst.size() * sizeof(float));
}

}  // namespace

void enqueue_step(PerceiverNet<float>& net, const float* video, const float* audio, const int64_t* labels, int64_t B,
                  const OutputPoints& pts, const std::vector<uint8_t>& mask, const LossConfig& lc, bool backward,
                  double* terms, const TrainingMode& mode, const GradsReady& ready) {
  const double p = net.config().attention_probs_dropout_prob;
  PCV_CHECK(!backward || mode.training || p == 0, "model config key 'attention_probs_dropout_prob' is ", p,
            " but this training pass runs in eval mode; HINT: pass run_step a TrainingMode{true, seed, step, ",
            "first_example} so the dropout masks are drawn, or set it to 0 (DeepMind trains without dropout)");
  ModeScope scope(net.context(), mode);
  net.encode(video, audio, labels, B, mask, backward ? Pass::kWithBackward : Pass::kForwardOnly);
  const DecoderOutputs<float> out = net.decode(pts);
  if (!backward) {
    loss_forward_backward(net, lc, out, nullptr, terms);
    return;
  }
  const DecoderOutputs<float> d = net.output_grads();
  loss_forward_backward(net, lc, out, &d, terms);
  net.backward(ConstView<float>(d.image), ConstView<float>(d.audio), ConstView<float>(d.label), ready);
}

LossValues run_step(PerceiverNet<float>& net, const float* video, const float* audio, const int64_t* labels, int64_t B,
                   const OutputPoints& pts, const std::vector<uint8_t>& mask, const LossConfig& lc, bool backward,
                   std::vector<float>* label_logits, const TrainingMode& mode, const GradsReady& ready) {
  enqueue_step(net, video, audio, labels, B, pts, mask, lc, backward, net.loss_slot(), mode, ready);
  double host[kLossTermCount];
  net.backend().copy_to_host(host, net.loss_slot(), sizeof host);
  if (label_logits) {
    // The logits of the decode just run; backward does not touch them.
    const int64_t L = net.config().num_labels;
    label_logits->resize(size_t(B * L));
    net.backend().copy_to_host(label_logits->data(), net.last_outputs().label.data,
                               label_logits->size() * sizeof(float));
  }
  return loss_terms(host, lc);
}

void decode_everything(PerceiverNet<float>& net, int64_t chunks, std::vector<float>& video, std::vector<float>& audio,
                       std::vector<float>& label_logits) {
  const ModelConfig& c = net.config();
  PCV_CHECK(chunks > 0, "decoding chunks must be positive, got ", chunks);
  const int64_t B = net.latents().shape[0], P = c.pixels(), S = c.audio_samples(), spp = c.samples_per_patch;
  // More chunks than points would only add passes that decode nothing.
  chunks = std::min(chunks, std::max(P, c.audio_tokens()));
  Backend& be = net.backend();
  video.assign(size_t(B * P * 3), 0.f);
  audio.assign(size_t(B * S), 0.f);
  for (int64_t k = 0; k < chunks; ++k) {
    const OutputPoints pts = chunk_points(c, k, chunks);
    const DecoderOutputs<float> out = net.decode(pts);
    const int64_t pi = int64_t(pts.image.size()), pa = int64_t(pts.audio.size());
    // Chunks are contiguous ranges of points: one copy per batch item and modality.
    for (int64_t b = 0; b < B; ++b) {
      if (pi) be.copy_to_host(video.data() + (b * P + pts.image[0]) * 3, out.image.data + b * pi * 3, size_t(pi * 3) * sizeof(float));
      if (pa)
        be.copy_to_host(audio.data() + b * S + pts.audio[0] * spp, out.audio.data + b * pa * spp,
                        size_t(pa * spp) * sizeof(float));
    }
    // Queries do not interact, so every chunk gives the same label logits; keep the first.
    if (k == 0) copy_to_host(be, label_logits, ConstView<float>(out.label));
  }
}

}  // namespace perceiver
