#include "train/train_config.h"

#include <CLI/CLI.hpp>
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <sstream>
#include <variant>

#include "data/media_hooks.h"
#include "io/atomic_file.h"
#include "model/yaml_mapping.h"
#include "perceiver/error.h"

namespace perceiver {
namespace {

using Field = std::variant<int64_t TrainConfig::*, double TrainConfig::*, bool TrainConfig::*, std::string TrainConfig::*>;

struct Option {
  const char* name;
  Field field;
  const char* help;
  std::function<std::string(const TrainConfig&)> check;  // "" if fine, else what is wrong
  const char* type = nullptr;  // shown by --help; null: INT, FLOAT, BOOL or TEXT by the field
};

// Integer options are range-checked as int64 before anything narrows them (threads, workers and
// image sizes become int) or multiplies them (batch × ranks × micro-batches, steps × epochs).
std::string in_range(int64_t v, int64_t lo, int64_t hi) {
  if (v >= lo && v <= hi) return "";
  return "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + std::to_string(v);
}
constexpr int64_t kMaxCount = int64_t(1) << 20;  // batch sizes, clips, chunks
constexpr int64_t kMaxSteps = int64_t(1) << 40;  // steps and step intervals
std::string positive(int64_t v) { return in_range(v, 1, kMaxCount); }
std::string steps(int64_t v) { return in_range(v, 0, kMaxSteps); }
std::string non_negative(double v) { return v >= 0 && std::isfinite(v) ? "" : "must be a finite number >= 0"; }
std::string one_of(const std::string& v, std::initializer_list<const char*> allowed) {
  std::string list;
  for (const char* a : allowed) {
    if (v == a) return "";
    list += std::string(list.empty() ? "" : ", ") + a;
  }
  return "'" + v + "' is not one of: " + list;
}

// --device neuron runs the training step compiled ahead of time for one shape of batch (one
// micro-batch, every batch full); an evaluation step is not exported.
std::string neuron_limits(const TrainConfig& c) {
  if (c.do_eval) return "'neuron' runs only the compiled training step: set do_eval false and evaluate the checkpoints "
                        "with perceiver-eval --device cpu";
  if (c.grad_accum_usteps != 1) return "'neuron' needs grad_accum_usteps 1 (the compiled step is one micro-batch)";
  if (!c.drop_last) return "'neuron' needs drop_last true (a short last batch has no compiled step)";
  return "";
}

const std::vector<Option>& options() {
  using C = TrainConfig;
  static const std::vector<Option> table = {
      {"config_file_path", &C::config_file_path,
       "YAML file with defaults for any of these options (the default one is read only if it exists)", nullptr, "PATH"},
      {"batch_size", &C::batch_size, "clips per step (per rank)", [](const C& c) { return positive(c.batch_size); }},
      {"test_batch_size", &C::test_batch_size, "clips per evaluation batch", [](const C& c) { return positive(c.test_batch_size); }},
      {"dataset", &C::dataset, "data set kind", [](const C& c) { return one_of(c.dataset, {"kinetics"}); }},
      {"dataset_dir", &C::dataset_dir, "prepared HDF5 shards, or a Kinetics-layout folder (see data_source)",
       [](const C& c) { return c.dataset_dir.empty() ? "must not be empty" : ""; }, "PATH"},
      {"do_eval", &C::do_eval, "evaluate on the validation split (at epoch ends and at the end)", nullptr},
      {"drop_last", &C::drop_last, "drop the last incomplete batch of an epoch", nullptr},
      {"image_dim", &C::image_dim, "frame size; 0 = the model's", [](const C& c) { return in_range(c.image_dim, 0, 8192); }},
      {"log_steps", &C::log_steps, "log every n steps", [](const C& c) { return in_range(c.log_steps, 1, kMaxSteps); }},
      {"logdir", &C::logdir, "log, TensorBoard and checkpoint directory (created once the config is valid)",
       [](const C& c) { return c.logdir.empty() ? "must not be empty" : output_folder_problem(c.logdir); }, "PATH"},
      {"lr", &C::lr, "peak learning rate", [](const C& c) { return c.lr > 0 && std::isfinite(c.lr) ? "" : "must be positive"; }},
      {"momentum", &C::momentum, "SGD momentum", [](const C& c) { return c.momentum >= 0 && c.momentum < 1 ? "" : "must be in [0, 1)"; }},
      {"max_steps", &C::max_steps, "stop after this many optimizer steps (0: after num_epochs)",
       [](const C& c) { return steps(c.max_steps); }},
      {"num_epochs", &C::num_epochs, "epochs to train", [](const C& c) { return in_range(c.num_epochs, 1, kMaxCount); }},
      {"num_workers", &C::num_workers, "data loader threads", [](const C& c) { return in_range(c.num_workers, 1, 256); }},
      {"target_accuracy", &C::target_accuracy, "stop once evaluation top-1 reaches this (0: off)",
       [](const C& c) { return c.target_accuracy >= 0 && c.target_accuracy <= 1 ? "" : "must be in [0, 1]"; }},
      {"expected_average_throughput", &C::expected_average_throughput,
       "fail (exit 3) if the average examples/s is below this (0: off)", [](const C& c) { return non_negative(c.expected_average_throughput); }},
      {"metrics_debug", &C::metrics_debug, "also log phase timings and gradient norms", nullptr},
      {"enable_autocast", &C::enable_autocast, "true: the same as --precision bf16 (the seed job's flag)", nullptr},
      {"model", &C::model, "model preset (tiny, small, kinetics700, demo) or a model config path", nullptr, "NAME|PATH"},
      {"device", &C::device, "compute device (neuron: the steps perceiver-export wrote, compiled by neuronx-cc)",
       [](const C& c) {
         const std::string bad = one_of(c.device, {"cpu", "guarded", "cuda", "neuron"});
         return bad.empty() && c.device == "neuron" ? neuron_limits(c) : bad;
       }},
      {"precision", &C::precision,
       "fp32, or bf16: bf16 products with float32 accumulation, float32 master weights and optimizer states (cpu: "
       "a CPU with AMX, or AVX512-BF16 and oneDNN, else refused; PERCEIVER_CPU_BF16_GEMM=emulated runs it on any CPU, "
       "slower)",
       [](const C& c) { return one_of(c.precision, {"fp32", "bf16"}); }},
      {"optimizer", &C::optimizer, "sgd, adamw or lamb", [](const C& c) { return one_of(c.optimizer, {"sgd", "adamw", "lamb"}); }},
      {"adam_beta1", &C::adam_beta1, "first-moment decay of adamw and lamb",
       [](const C& c) { return c.adam_beta1 >= 0 && c.adam_beta1 < 1 ? "" : "must be in [0, 1)"; }},
      {"adam_beta2", &C::adam_beta2, "second-moment decay of adamw and lamb (lower reacts faster to gradient changes)",
       [](const C& c) { return c.adam_beta2 >= 0 && c.adam_beta2 < 1 ? "" : "must be in [0, 1)"; }},
      {"weight_decay", &C::weight_decay, "decoupled weight decay (not on biases and norms)", [](const C& c) { return non_negative(c.weight_decay); }},
      {"max_grad_norm", &C::max_grad_norm, "clip gradients by global norm (0: off)", [](const C& c) { return non_negative(c.max_grad_norm); }},
      {"lr_schedule", &C::lr_schedule, "constant, warmup or cosine", [](const C& c) { return one_of(c.lr_schedule, {"constant", "warmup", "cosine"}); }},
      {"warmup_steps", &C::warmup_steps, "linear warm-up steps", [](const C& c) { return steps(c.warmup_steps); }},
      {"grad_accum_usteps", &C::grad_accum_usteps, "micro-batches per optimizer step",
       [](const C& c) { return in_range(c.grad_accum_usteps, 1, 1 << 16); }},
      {"seed", &C::seed, "seed of initialisation, sampling, masking and output points",
       [](const C& c) { return c.seed >= 0 ? "" : "must not be negative"; }},
      {"resume", &C::resume, "auto (newest valid checkpoint in logdir), never, or a checkpoint path", nullptr,
       "auto|never|PATH"},
      {"overwrite", &C::overwrite, "with --resume never: delete the checkpoints already in logdir (refused otherwise)", nullptr},
      {"save_steps", &C::save_steps, "checkpoint every n steps (0: only at the end and on SIGTERM)",
       [](const C& c) { return steps(c.save_steps); }},
      {"keep_checkpoints", &C::keep_checkpoints, "checkpoints kept (0: all)",
       [](const C& c) { return in_range(c.keep_checkpoints, 0, kMaxCount); }},
      {"recon_loss", &C::recon_loss, "l1 (the paper) or mse", [](const C& c) { return one_of(c.recon_loss, {"l1", "mse"}); }},
      {"loss_weights", &C::loss_weights, "weights of the video, audio and label terms: V,A,L", nullptr},
      {"label_mask_prob", &C::label_mask_prob, "probability that a training clip's label input is masked",
       [](const C& c) { return c.label_mask_prob >= 0 && c.label_mask_prob <= 1 ? "" : "must be in [0, 1]"; }},
      {"init", &C::init, "initialiser: hf (N(0, 0.02)) or deepmind", [](const C& c) { return one_of(c.init, {"hf", "deepmind"}); }},
      {"threads", &C::threads, "compute threads (0: one per core, or per core left to compute with --bind)",
       [](const C& c) { return in_range(c.threads, 0, 4096); }},
      {"eval_steps", &C::eval_steps, "also evaluate every n steps (0: epoch ends only)",
       [](const C& c) { return steps(c.eval_steps); }},
      {"eval_epochs", &C::eval_epochs, "evaluate at the end of every n-th epoch (and at the end of training)",
       [](const C& c) { return in_range(c.eval_epochs, 1, kMaxCount); }},
      {"eval_recon_clips", &C::eval_recon_clips, "validation clips fully reconstructed for PSNR (spread over the set)",
       [](const C& c) { return in_range(c.eval_recon_clips, 0, kMaxCount); }},
      {"eval_media_clips", &C::eval_media_clips,
       "validation clips written as MP4, WAV and PNG (needs media support; its default is 0 without it)",
       [](const C& c) { return in_range(c.eval_media_clips, 0, kMaxCount); }},
      {"eval_chunks", &C::eval_chunks, "decoder passes per full reconstruction", [](const C& c) { return positive(c.eval_chunks); }},
      {"max_nonfinite_steps", &C::max_nonfinite_steps, "consecutive non-finite steps before the run stops",
       [](const C& c) { return in_range(c.max_nonfinite_steps, 1, kMaxSteps); }},
      {"augment", &C::augment, "random crop and flip of training clips", nullptr},
      {"data_source", &C::data_source,
       "shards: read prepared HDF5 shards (a Kinetics-layout dataset_dir is prepared once); videos: decode each "
       "clip when it is read (broken clips are skipped and counted)",
       [](const C& c) { return one_of(c.data_source, {"shards", "videos"}); }},
      {"bind", &C::bind, "bind compute threads and data loader threads to separate cores (hwloc); reported at start",
       nullptr},
      {"keep_attention_scores", &C::keep_attention_scores,
       "the encoder cross-attention keeps its scores for the backward pass (cpu, float32: B x 163 MB at kinetics700, "
       "a step about 5-7% faster; with bf16 products the cpu recomputes them anyway, which is faster there, and keeps "
       "the attention's bf16 keys instead: B x 43 MB, no second pass over the embedded inputs); false recomputes both",
       nullptr},
      {"fold_kv_projections", &C::fold_kv_projections,
       "the encoder cross-attention folds its K/V projections into its queries and output where that takes fewer "
       "FLOPs (one head, cpu): no K or V over the inputs; false projects them",
       nullptr},
      {"factor_kv_inputs", &C::factor_kv_inputs,
       "with its projections folded, the encoder cross-attention runs over the input rows' factors where they are "
       "narrower than the rows (cpu; kinetics700: 416 channels for 704, 256 in ranges without audio rows); false runs "
       "it over the rows",
       nullptr},
      {"kv_row_chunk", &C::kv_row_chunk,
       "rows of the encoder input that LN_kv and the K/V projections handle at once: 0 is the device's choice "
       "(2048 on cpu, 16384 on cuda); larger takes more memory for fewer, larger products",
       [](const C& c) { return in_range(c.kv_row_chunk, 0, kMaxCount); }},
  };
  return table;
}

std::string to_string(const TrainConfig& c, const Field& f) {
  return std::visit(
      [&](auto member) -> std::string {
        using V = std::decay_t<decltype(c.*member)>;
        if constexpr (std::is_same_v<V, bool>) return (c.*member) ? "true" : "false";
        else if constexpr (std::is_same_v<V, std::string>) return c.*member;
        else if constexpr (std::is_same_v<V, double>) {
          std::ostringstream os;
          os << c.*member;
          return os.str();
        } else return std::to_string(c.*member);
      },
      f);
}

// Sets a field from text; throws naming the key and the source on a type error.
void assign(TrainConfig& c, const Option& o, const std::string& text, const std::string& source) {
  auto bad = [&](const char* type) { PCV_FAIL("config key '", o.name, "' (", source, "): '", text, "' is not ", type); };
  std::visit(
      [&](auto member) {
        using V = std::decay_t<decltype(c.*member)>;
        if constexpr (std::is_same_v<V, bool>) {
          if (text == "true" || text == "True" || text == "1") c.*member = true;
          else if (text == "false" || text == "False" || text == "0") c.*member = false;
          else bad("a boolean (true/false)");
        } else if constexpr (std::is_same_v<V, std::string>) {
          c.*member = text;
        } else {
          size_t used = 0;
          try {
            if constexpr (std::is_same_v<V, double>) c.*member = std::stod(text, &used);
            else c.*member = std::stoll(text, &used);
          } catch (const std::out_of_range&) {
            bad("within the range of a 64-bit number");
          } catch (...) {
            used = 0;
          }
          if (used != text.size() || text.empty()) bad(std::is_same_v<V, double> ? "a number" : "an integer");
        }
      },
      o.field);
}

const Option* find(const std::string& name) {
  for (const auto& o : options())
    if (name == o.name) return &o;
  return nullptr;
}

void apply_yaml(TrainConfig& c, const std::string& path, std::map<std::string, std::string>& sources) {
  const YAML::Node doc = load_yaml_file(path, "config file (--config_file_path)");
  c.config_file_read = true;  // an empty file too: it was read, and sets nothing
  if (doc.IsNull()) return;
  PCV_CHECK(doc.IsMap(), path, ": expected a mapping of option names to values");
  const std::vector<YamlEntry> entries = yaml_mapping(doc, path);
  for (const YamlEntry& e : entries)
    PCV_CHECK(e.key != "model" || !e.value.IsMap(), path, ": this file is a model config (its 'model:' is a mapping "
              "of model keys), not a trainer config; pass it as --model ", path);
  for (const YamlEntry& e : entries) {
    const std::string where = path + ":" + std::to_string(e.line);
    const Option* o = find(e.key);
    PCV_CHECK(o, "unknown config key '", e.key, "' in ", where, " (see perceiver-train --help for the keys)");
    PCV_CHECK(e.key != "config_file_path", "config key 'config_file_path' cannot be set inside ", path);
    PCV_CHECK(e.value.IsScalar(), "config key '", e.key, "' in ", where, ": expected a single value");
    assign(c, *o, e.value.Scalar(), path);
    sources[e.key] = path;
  }
}

// --help's type column: the value's kind, or what the option names (a path, a choice).
std::string type_name(const Option& o) {
  if (o.type) return o.type;
  return std::visit(
      [](auto member) -> std::string {
        using V = std::decay_t<decltype(TrainConfig{}.*member)>;
        if constexpr (std::is_same_v<V, bool>) return "BOOL";
        else if constexpr (std::is_same_v<V, double>) return "FLOAT";
        else if constexpr (std::is_same_v<V, int64_t>) return "INT";
        else return "TEXT";
      },
      o.field);
}

// The command line: every option as a flag taking its value as text (types are checked by
// assign(), so that errors name the key), the last of repeated flags winning. `shown` gives the
// defaults --help prints.
void add_options(CLI::App& app, const TrainConfig& shown, std::map<std::string, std::string>& given, bool& help) {
  app.set_help_flag();
  app.add_flag("-h,--help", help, "print this help (with the defaults in effect here) and exit");
  for (const auto& o : options()) {
    CLI::Option* opt = app.add_option(std::string("--") + o.name, given[o.name], o.help)
                           ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    const std::string value = to_string(shown, o.field);
    if (std::holds_alternative<bool TrainConfig::*>(o.field)) {
      // --flag, --flag true, --flag=false. CLI11 would hand a bare --flag its default_str as the
      // value, so the default is shown as part of the type ("BOOL=false" either way).
      opt->expected(0, 1)->type_name(type_name(o) + "=" + value);
    } else {
      opt->type_name(type_name(o))->default_str(value);
    }
  }
}

}  // namespace

std::string TrainConfig::to_yaml() const {
  std::ostringstream os;
  os << "# Effective perceiver-train configuration (defaults < config file < flags)\n";
  for (const auto& o : options()) {
    if (std::string(o.name) == "config_file_path") continue;
    os << o.name << ": " << YAML::Node(to_string(*this, o.field)).Scalar() << "\n";
  }
  return os.str();
}

std::string TrainConfig::banner() const {
  std::ostringstream os;
  os << "--------TRAINING CONFIG----------\n";
  for (const auto& o : options()) {
    os << o.name << ": " << to_string(*this, o.field);
    if (std::string(o.name) == "config_file_path")
      os << (config_file_read ? " (read: " + std::filesystem::absolute(config_file_path).string() + ")"
                              : " (not found from " + std::filesystem::current_path().string() +
                                    ": no config file read, built-in defaults and flags only)");
    os << "\n";
  }
  os << "---------------------------------\n";
  return os.str();
}

TrainConfig parse_train_config(int argc, char** argv, bool* help_requested, std::string* help_text) {
  const char* kAbout = "perceiver-train: train the Perceiver IO multimodal autoencoder on Kinetics-layout video data.";
  const char* kFooter =
      "Values come from the built-in defaults, then --config_file_path (YAML: option: value), then flags; of a "
      "repeated flag the last one counts.\n"
      "Examples:\n"
      "  perceiver-train --config_file_path configs/main.yaml\n"
      "  perceiver-train --dataset_dir /fsx/kinetics --logdir /fsx/runs/a --batch_size 8 --optimizer lamb --lr 2e-3";
  CLI::App app{kAbout};
  bool help = false;
  std::map<std::string, std::string> given;
  add_options(app, TrainConfig{}, given, help);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    PCV_FAIL("command line: ", e.what(), " (see perceiver-train --help)");
  }
  TrainConfig c;
  // Media outputs need the media component: without it the built-in default writes none (a
  // value from the file or the command line is a request, refused by the trainer).
  if (!media_hooks()) c.eval_media_clips = 0;
  std::map<std::string, std::string> sources;
  const bool explicit_file = app.count("--config_file_path") > 0;
  if (explicit_file) c.config_file_path = given["config_file_path"];
  if (explicit_file || std::filesystem::exists(c.config_file_path)) apply_yaml(c, c.config_file_path, sources);
  *help_requested = help;
  if (help) {  // the defaults in effect: built-in, then the config file this run would read
    CLI::App shown{kAbout, "perceiver-train"};  // never parses, so it takes no name from argv[0]
    std::map<std::string, std::string> unused;
    bool unused_help = false;
    add_options(shown, c, unused, unused_help);
    shown.footer(std::string(kFooter) + "\nDefaults shown: built-in" +
                 (c.config_file_read ? ", then " + c.config_file_path : " (no config file read)") + ".");
    *help_text = shown.help();
    return c;
  }
  for (const auto& o : options()) {
    if (app.count(std::string("--") + o.name) == 0) continue;
    const bool bare_flag = std::holds_alternative<bool TrainConfig::*>(o.field) && given[o.name].empty();
    assign(c, o, bare_flag ? "true" : given[o.name], "command line");
    sources[o.name] = "command line";
  }
  for (const auto& o : options()) {
    if (!o.check) continue;
    const std::string problem = o.check(c);
    const auto it = sources.find(o.name);
    PCV_CHECK(problem.empty(), "config key '", o.name, "' (", it == sources.end() ? "default" : it->second, "): ", problem);
  }
  return c;
}

}  // namespace perceiver
