// perceiver-eval: evaluation and the parity/debug entry point.
//   perceiver-eval --hf-config config.json --weights model.safetensors --inputs in.h5 --dump out.h5
// runs one forward + backward pass in eval mode and writes outputs, loss terms and every
// parameter gradient by HF name (libperceiver/src/model/parity_dump.h documents the layouts).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <sstream>

#include "io/weights.h"
#include "model/parity_dump.h"
#include "perceiver/threads.h"

namespace {

struct Options {
  std::string config, weights, inputs, dump;
  std::string recon_loss = "l1";
  std::string loss_weights = "0.03,1,1e-4";
  uint64_t seed = 0;
  int threads = 0;
};

perceiver::LossConfig parse_loss(const Options& o) {
  perceiver::LossConfig lc;
  lc.recon = o.recon_loss == "mse" ? perceiver::ReconLoss::kMse : perceiver::ReconLoss::kL1;
  std::stringstream ss(o.loss_weights);
  std::string part;
  std::vector<double> w;
  while (std::getline(ss, part, ',')) {
    try {
      size_t used = 0;
      w.push_back(std::stod(part, &used));
      PCV_CHECK(used == part.size(), "");
    } catch (...) {
      PCV_FAIL("--loss_weights: '", part, "' is not a number (expected V,A,L, e.g. 0.03,1,1e-4)");
    }
  }
  PCV_CHECK(w.size() == 3, "--loss_weights: expected 3 values V,A,L, got ", w.size());
  lc.w_image = w[0], lc.w_audio = w[1], lc.w_label = w[2];
  return lc;
}

int run_parity(const Options& o) {
  perceiver::threads::set_num_threads(o.threads);
  const perceiver::LossConfig lc = parse_loss(o);
  const perceiver::ModelConfig cfg = perceiver::load_model_config(o.config);
  perceiver::PerceiverNet<float> net(cfg, perceiver::cpu_backend());
  perceiver::load_weights(net.store(), o.weights);  // strict: throws naming any missing, extra or mis-shaped tensor
  const perceiver::LossTerms t = perceiver::forward_backward_dump(net, o.inputs, o.dump, lc, o.seed);
  std::printf("loss=%.8g image=%.8g audio=%.8g label=%.8g -> %s\n", t.total, t.image, t.audio, t.label, o.dump.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  perceiver::threads::reexec_with_best_blas_core(argv);
  CLI::App app{"perceiver-eval: evaluate a Perceiver IO multimodal autoencoder, or dump one forward/backward "
               "pass for parity checks."};
  app.footer(
      "Parity/debug mode:\n"
      "  perceiver-eval --hf-config config.json --weights model.safetensors --inputs in.h5 --dump out.h5\n"
      "  in.h5: video f32 [B,T,H,W,3], audio f32 [B,S], label i64 [B], subsample/image i64, subsample/audio i64,\n"
      "         optional masks/{audio,image,label} [B,tokens]. The config may also be one of our YAML presets.\n"
      "  out.h5: logits/{image,audio,label}, loss, loss_terms/{image,audio,label}, grads/<HF name>.");
  Options o;
  app.add_option("--hf-config,--config", o.config, "HF config.json or our YAML preset (configs/*.yaml)")->required()->check(CLI::ExistingFile);
  app.add_option("--weights", o.weights, "model.safetensors (F32/F16/BF16) or our HDF5 checkpoint")->required()->check(CLI::ExistingFile);
  app.add_option("--inputs", o.inputs, "HDF5 inputs (see below)")->required()->check(CLI::ExistingFile);
  app.add_option("--dump", o.dump, "HDF5 file to write")->required();
  app.add_option("--recon_loss", o.recon_loss, "reconstruction loss")->check(CLI::IsMember({"l1", "mse"}))->capture_default_str();
  app.add_option("--loss_weights", o.loss_weights, "weights of the video, audio and label terms")->capture_default_str();
  app.add_option("--seed", o.seed, "seed of the mask stream when 0 < mask probability < 1")->capture_default_str();
  app.add_option("--threads", o.threads, "compute threads (0: one per core)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    return run_parity(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "perceiver-eval: error: %s\n", e.what());
    return 1;
  }
}
