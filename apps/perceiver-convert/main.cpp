// perceiver-convert: converts weights between HF safetensors and our HDF5 checkpoint, by HF
// parameter name, after checking every tensor against the registry a model config gives.
// Values are kept exactly (F16/BF16 are stored upcast and written back in their own dtype), so
// safetensors → HDF5 → safetensors reproduces the original file byte for byte.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <string>

#include "io/weights.h"
#include "model/perceiver_net.h"
#include "model/presets.h"
#include "perceiver/config.h"
#include "perceiver/error.h"

namespace {

using namespace perceiver;

constexpr const char* kExamples = R"(
Examples:
  # HF weights to our checkpoint (F32, F16 and BF16 sources; values kept exactly)
  perceiver-convert --config config.json --from model.safetensors --to ckpt.h5
  # and back; a file converted from safetensors comes back byte-identical
  perceiver-convert --config configs/kinetics700.yaml --from ckpt.h5 --to model.safetensors

Every tensor is checked against the parameters the config defines (by HF name and shape).
Missing, unexpected and mis-shaped tensors are printed one per line and nothing is written.)";

struct Args {
  std::string config, from, to;
};

const char* format_name(WeightFormat f) { return f == WeightFormat::kHdf5 ? "HDF5" : "safetensors"; }

// Prints one line per mismatch; true if the file matches the model.
bool check_against_config(const ModelConfig& cfg, const std::string& from) {
  const ParamRegistry registry = PerceiverNet<float>::make_registry(cfg);
  const WeightReport report = check_weights(registry, list_weight_tensors(from), from);
  for (const std::string& line : report.problems()) std::fprintf(stderr, "perceiver-convert: %s\n", line.c_str());
  if (!report.ok())
    std::fprintf(stderr, "perceiver-convert: %s does not match the config (%zu problems); nothing written\n",
                 from.c_str(), report.problems().size());
  return report.ok();
}

int run(const Args& a) {
  const std::string config_file = find_model_config(a.config, "", "--config").string();
  const ModelConfig cfg = load_model_config(config_file);
  const WeightFormat in = detect_weight_format(a.from);
  const auto out = weight_format_by_extension(a.to);
  PCV_CHECK(out, "--to ", a.to, ": use a .safetensors, .h5 or .hdf5 name");
  PCV_CHECK(in != *out, "--from and --to are both ", format_name(in), "; convert between the two formats");
  PCV_CHECK(std::filesystem::absolute(a.from) != std::filesystem::absolute(a.to), "--from and --to are the same file");
  if (!check_against_config(cfg, a.from)) return 1;

  const ConvertSummary s =
      in == WeightFormat::kSafetensors
          ? convert_safetensors_to_h5(a.from, a.to, {{"source_file", a.from}, {"config_file", config_file}})
          : convert_h5_to_safetensors(a.from, a.to);
  std::printf("%s -> %s: %lld tensors, %lld parameters, dtype %s, %lld data bytes, %lld bytes written\n",
              a.from.c_str(), a.to.c_str(), (long long)s.tensors, (long long)s.parameters, s.dtype_str().c_str(),
              (long long)s.data_bytes, (long long)std::filesystem::file_size(a.to));
  if (*out == WeightFormat::kSafetensors)
    std::printf("header: %s\n",
                s.header_preserved ? "the source file's, verbatim" : "canonical (sorted, as save_file)");
  if (s.rounded)
    std::fprintf(stderr, "perceiver-convert: warning: %lld values did not fit their source dtype and were rounded\n",
                 (long long)s.rounded);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Convert Perceiver IO weights between HF safetensors and the libperceiver HDF5 checkpoint."};
  app.footer(kExamples);
  Args a;
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // job specs append flags
  app.add_option("--config", a.config, "model config: a preset name (tiny, small, kinetics700, demo), a YAML "
                 "file or an HF config.json")
      ->type_name("NAME|PATH")
      ->required();
  app.add_option("--from", a.from, "input weights (.safetensors or .h5)")->type_name("PATH")->required()
      ->check(CLI::ExistingFile);
  app.add_option("--to", a.to, "output weights (.h5/.hdf5 or .safetensors), written atomically")->type_name("PATH")
      ->required();
  CLI11_PARSE(app, argc, argv);
  try {
    return run(a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "perceiver-convert: error: %s\n", e.what());
    return 1;
  }
}
