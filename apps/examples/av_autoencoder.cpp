// av_autoencoder: a video + audio autoencoder (no label modality) built on the unchanged
// PerceiverEncoder and PerceiverDecoder. Everything modality-specific lives in this file: how
// tokens are made (patches + Fourier positions, then a learned projection to the encoder width
// instead of HF's padding rows), how queries are made, and the output heads. Nothing in
// libperceiver/src/model/perceiver_core.* knows about it.
//   build/bin/perceiver-av-autoencoder [steps] [learning rate]
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/rng.h"
#include "model/fourier.h"
#include "model/perceiver_core.h"
#include "optim/optimizer.h"
#include "perceiver/threads.h"

namespace {

using namespace perceiver;

// Shapes: video [B, T=2, 16, 16, 3] in 4×4 patches; audio [B, 32] in patches of 4 samples.
constexpr int64_t kB = 4, kT = 2, kH = 16, kW = 16, kSd = 4, kS = 32, kSpp = 4;
constexpr int64_t kVideoTokens = kT * (kH / kSd) * (kW / kSd), kAudioTokens = kS / kSpp;
constexpr int64_t kPatch = kSd * kSd * 3, kC = 32, kE = 16, kF = 16;
const int64_t kVidPos = fourier_width(3, 2), kAudPos = fourier_width(1, 3);

// Tokens: [content | Fourier position] per modality, rows b-major.
std::vector<float> video_tokens(const std::vector<float>& video, const std::vector<float>& pos) {
  std::vector<float> t(kB * kVideoTokens * (kPatch + kVidPos));
  const int64_t gh = kH / kSd, gw = kW / kSd, w = kPatch + kVidPos;
  for (int64_t b = 0; b < kB; ++b)
    for (int64_t i = 0; i < kVideoTokens; ++i) {
      float* row = t.data() + (b * kVideoTokens + i) * w;
      const int64_t f = i / (gh * gw), y = (i / gw) % gh, x = i % gw;
      for (int64_t dy = 0; dy < kSd; ++dy)
        for (int64_t k = 0; k < kSd * 3; ++k)
          row[dy * kSd * 3 + k] = video[(((b * kT + f) * kH + y * kSd + dy) * kW + x * kSd) * 3 + k];
      std::copy_n(pos.data() + i * kVidPos, kVidPos, row + kPatch);
    }
  return t;
}

std::vector<float> audio_tokens(const std::vector<float>& audio, const std::vector<float>& pos) {
  std::vector<float> t(kB * kAudioTokens * (kSpp + kAudPos));
  for (int64_t b = 0; b < kB; ++b)
    for (int64_t i = 0; i < kAudioTokens; ++i) {
      float* row = t.data() + (b * kAudioTokens + i) * (kSpp + kAudPos);
      std::copy_n(audio.data() + b * kS + i * kSpp, kSpp, row);
      std::copy_n(pos.data() + i * kAudPos, kAudPos, row + kSpp);
    }
  return t;
}

struct AvModel {
  EncoderConfig enc_cfg;
  DecoderConfig dec_cfg;
  LinearConfig video_in{kPatch + kVidPos, kC}, audio_in{kSpp + kAudPos, kC};
  LinearConfig video_query{kVidPos, kE}, audio_query{kAudPos, kE};
  LinearConfig video_head{kF, 3, ParamRole::kHeadWeight}, audio_head{kF, kSpp, ParamRole::kHeadWeight};
  std::unique_ptr<PerceiverEncoder<float>> encoder;
  std::unique_ptr<PerceiverDecoder<float>> decoder;
  ParamStore<float> store;

