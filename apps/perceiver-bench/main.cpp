// perceiver-bench: trains N steps on random inputs (the config's default output points) and ends
// with one line: examples_per_s=<x> peak_rss_mb=<y> gflops=<z> (the model's FLOPs per second)
// run_gflops=<r> (those it ran: fewer with folded K/V projections and a summed input gradient),
// plus peak_device_mb=<w> on a device backend (the most device memory its allocations held at
// once). bench/run_model.sh runs it next to the PyTorch reference on the same config and threads;
// bench/run_gpu.sh next to HuggingFace's model on the same GPU. With --against a second precision
// trains beside the first, step by step in turn: the line then ends with against=<p>
// against_examples_per_s=<x> against_ratio=<r> (the first's speed over the second's).
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/rng.h"
#include "model/flops.h"
#include "model/loss.h"
#include "model/presets.h"
#include "perceiver/error.h"
#include "perceiver/threads.h"

namespace {

using namespace perceiver;

// Peak resident set size of this process (VmHWM), in MB.
double peak_rss_mb() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  return 0;
}

struct Options {
  std::string config = "small";
  int64_t batch = 4, steps = 5, warmup = 1;
  int threads = 0;
  uint64_t seed = 0;
  std::string device = "cpu";
  std::string precision = "fp32";
  std::string against;  // a second precision, its steps alternating with the first's
  bool keep_attention_scores = true;
  bool fold_kv_projections = true;
  int64_t kv_row_chunk = 0;
  bool factor_kv_inputs = true;
};

// The random inputs every step trains on, the same for every precision.
struct Inputs {
  int64_t batch;
  std::vector<float> video, audio;
  std::vector<int64_t> labels;
  Inputs(const ModelConfig& cfg, int64_t B, uint64_t seed)
      : batch(B), video(B * cfg.pixels() * 3), audio(B * cfg.audio_samples()), labels(B) {
    RngStream data(seed, RngPurpose::kTest);
    for (auto& v : video) v = float(data.uniform());
    for (auto& v : audio) v = float(data.normal() * 0.1);
    for (auto& l : labels) l = int64_t(data.below(uint64_t(cfg.num_labels)));
  }
};

// One precision's net on its own backend, and the seconds its timed steps took.
struct Run {
  std::string precision;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<PerceiverNet<float>> net;
  double seconds = 0;
};

Run make_run(const Options& o, const ModelConfig& cfg, const std::string& precision) {
  BackendOptions bo;
  bo.precision = parse_precision(precision);
  Run r{precision, make_backend(o.device, bo), nullptr};
  r.net = std::make_unique<PerceiverNet<float>>(
      cfg, *r.backend, NetOptions{o.keep_attention_scores, o.fold_kv_projections, o.kv_row_chunk, o.factor_kv_inputs});
  r.net->store().initialize(o.seed, InitScheme::kHuggingFace);
  return r;
}

