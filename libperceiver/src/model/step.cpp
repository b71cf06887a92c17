#include "model/step.h"

#include <algorithm>

#include "model/sampling.h"

namespace perceiver {

LossTerms run_step(PerceiverNet<float>& net, const float* video, const float* audio, const int64_t* labels, int64_t B,
                   const OutputPoints& pts, std::vector<uint8_t> mask, const LossConfig& lc, bool backward,
                   std::vector<float>* label_logits, const TrainingMode& mode, const GradsReady& ready) {
  const double p = net.config().attention_probs_dropout_prob;
  PCV_CHECK(!backward || mode.training || p == 0, "model config key 'attention_probs_dropout_prob' is ", p,
            " but this training pass runs in eval mode; HINT: pass run_step a TrainingMode{true, seed, step, ",
            "first_example} so the dropout masks are drawn, or set it to 0 (DeepMind trains without dropout)");
  struct Restore {  // the context's mode is the pass's only; eval (or whatever it was) afterwards
    Context<float>& ctx;
    TrainingMode before;
    ~Restore() { ctx.mode = before; }
  } restore{net.context(), net.context().mode};
  net.context().mode = mode;
  net.encode(video, audio, labels, B, std::move(mask));
  DecoderOutputs<float> out = net.decode(pts);
  if (label_logits) label_logits->assign(out.label.data, out.label.data + out.label.numel());
  std::vector<float> gi(out.image.numel()), ga(out.audio.numel()), gl(out.label.numel());
  DecoderOutputs<float> d{{gi.data(), out.image.shape}, {ga.data(), out.audio.shape}, {gl.data(), out.label.shape}};
  const LossTerms t = compute_loss(net.config(), lc, out, pts, video, audio, labels, net.context(), backward ? &d : nullptr);
  if (backward) net.backward(ConstView<float>(d.image), ConstView<float>(d.audio), ConstView<float>(d.label), ready);
  return t;
}

void decode_everything(PerceiverNet<float>& net, int64_t chunks, std::vector<float>& video, std::vector<float>& audio,
                       std::vector<float>& label_logits) {
  const ModelConfig& c = net.config();
  PCV_CHECK(chunks > 0, "decoding chunks must be positive, got ", chunks);
  const ConstView<float> z = net.latents();
  const int64_t B = z.shape[0], P = c.pixels(), S = c.audio_samples(), spp = c.samples_per_patch;
  video.assign(B * P * 3, 0.f);
  audio.assign(B * S, 0.f);
  for (int64_t k = 0; k < chunks; ++k) {
    const OutputPoints pts = chunk_points(c, k, chunks);
    DecoderOutputs<float> out = net.decode(pts);
    const int64_t pi = int64_t(pts.image.size()), pa = int64_t(pts.audio.size());
    for (int64_t b = 0; b < B; ++b) {
      if (pi) std::copy_n(out.image.data + b * pi * 3, pi * 3, video.data() + (b * P + pts.image[0]) * 3);
      if (pa) std::copy_n(out.audio.data + b * pa * spp, pa * spp, audio.data() + b * S + pts.audio[0] * spp);
    }
    // Queries do not interact, so every chunk gives the same label logits; keep the first.
    if (k == 0) label_logits.assign(out.label.data, out.label.data + out.label.numel());
  }
}

}  // namespace perceiver
