// Writes what check_xla.py needs to prove the captured training step with XLA: N training steps
// captured on the capture backend and lowered to StableHLO (stepK.mlir + manifest + the bytes of
// every input and initial state), and the same N steps run on the cpu backend (the reference):
// step 0's logits, loss terms and every parameter gradient, each step's loss terms and gradient
// norm, and the parameters after the last update.
//
//   xla_dump --config configs/tiny.yaml --batch 2 --optimizer adamw --steps 3 --out DIR
#include <CLI/CLI.hpp>

#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "backend/cpu/cpu_backend.h"
#include "model/sampling.h"
#include "model/step.h"
#include "train/compiled_step.h"

namespace {

using namespace perceiver;
namespace fs = std::filesystem;

struct Args {
  std::string config, out, optimizer = "sgd", recon = "l1", hidden_act;
  int64_t batch = 2, steps = 3;
  double lr = 1e-3, max_grad_norm = 0, label_mask_prob = -1, mask_prob = -1;
  int64_t num_blocks = 0;
};

template <class T>
void write_raw(const fs::path& p, const std::vector<T>& v) {
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(v.data()), std::streamsize(v.size() * sizeof(T)));
  PCV_CHECK(f.good(), "cannot write ", p.string());
}

StepCaptureOptions options(const Args& a) {
  StepCaptureOptions o;
  o.model = load_model_config(a.config);
  if (!a.hidden_act.empty()) o.model.hidden_act = a.hidden_act == "gelu_new" ? GeluKind::kTanh : GeluKind::kErf;
  if (a.label_mask_prob >= 0) o.model.mask_prob_label = a.label_mask_prob;
  if (a.mask_prob >= 0) o.model.mask_prob_image = o.model.mask_prob_audio = a.mask_prob;
  if (a.num_blocks > 0) o.model.num_blocks = a.num_blocks;
  o.batch = a.batch;
  o.loss.recon = a.recon == "mse" ? ReconLoss::kMse : ReconLoss::kL1;
  o.optimizer.name = a.optimizer;
  o.optimizer.max_grad_norm = a.max_grad_norm;
  o.seed = 7;
  return o;
}

// One expectation: a host-read result (by its index among the step's host reads) against a
// reference file, compared per tensor of `split` ("params": by the parameter registry).
nlohmann::json expect(int64_t step, int read, const std::string& label, const std::string& file, const char* dtype,
                      const char* split = "") {
  return {{"step", step}, {"read", read}, {"label", label}, {"file", file}, {"dtype", dtype}, {"split", split}};
}