// One training step of r on the inputs (its output points and label mask drawn from the seed and
// step); returns the loss and the step's wall seconds.
std::pair<float, double> train_step(Run& r, const Options& o, const ModelConfig& cfg, const Inputs& in, int64_t step) {
  PerceiverNet<float>& net = *r.net;
  const int64_t B = in.batch;
  const auto t0 = std::chrono::steady_clock::now();
  RngStream pick(o.seed, RngPurpose::kSubsample, uint64_t(step));
  OutputPoints pts{pick.sample_without_replacement(cfg.pixels(), cfg.num_queries_image),
                   pick.sample_without_replacement(cfg.audio_tokens(), cfg.num_queries_audio)};
  RngStream mk(o.seed, RngPurpose::kMask, uint64_t(step));
  std::vector<uint8_t> mask(B * cfg.input_tokens(), 0);
  for (int64_t b = 0; b < B; ++b) mask[(b + 1) * cfg.input_tokens() - 1] = mk.bernoulli(0.5);  // the paper's label masking
  net.store().zero_grad();
  net.encode(in.video.data(), in.audio.data(), in.labels.data(), B, mask);
  auto out = net.decode(pts);
  const DecoderOutputs<float> d = net.output_grads();
  const LossValues t = compute_loss(net, LossConfig{}, out, &d);
  net.backward(ConstView<float>(d.image), ConstView<float>(d.audio), ConstView<float>(d.label));
  // Plain SGD on the flat arena, so the step includes an optimizer pass.
  net.context().k.axpy(int64_t(net.store().params().size()), -1e-4f, net.store().grads().data(),
                       net.store().params().data());
  r.backend->synchronize();
  return {float(t.total), std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
}

void run(const Options& o) {
  threads::set_num_threads(o.threads);
  const std::filesystem::path config_file = find_model_config(o.config, "", "--config");
  const ModelConfig cfg = load_model_config(config_file.string());
  require_op_by_op_device(o.device, "perceiver-bench");
  PCV_CHECK(o.against != o.precision, "--against ", o.against, ": the same precision as --precision; give the other one");
  std::vector<Run> runs;
  runs.push_back(make_run(o, cfg, o.precision));
  if (!o.against.empty()) runs.push_back(make_run(o, cfg, o.against));
  const Inputs in(cfg, o.batch, o.seed);
  const int64_t B = o.batch;
  PerceiverNet<float>& net = *runs[0].net;
  std::printf("config=%s (%s) batch=%ld threads=%d params=%ld queries=%ld+%ld+1\n", o.config.c_str(),
              config_file.c_str(), long(B),
              threads::num_threads(), long(net.store().registry().num_parameters()), long(cfg.num_queries_image),
              long(cfg.num_queries_audio));
  std::printf("device: %s\n", runs[0].backend->describe().c_str());
  for (int64_t step = 0; step < o.warmup + o.steps; ++step) {
    // With --against, the two take turns going first, so neither always runs on the caches the
    // other left.
    std::string line = "step " + std::to_string(step);
    for (size_t i = 0; i < runs.size(); ++i) {
      Run& r = runs[(i + size_t(step)) % runs.size()];
      const auto [loss, dt] = train_step(r, o, cfg, in, step);
      if (step >= o.warmup) r.seconds += dt;
      char part[96];
      std::snprintf(part, sizeof part, "%s loss=%.5f %.3f s", runs.size() > 1 ? (" " + r.precision).c_str() : "",
                    double(loss), dt);
      line += part;
    }
    std::printf("%s%s\n", line.c_str(), step < o.warmup ? " (warm-up)" : "");
    std::fflush(stdout);
  }
  const double examples = double(B * o.steps), seconds = runs[0].seconds;
  // The model's work (what PyTorch runs, so GFLOP/s compare like examples/s) and the work as run.
  const double flops = training_flops(cfg, B, cfg.num_queries_image, cfg.num_queries_audio) * double(o.steps);
  const double run_flops =
      training_flops(cfg, B, cfg.num_queries_image, cfg.num_queries_audio, net.folds_kv_projections(),
                     net.sums_input_gradient(), net.kv_factor_width(), net.kv_factor_columns()) * double(o.steps);
  char device_mb[64] = "";
  if (const auto m = runs[0].backend->memory_stats())
    std::snprintf(device_mb, sizeof device_mb, " peak_device_mb=%.1f", double(m->peak_bytes) / double(1 << 20));
  char against[160] = "";
  if (runs.size() > 1)
    std::snprintf(against, sizeof against, " against=%s against_examples_per_s=%.4f against_ratio=%.3f",
                  o.against.c_str(), examples / runs[1].seconds, runs[1].seconds / seconds);
  std::printf("examples_per_s=%.4f peak_rss_mb=%.1f gflops=%.2f run_gflops=%.2f%s%s\n", examples / seconds, peak_rss_mb(),
              flops / seconds / 1e9, run_flops / seconds / 1e9, device_mb, against);
}

// An integer option's lower bound (CLI11's PositiveNumber and NonNegativeNumber print their upper
// bound as a double of 300 digits).
CLI::Validator at_least(int64_t lo) {
  return CLI::Validator(
      [lo](std::string& v) {
        char* end = nullptr;
        const long long x = std::strtoll(v.c_str(), &end, 10);
        if (end == v.c_str() || *end != '\0') return "'" + v + "' is not an integer";
        return x < lo ? "must be " + std::to_string(lo) + " or more, got " + v : std::string();
      },
      "");
}

}  // namespace

int main(int argc, char** argv) {
  perceiver::threads::use_fastest_cpu_kernels(argv);
  CLI::App app{"perceiver-bench: training throughput and peak memory on random inputs"};
  Options o;
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // job specs append flags
  app.add_option("--config", o.config, "preset (tiny, small, kinetics700, demo) or a YAML/config.json path")
      ->type_name("NAME|PATH")->capture_default_str();
  app.add_option("--batch_size", o.batch, "examples per step")->check(at_least(1))->capture_default_str();
  app.add_option("--steps", o.steps, "timed steps")->check(at_least(1))->capture_default_str();
  app.add_option("--warmup", o.warmup, "untimed steps first")->check(at_least(0))->capture_default_str();
  app.add_option("--threads", o.threads, "compute threads (0: one per core)")->check(at_least(0))->capture_default_str();
  app.add_option("--seed", o.seed, "seed")->capture_default_str();
  app.add_option("--device", o.device, "compute device (cpu, guarded, cuda)")->capture_default_str();
  app.add_option("--precision", o.precision, "fp32, or bf16 products with float32 accumulation (cuda; cpu with AVX512-BF16 or AMX)")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  app.add_option("--against", o.against,
                 "also train a second net at this precision on the same inputs, the two taking turns step by "
                 "step, and end the result line with against_examples_per_s and against_ratio (the main "
                 "precision's speed over the other's): a ratio that drift of a shared machine's speed over "
                 "minutes does not skew. peak_rss_mb then counts both nets")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  app.add_option("--keep_attention_scores", o.keep_attention_scores,
                 "the encoder cross-attention keeps its scores for the backward pass where the backend does (the cpu in "
                 "float32; with bf16 products the cpu keeps its bf16 keys instead); false: recomputes them")
      ->capture_default_str();
  app.add_option("--fold_kv_projections", o.fold_kv_projections,
                 "the encoder cross-attention folds its K/V projections into its queries and output where that "
                 "takes fewer FLOPs (false: projects K and V over every input row)")
      ->capture_default_str();
  app.add_option("--factor_kv_inputs", o.factor_kv_inputs,
                 "with the projections folded, the encoder cross-attention runs over the input rows' factors where "
                 "they are narrower than the rows (kinetics700: 416 channels for 704, 256 in ranges without audio rows; "
                 "false: over the rows)")
      ->capture_default_str();
  app.add_option("--kv_row_chunk", o.kv_row_chunk,
                 "rows of the encoder input that LN_kv and the K/V projections handle at once (0: the "
                 "device's choice: 2048 on the cpu, 16384 on cuda)")
      ->check(at_least(0))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "perceiver-bench: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