  AvModel() {
    enc_cfg.num_latents = 8, enc_cfg.d_latents = 16, enc_cfg.self_attends_per_block = 2;
    enc_cfg.cross.q_dim = 16, enc_cfg.cross.kv_dim = kC;
    enc_cfg.self.cross = false, enc_cfg.self.q_dim = 16, enc_cfg.self.heads = 2;
    dec_cfg.cross.q_dim = kE, dec_cfg.cross.kv_dim = 16, dec_cfg.cross.query_residual = false;
    dec_cfg.output_channels = kF;
    encoder = std::make_unique<PerceiverEncoder<float>>(enc_cfg, "av.");
    decoder = std::make_unique<PerceiverDecoder<float>>(dec_cfg, "av.");
    ParamRegistry r;
    r.add(encoder->param_specs());
    r.add(decoder->param_specs());
    for (auto [lc, name] : {std::pair{&video_in, "adapters.video_in."}, {&audio_in, "adapters.audio_in."},
                            {&video_query, "adapters.video_query."}, {&audio_query, "adapters.audio_query."},
                            {&video_head, "heads.video."}, {&audio_head, "heads.audio."}})
      r.add(linear_param_specs(*lc), name);
    store = ParamStore<float>(std::move(r));
    store.initialize(3, InitScheme::kDeepMind);
  }
  LinearParams<float> p(const std::string& n) { return LinearParams<float>::bind({store, n}); }
  LinearGrads<float> g(const std::string& n) { return LinearGrads<float>::bind({store, n}); }
};

// Writes rows [0, n) of a [n, w] block into rows (b·M + offset + i) of x [B, M, C].
void place(const std::vector<float>& rows, int64_t per_b, int64_t offset, int64_t M, std::vector<float>& x) {
  for (int64_t b = 0; b < kB; ++b)
    std::copy_n(rows.data() + b * per_b * kC, per_b * kC, x.data() + (b * M + offset) * kC);
}

}  // namespace

// A command-line argument as a number in [lo, hi] (a whole one where `whole`), or an error that
// names it.
double argument(const char* what, const char* text, double lo, double hi, bool whole) {
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  if (end == text || *end != '\0' || !(v >= lo && v <= hi) || (whole && v != std::floor(v))) {
    char range[96];
    std::snprintf(range, sizeof range, "expected a %s from %.10g to %.10g", whole ? "whole number" : "number", lo, hi);
    throw std::runtime_error(std::string(what) + " '" + text + "': " + range);
  }
  return v;
}