int run(const Args& a) {
  const StepCaptureOptions o = options(a);
  const fs::path dir = a.out;
  fs::create_directories(dir);
  nlohmann::json exp = nlohmann::json::array(), steps = nlohmann::json::array(), params = nlohmann::json::array();

  // The reference: the trainer's step on the cpu backend.
  cpu::CpuBackend cpu;
  PerceiverNet<float> net(o.model, cpu);
  net.store().initialize(o.seed, o.init);
  auto opt = make_optimizer(o.optimizer, net.store().registry(), cpu);
  Arena<double> stats(cpu, size_t(kLossTermCount + kOptimStatCount));
  for (const auto& e : net.store().registry().entries())
    params.push_back({{"name", e.spec.name}, {"offset", e.offset}, {"elems", e.spec.shape.numel()}});
  for (int64_t s = 0; s < a.steps; ++s) {
    const HostBatch b = synthetic_batch(o.model, o.batch, o.seed, s);
    net.store().zero_grad();
    enqueue_step(net, b.video.data(), b.audio.data(), b.labels.data(), o.batch, draw_output_points(o.model, o.seed, s),
                 draw_masks(o.model, o.batch, o.seed, s, 0), o.loss, true, stats.data(), TrainingMode{true, o.seed, s, 0});
    if (s == 0) {
      const DecoderOutputs<float> out = net.last_outputs();
      write_raw(dir / "ref.logits_image.bin", download(cpu, ConstView<float>(out.image)));
      write_raw(dir / "ref.logits_audio.bin", download(cpu, ConstView<float>(out.audio)));
      write_raw(dir / "ref.logits_label.bin", download(cpu, ConstView<float>(out.label)));
      write_raw(dir / "ref.grads.bin", net.store().grads().to_host());
      int i = 0;
      for (const char* n : {"logits_image", "logits_audio", "logits_label"})
        exp.push_back(expect(0, i++, n, std::string("ref.") + n + ".bin", "f32"));
      exp.push_back(expect(0, 3, "grads", "ref.grads.bin", "f32", "params"));
    }
    opt->enqueue_step(net.store(), a.lr, stats.data() + kLossTermCount);
    std::vector<double> host = stats.to_host();
    opt->finish_step(host.data() + kLossTermCount);
    const std::string f = "ref.stats" + std::to_string(s) + ".bin";
    write_raw(dir / f, host);
    exp.push_back(expect(s, s == 0 ? 4 : 0, "loss terms and grad sumsq, step " + std::to_string(s), f, "f64"));
  }
  write_raw(dir / "ref.params_final.bin", net.store().params().to_host());

  // The capture of the same steps.
  capture::CaptureBackend cap;
  StepCapture sc(o, cap);
  for (int64_t s = 0; s < a.steps; ++s) {
    const HostBatch b = synthetic_batch(o.model, o.batch, o.seed, s);
    std::vector<float> sink;
    auto read_back = [&] {
      const DecoderOutputs<float> out = sc.net().last_outputs();
      for (ConstView<float> v : {ConstView<float>(out.image), ConstView<float>(out.audio), ConstView<float>(out.label)})
        sink = download(cap, v);
      sink = sc.net().store().grads().to_host();
    };
    const capture::Graph g = sc.capture(s, b, a.lr, s == 0 ? std::function<void()>(read_back) : nullptr);
    const capture::Module m = capture::lower(g);
    const std::string stem = "step" + std::to_string(s);
    write_module(dir, stem, m, g, cap, true);
    std::printf("%s: %zu ops, %zu arguments, %zu results, %zu bytes of StableHLO, hash %s\n", stem.c_str(), g.op_count(),
                m.args.size(), m.results.size(), m.text.size(), m.hash.c_str());
    steps.push_back(stem);
  }
  exp.push_back({{"step", a.steps - 1}, {"state", "params"}, {"label", "parameters after the last update"},
                 {"file", "ref.params_final.bin"}, {"dtype", "f32"}, {"split", "params"}});
  std::ofstream(dir / "run.json") << nlohmann::json{{"steps", steps}, {"expect", exp}, {"params", params}}.dump(1);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Capture N training steps as StableHLO and run them on the cpu backend as the reference"};
  Args a;
  app.add_option("--config", a.config, "model config (YAML)")->required();
  app.add_option("--out", a.out, "output directory")->required();
  app.add_option("--batch", a.batch);
  app.add_option("--steps", a.steps);
  app.add_option("--optimizer", a.optimizer)->check(CLI::IsMember({"sgd", "adamw", "lamb"}));
  app.add_option("--recon", a.recon)->check(CLI::IsMember({"l1", "mse"}));
  app.add_option("--hidden_act", a.hidden_act)->check(CLI::IsMember({"gelu", "gelu_new"}));
  app.add_option("--lr", a.lr);
  app.add_option("--max_grad_norm", a.max_grad_norm);
  app.add_option("--label_mask_prob", a.label_mask_prob);
  app.add_option("--mask_prob", a.mask_prob, "image and audio token mask probability");
  app.add_option("--num_blocks", a.num_blocks);
  CLI11_PARSE(app, argc, argv);
  try {
    return run(a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "xla_dump: %s\n", e.what());
    return 1;
  }
}
