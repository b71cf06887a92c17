// perceiver-export: writes the compiled-step modules a `perceiver-train --device neuron` run will
// ask for. It takes perceiver-train's flags and config file (the step's shapes and constants come
// from them: model, batch size, optimizer and its hyper-parameters, loss, clipping), captures the
// trainer's step on the capture backend until the module repeats (the first step allocates the
// activations, so it can differ from the steady state), and writes per module <hash>.mlir
// (StableHLO) and <hash>.json (arguments, results, in-place aliasing), plus manifest.json (the
// module of each step in order). deploy/neuron/compile-neffs.sh turns them into NEFFs.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/presets.h"
#include "train/compiled_step.h"
#include "train/train_config.h"

namespace {

using namespace perceiver;

constexpr const char* kUsage = R"(perceiver-export --out DIR [--config MODEL] [--batch_size B] [--max_modules N] [perceiver-train flags...]

Writes the StableHLO modules of perceiver-train's training step for these settings into DIR:
  <hash>.mlir     the step as StableHLO (parameters, gradients, optimizer state updated in place)
  <hash>.json     its arguments and results: kind, element type, size, buffer, aliasing
  manifest.json   the module of each step, in order, and the settings they were made for
--config MODEL is --model (a preset name or a model config file); every perceiver-train flag and
--config_file_path are accepted, with the same meaning. A run finds its NEFFs by module hash, so
export with the flags of the run. Then: deploy/neuron/compile-neffs.sh DIR NEFF_DIR (Neuron SDK).
)";

struct ExportArgs {
  std::string out;
  int64_t max_modules = 4;
  std::vector<std::string> train_argv{"perceiver-export"};
};

int64_t parse_max_modules(const std::string& text) {
  char* end = nullptr;
  const long long n = std::strtoll(text.c_str(), &end, 10);
  PCV_CHECK(!text.empty() && *end == '\0' && n >= 1 && n <= 64, "--max_modules '", text, "': expected 1 to 64");
  return n;
}

// Our own flags out, the rest (with --config as --model) to the trainer's parser.
ExportArgs split_args(int argc, char** argv) {
  ExportArgs a;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    const bool has_value = i + 1 < argc;
    if (f == "--out" && has_value) a.out = argv[++i];
    else if (f == "--max_modules" && has_value) a.max_modules = parse_max_modules(argv[++i]);
    else if (f == "--config" && has_value) a.train_argv.insert(a.train_argv.end(), {"--model", argv[++i]});
    else a.train_argv.push_back(f);
  }
  return a;
}

StepCaptureOptions options_of(const TrainConfig& tc) {
  PCV_CHECK(tc.grad_accum_usteps == 1, "--grad_accum_usteps ", tc.grad_accum_usteps,
            ": compiled steps cover one micro-batch per step");
  StepCaptureOptions o;
  o.model = resolve_model_config(tc.model, tc.config_file_path);
  o.model.mask_prob_label = tc.label_mask_prob;
  o.batch = tc.batch_size;
  o.loss = parse_loss_config(tc.recon_loss, tc.loss_weights);
  o.optimizer.name = tc.optimizer;  // as the trainer sets them
  o.optimizer.momentum = tc.momentum;
  o.optimizer.weight_decay = tc.weight_decay;
  o.optimizer.max_grad_norm = tc.max_grad_norm;
  o.seed = uint64_t(tc.seed);
  return o;
}

int run(const ExportArgs& a, const TrainConfig& tc) {
  PCV_CHECK(!a.out.empty(), "--out DIR is required");
  const StepCaptureOptions o = options_of(tc);
  capture::CaptureBackend backend;
  StepCapture sc(o, backend);
  nlohmann::json steps = nlohmann::json::array(), modules = nlohmann::json::array();
  std::string last;
  bool steady = false;
  for (int64_t s = 0; s < a.max_modules; ++s) {
    const HostBatch batch = synthetic_batch(o.model, o.batch, o.seed, s);
    const capture::Graph g = sc.capture(s, batch, tc.lr);
    const capture::Module m = capture::lower(g);
    steps.push_back({{"step", s}, {"module", m.hash}});
    if (m.hash == last) {  // the steady state: every later step runs this module
      steady = true;
      break;
    }
    write_module(a.out, m.hash, m, g, backend, false);
    int aliased = 0;
    for (const auto& arg : m.args) aliased += arg.alias_result >= 0;
    modules.push_back({{"hash", m.hash}, {"stablehlo", m.hash + ".mlir"}, {"signature", m.hash + ".json"},
                       {"arguments", m.args.size()}, {"results", m.results.size()}, {"updated_in_place", aliased}});
    std::printf("step %ld: module %s (%zu ops, %zu arguments, %zu results, %zu bytes of StableHLO)\n", long(s),
                m.hash.c_str(), g.op_count(), m.args.size(), m.results.size(), m.text.size());
    last = m.hash;
  }
  PCV_CHECK(steady, "the training step's module still changed after ", a.max_modules, " steps; a run would ask for ",
            "modules not exported. HINT: a larger --max_modules");
  const nlohmann::json man{{"format", "perceiver-export 1"},
                           {"model", tc.model},
                           {"batch_size", tc.batch_size},
                           {"optimizer", tc.optimizer},
                           {"modules", modules},
                           {"steps", steps},
                           {"steady_module", last},
                           {"note", "the k-th step of a process (a resumed run starts again at the first) runs "
                                    "steps[k].module, every later one steady_module; a run finds <hash>.neff in "
                                    "$PERCEIVER_NEFF_DIR (deploy/neuron/compile-neffs.sh)"},
                           {"train_config", tc.to_yaml()}};
  std::ofstream f(std::filesystem::path(a.out) / "manifest.json");
  f << man.dump(1) << "\n";
  PCV_CHECK(f.good(), "cannot write ", a.out, "/manifest.json");
  std::printf("wrote %zu module(s) and manifest.json to %s\n", modules.size(), a.out.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    for (int i = 1; i < argc; ++i)
      if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) {
        std::printf("%s", kUsage);
        return 0;
      }
    ExportArgs a = split_args(argc, argv);
    std::vector<char*> targv;
    for (std::string& s : a.train_argv) targv.push_back(s.data());
    bool help = false;
    std::string help_text;
    const TrainConfig tc = parse_train_config(int(targv.size()), targv.data(), &help, &help_text);
    return run(a, tc);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "perceiver-export: error: %s\n", e.what());
    return 1;
  }
}
