// quickstart: the public API end to end on a preset — build, train a few SGD steps on a fixed
// synthetic batch, classify, reconstruct every pixel and sample, save and reload the weights.
//   build/bin/perceiver-quickstart [configs/tiny.yaml] [steps]
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "perceiver/model.h"
#include "perceiver/threads.h"

// A count given on the command line, or an error that names the argument.
int whole_number(const char* what, const char* text) {
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || v < 1 || v > 1000000)
    throw std::runtime_error(std::string(what) + " '" + text + "': expected a whole number from 1 to 1000000");
  return int(v);
}

int main(int argc, char** argv) {
  if (argc > 1 && (std::string(argv[1]) == "-h" || std::string(argv[1]) == "--help")) {
    std::printf("usage: perceiver-quickstart [MODEL_CONFIG] [STEPS]\n"
                "  trains STEPS (default 50) SGD steps of the model in MODEL_CONFIG (default configs/tiny.yaml)\n"
                "  on a fixed synthetic batch, classifies it, reconstructs it, saves and reloads the weights\n"
                "  (quickstart.safetensors in the current folder)\n");
    return 0;
  }
  perceiver::threads::use_fastest_cpu_kernels(argv);
  try {
    const std::string config = argc > 1 ? argv[1] : PERCEIVER_SOURCE_DIR "/configs/tiny.yaml";
    const int steps = argc > 2 ? whole_number("STEPS", argv[2]) : 50;
    perceiver::ModelConfig cfg = perceiver::load_model_config(config);
    cfg.mask_prob_label = 0.5;  // the paper's training: the label is visible half of the time
    perceiver::Model model(cfg, /*seed=*/1, perceiver::InitScheme::kDeepMind);
    std::printf("%s: %ld parameters\n", config.c_str(), long(model.num_parameters()));

    // Four clips whose colour and tone depend on their label, so there is something to learn.
    const int64_t B = 4;
    std::vector<float> video(B * cfg.pixels() * 3), audio(B * cfg.audio_samples());
    std::vector<int64_t> labels(B);
    for (int64_t b = 0; b < B; ++b) {
      labels[b] = b % cfg.num_labels;
      for (int64_t p = 0; p < cfg.pixels() * 3; ++p) video[b * cfg.pixels() * 3 + p] = float((p % 3 + labels[b]) % 4) / 4.0f;
      for (int64_t s = 0; s < cfg.audio_samples(); ++s)
        audio[b * cfg.audio_samples() + s] = 0.5f * std::sin(0.05f * float((labels[b] + 1) * s));
    }
    const perceiver::BatchView batch{video.data(), audio.data(), labels.data(), B};
    perceiver::LossConfig loss;
    loss.w_label = 1.0;
    for (int step = 0; step < steps; ++step) {
      model.zero_grad();
      const perceiver::LossValues l = model.train_step(batch, step, loss);
      auto p = model.parameters();
      auto g = model.gradients();
      for (size_t i = 0; i < p.size(); ++i) p[i] -= 0.05f * g[i];  // plain SGD; see src/optim for more
      if (step % 10 == 0 || step == steps - 1)
        std::printf("step %3d loss %.4f (video %.4f audio %.4f label %.4f)\n", step, l.total, l.image, l.audio, l.label);
    }
    const std::vector<float> logits = model.classify(batch);
    for (int64_t b = 0; b < B; ++b) {
      int64_t best = 0;
      for (int64_t k = 1; k < cfg.num_labels; ++k)
        if (logits[b * cfg.num_labels + k] > logits[b * cfg.num_labels + best]) best = k;
      std::printf("clip %ld: label %ld, predicted %ld\n", long(b), long(labels[b]), long(best));
    }
    const perceiver::Reconstruction rec = model.reconstruct(batch, 4);
    double err = 0;
    for (size_t i = 0; i < rec.video.size(); ++i) err += std::abs(rec.video[i] - video[i]);
    std::printf("full reconstruction: %zu pixel values, mean abs error %.4f\n", rec.video.size(), err / double(rec.video.size()));
    model.save_weights("quickstart.safetensors");
    perceiver::Model reloaded(cfg);
    reloaded.load_weights("quickstart.safetensors");
    std::printf("saved and reloaded quickstart.safetensors\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "perceiver-quickstart: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