int main(int argc, char** argv) {
  if (argc > 1 && (std::string(argv[1]) == "-h" || std::string(argv[1]) == "--help")) {
    std::printf("usage: perceiver-av-autoencoder [STEPS] [LEARNING_RATE]\n"
                "  trains a video + audio autoencoder on the unchanged encoder and decoder for STEPS (default 300)\n"
                "  AdamW steps at LEARNING_RATE (default 3e-3) and fails unless its MSE halves\n");
    return 0;
  }
  threads::use_fastest_cpu_kernels(argv);
  try {
    const int steps = argc > 1 ? int(argument("STEPS", argv[1], 1, 1e6, true)) : 300;
    const float lr = argc > 2 ? float(argument("LEARNING_RATE", argv[2], 0, 10, false)) : 3e-3f;
    AvModel m;
    OptimizerOptions adamw;
    adamw.name = "adamw";
    adamw.max_grad_norm = 1.0;
    auto optimizer = make_optimizer(adamw, m.store.registry(), m.store.backend());
    Context<float> ctx(cpu_backend());
    const auto& k = ctx.k;
    // Data: smooth colour waves and tones whose phase and pitch differ per clip.
    std::vector<float> video(kB * kT * kH * kW * 3), audio(kB * kS);
    for (int64_t b = 0; b < kB; ++b)
      for (int64_t t = 0; t < kT; ++t)
        for (int64_t y = 0; y < kH; ++y)
          for (int64_t x = 0; x < kW; ++x)
            for (int64_t c = 0; c < 3; ++c)
              video[(((b * kT + t) * kH + y) * kW + x) * 3 + c] =
                  0.5f + 0.4f * std::sin(6.28f * float(x) / kW + float(c + b + t)) * std::cos(3.14f * float(y) / kH);
    for (int64_t b = 0; b < kB; ++b)
      for (int64_t s = 0; s < kS; ++s) audio[b * kS + s] = 0.6f * std::sin(0.2f * float((b + 1) * s));
    const auto vpos = grid_positions({kT, kH / kSd, kW / kSd}), apos = grid_positions({kAudioTokens});
    std::vector<float> vpf(kVideoTokens * kVidPos), apf(kAudioTokens * kAudPos);
    fourier_features(vpos.data(), kVideoTokens, 3, 2, {kT, kH / kSd, kW / kSd}, vpf.data(), kVidPos);
    fourier_features(apos.data(), kAudioTokens, 1, 3, {kS}, apf.data(), kAudPos);
    const auto vt = video_tokens(video, vpf), at = audio_tokens(audio, apf);
    const int64_t M = kAudioTokens + kVideoTokens, npix = kT * kH * kW;
    // Queries: every pixel and every audio patch, positions as the HF decoder places them.
    std::vector<int64_t> all_pix(npix), all_aud(kAudioTokens);
    for (int64_t i = 0; i < npix; ++i) all_pix[i] = i;
    for (int64_t i = 0; i < kAudioTokens; ++i) all_aud[i] = i;
    const auto qvp = subsampled_positions({kT, kH, kW}, all_pix), qap = subsampled_positions({kAudioTokens}, all_aud);
    std::vector<float> qv(npix * kVidPos), qa(kAudioTokens * kAudPos);
    fourier_features(qvp.data(), npix, 3, 2, {kT, kH / kSd, kW / kSd}, qv.data(), kVidPos);
    fourier_features(qap.data(), kAudioTokens, 1, 3, {kS}, qa.data(), kAudPos);
    const int64_t O = npix + kAudioTokens;

    double first_loss = 0, last_loss = 0;
    for (int step = 0; step < steps; ++step) {
      m.store.zero_grad();
      // x [B, M, C]: audio tokens then video tokens, each projected to C.
      std::vector<float> xa(kB * kAudioTokens * kC), xv(kB * kVideoTokens * kC), x(kB * M * kC);
      linear_forward(m.audio_in, m.p("adapters.audio_in."), ConstView<float>{at.data(), Shape{kB * kAudioTokens, kSpp + kAudPos}},
                     TensorView<float>{xa.data(), Shape{kB * kAudioTokens, kC}}, ctx);
      linear_forward(m.video_in, m.p("adapters.video_in."), ConstView<float>{vt.data(), Shape{kB * kVideoTokens, kPatch + kVidPos}},
                     TensorView<float>{xv.data(), Shape{kB * kVideoTokens, kC}}, ctx);
      place(xa, kAudioTokens, 0, M, x);
      place(xv, kVideoTokens, kAudioTokens, M, x);
      ConstView<float> z = m.encoder->forward(m.store, ConstView<float>{x.data(), Shape{kB, M, kC}}, ctx);
      // q [B, O, E]: pixel queries then audio queries (the same for every clip).
      std::vector<float> q1(O * kE), q(kB * O * kE);
      linear_forward(m.video_query, m.p("adapters.video_query."), ConstView<float>{qv.data(), Shape{npix, kVidPos}},
                     TensorView<float>{q1.data(), Shape{npix, kE}}, ctx);
      linear_forward(m.audio_query, m.p("adapters.audio_query."), ConstView<float>{qa.data(), Shape{kAudioTokens, kAudPos}},
                     TensorView<float>{q1.data() + npix * kE, Shape{kAudioTokens, kE}}, ctx);
      for (int64_t b = 0; b < kB; ++b) std::copy(q1.begin(), q1.end(), q.begin() + b * O * kE);
      ConstView<float> f = m.decoder->forward(m.store, ConstView<float>{q.data(), Shape{kB, O, kE}}, z, ctx);
      // Heads and MSE against the clips; all pixel rows of a clip then its audio rows.
      std::vector<float> d_f(f.numel(), 0.f), pv(npix * 3), pa(kAudioTokens * kSpp);
      double loss = 0;
      for (int64_t b = 0; b < kB; ++b) {
        ConstView<float> fv{f.data + b * O * kF, Shape{npix, kF}}, fa{f.data + (b * O + npix) * kF, Shape{kAudioTokens, kF}};
        linear_forward(m.video_head, m.p("heads.video."), fv, TensorView<float>{pv.data(), Shape{npix, 3}}, ctx);
        linear_forward(m.audio_head, m.p("heads.audio."), fa, TensorView<float>{pa.data(), Shape{kAudioTokens, kSpp}}, ctx);
        const float* tv = video.data() + b * npix * 3;
        const float* ta = audio.data() + b * kS;
        double video_loss = 0, audio_loss = 0;
        k.mse_forward(npix * 3, pv.data(), tv, &video_loss);
        k.mse_forward(kS, pa.data(), ta, &audio_loss);
        loss += (video_loss + audio_loss) / kB;
        std::vector<float> dpv(pv.size(), 0.f), dpa(pa.size(), 0.f);
        k.mse_backward(npix * 3, pv.data(), tv, 1.0 / kB, dpv.data());
        k.mse_backward(kS, pa.data(), ta, 1.0 / kB, dpa.data());
        linear_backward(m.video_head, m.p("heads.video."), fv, ConstView<float>{dpv.data(), Shape{npix, 3}}, m.g("heads.video."),
                        TensorView<float>{d_f.data() + b * O * kF, Shape{npix, kF}}, ctx);
        linear_backward(m.audio_head, m.p("heads.audio."), fa, ConstView<float>{dpa.data(), Shape{kAudioTokens, kSpp}},
                        m.g("heads.audio."), TensorView<float>{d_f.data() + (b * O + npix) * kF, Shape{kAudioTokens, kF}}, ctx);
      }
      std::vector<float> dq(q.size(), 0.f), dx(x.size(), 0.f), dz(z.numel(), 0.f);
      m.decoder->backward(m.store, ConstView<float>{d_f.data(), f.shape}, TensorView<float>{dq.data(), Shape{kB, O, kE}},
                          TensorView<float>{dz.data(), z.shape}, ctx);
      m.encoder->backward(m.store, ConstView<float>{dz.data(), z.shape},
                          [&](int64_t row0, ConstView<float> rows) { std::copy_n(rows.data, rows.numel(), dx.data() + row0 * kC); }, ctx);
      // Adapters: sum the query gradient over clips, split the input gradient by modality.
      std::vector<float> dq1(O * kE, 0.f), dxa(xa.size()), dxv(xv.size());
      for (int64_t b = 0; b < kB; ++b)
        for (int64_t i = 0; i < O * kE; ++i) dq1[i] += dq[b * O * kE + i];
      for (int64_t b = 0; b < kB; ++b) {
        std::copy_n(dx.data() + b * M * kC, kAudioTokens * kC, dxa.data() + b * kAudioTokens * kC);
        std::copy_n(dx.data() + (b * M + kAudioTokens) * kC, kVideoTokens * kC, dxv.data() + b * kVideoTokens * kC);
      }
      linear_backward(m.video_query, m.p("adapters.video_query."), ConstView<float>{qv.data(), Shape{npix, kVidPos}},
                      ConstView<float>{dq1.data(), Shape{npix, kE}}, m.g("adapters.video_query."), TensorView<float>{}, ctx);
      linear_backward(m.audio_query, m.p("adapters.audio_query."), ConstView<float>{qa.data(), Shape{kAudioTokens, kAudPos}},
                      ConstView<float>{dq1.data() + npix * kE, Shape{kAudioTokens, kE}}, m.g("adapters.audio_query."),
                      TensorView<float>{}, ctx);
      linear_backward(m.audio_in, m.p("adapters.audio_in."), ConstView<float>{at.data(), Shape{kB * kAudioTokens, kSpp + kAudPos}},
                      ConstView<float>{dxa.data(), Shape{kB * kAudioTokens, kC}}, m.g("adapters.audio_in."), TensorView<float>{}, ctx);
      linear_backward(m.video_in, m.p("adapters.video_in."), ConstView<float>{vt.data(), Shape{kB * kVideoTokens, kPatch + kVidPos}},
                      ConstView<float>{dxv.data(), Shape{kB * kVideoTokens, kC}}, m.g("adapters.video_in."), TensorView<float>{}, ctx);
      optimizer->step(m.store, lr);
      if (step % 25 == 0 || step == steps - 1) std::printf("step %3d  reconstruction MSE %.5f\n", step, loss);
      if (step == 0) first_loss = loss;
      last_loss = loss;
    }
    // The example checks itself (ctest runs it): the autoencoder must have learned something.
    if (!(last_loss < 0.5 * first_loss)) {
      std::fprintf(stderr, "perceiver-av-autoencoder: MSE only went from %.4f to %.4f\n", first_loss, last_loss);
      return 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "perceiver-av-autoencoder: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
