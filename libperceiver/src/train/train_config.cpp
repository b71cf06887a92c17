#include "train/train_config.h"

#include <CLI/CLI.hpp>
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <sstream>
#include <variant>

#include "perceiver/error.h"

namespace perceiver {
namespace {

using Field = std::variant<int64_t TrainConfig::*, double TrainConfig::*, bool TrainConfig::*, std::string TrainConfig::*>;

struct Option {
  const char* name;
  Field field;
  const char* help;
  std::function<std::string(const TrainConfig&)> check;  // "" if fine, else what is wrong
};

std::string positive(int64_t v) { return v > 0 ? "" : "must be positive, got " + std::to_string(v); }
std::string non_negative(double v) { return v >= 0 ? "" : "must not be negative"; }
std::string one_of(const std::string& v, std::initializer_list<const char*> allowed) {
  std::string list;
  for (const char* a : allowed) {
    if (v == a) return "";
    list += std::string(list.empty() ? "" : ", ") + a;
  }
  return "'" + v + "' is not one of: " + list;
}

const std::vector<Option>& options() {
  using C = TrainConfig;
  static const std::vector<Option> table = {
      {"config_file_path", &C::config_file_path, "YAML file with defaults for any of these options", nullptr},
      {"batch_size", &C::batch_size, "clips per step (per rank)", [](const C& c) { return positive(c.batch_size); }},
      {"test_batch_size", &C::test_batch_size, "clips per evaluation batch", [](const C& c) { return positive(c.test_batch_size); }},
      {"dataset", &C::dataset, "data set kind", [](const C& c) { return one_of(c.dataset, {"kinetics"}); }},
      {"dataset_dir", &C::dataset_dir, "prepared HDF5 shards, or a Kinetics-layout folder (prepared on first use)",
       [](const C& c) { return c.dataset_dir.empty() ? "must not be empty" : ""; }},
      {"do_eval", &C::do_eval, "evaluate on the validation split (at epoch ends and at the end)", nullptr},
      {"drop_last", &C::drop_last, "drop the last incomplete batch of an epoch", nullptr},
      {"image_dim", &C::image_dim, "frame size; 0 = the model's", [](const C& c) { return c.image_dim >= 0 ? "" : "must not be negative"; }},
      {"log_steps", &C::log_steps, "log every n steps", [](const C& c) { return positive(c.log_steps); }},
      {"logdir", &C::logdir, "log, TensorBoard and checkpoint directory", [](const C& c) { return c.logdir.empty() ? "must not be empty" : ""; }},
      {"lr", &C::lr, "peak learning rate", [](const C& c) { return c.lr > 0 && std::isfinite(c.lr) ? "" : "must be positive"; }},
      {"momentum", &C::momentum, "SGD momentum", [](const C& c) { return c.momentum >= 0 && c.momentum < 1 ? "" : "must be in [0, 1)"; }},
      {"max_steps", &C::max_steps, "stop after this many optimizer steps (0: after num_epochs)",
       [](const C& c) { return c.max_steps >= 0 ? "" : "must not be negative"; }},
      {"num_epochs", &C::num_epochs, "epochs to train", [](const C& c) { return positive(c.num_epochs); }},
      {"num_workers", &C::num_workers, "data loader threads", [](const C& c) { return c.num_workers >= 0 ? "" : "must not be negative"; }},
      {"target_accuracy", &C::target_accuracy, "stop once evaluation top-1 reaches this (0: off)",
       [](const C& c) { return c.target_accuracy >= 0 && c.target_accuracy <= 1 ? "" : "must be in [0, 1]"; }},
      {"expected_average_throughput", &C::expected_average_throughput,
       "fail (exit 3) if the average examples/s is below this (0: off)", [](const C& c) { return non_negative(c.expected_average_throughput); }},
      {"metrics_debug", &C::metrics_debug, "also log phase timings and gradient norms", nullptr},
      {"enable_autocast", &C::enable_autocast, "accepted for compatibility; the CPU backend computes in float32", nullptr},
      {"model", &C::model, "model preset (tiny, small, kinetics700, demo) or a model config path", nullptr},
      {"device", &C::device, "compute device", [](const C& c) { return one_of(c.device, {"cpu", "guarded", "cuda", "neuron"}); }},
      {"optimizer", &C::optimizer, "sgd, adamw or lamb", [](const C& c) { return one_of(c.optimizer, {"sgd", "adamw", "lamb"}); }},
      {"weight_decay", &C::weight_decay, "decoupled weight decay (not on biases and norms)", [](const C& c) { return non_negative(c.weight_decay); }},
      {"max_grad_norm", &C::max_grad_norm, "clip gradients by global norm (0: off)", [](const C& c) { return non_negative(c.max_grad_norm); }},
      {"lr_schedule", &C::lr_schedule, "constant, warmup or cosine", [](const C& c) { return one_of(c.lr_schedule, {"constant", "warmup", "cosine"}); }},
      {"warmup_steps", &C::warmup_steps, "linear warm-up steps", [](const C& c) { return c.warmup_steps >= 0 ? "" : "must not be negative"; }},
      {"grad_accum_usteps", &C::grad_accum_usteps, "micro-batches per optimizer step", [](const C& c) { return positive(c.grad_accum_usteps); }},
      {"seed", &C::seed, "seed of initialisation, sampling, masking and output points", [](const C& c) { return c.seed >= 0 ? "" : "must not be negative"; }},
      {"resume", &C::resume, "auto (newest valid checkpoint in logdir), never, or a checkpoint path", nullptr},
      {"overwrite", &C::overwrite, "with --resume never: delete the checkpoints already in logdir (refused otherwise)", nullptr},
      {"save_steps", &C::save_steps, "checkpoint every n steps (0: only at the end and on SIGTERM)",
       [](const C& c) { return c.save_steps >= 0 ? "" : "must not be negative"; }},
      {"keep_checkpoints", &C::keep_checkpoints, "checkpoints kept (0: all)", [](const C& c) { return c.keep_checkpoints >= 0 ? "" : "must not be negative"; }},
      {"recon_loss", &C::recon_loss, "l1 (the paper) or mse", [](const C& c) { return one_of(c.recon_loss, {"l1", "mse"}); }},
      {"loss_weights", &C::loss_weights, "weights of the video, audio and label terms: V,A,L", nullptr},
      {"label_mask_prob", &C::label_mask_prob, "probability that a training clip's label input is masked",
       [](const C& c) { return c.label_mask_prob >= 0 && c.label_mask_prob <= 1 ? "" : "must be in [0, 1]"; }},
      {"init", &C::init, "initialiser: hf (N(0, 0.02)) or deepmind", [](const C& c) { return one_of(c.init, {"hf", "deepmind"}); }},
      {"threads", &C::threads, "compute threads (0: one per core)", [](const C& c) { return c.threads >= 0 ? "" : "must not be negative"; }},
      {"eval_steps", &C::eval_steps, "also evaluate every n steps (0: epoch ends only)", [](const C& c) { return c.eval_steps >= 0 ? "" : "must not be negative"; }},
      {"eval_recon_clips", &C::eval_recon_clips, "validation clips fully reconstructed for PSNR",
       [](const C& c) { return c.eval_recon_clips >= 0 ? "" : "must not be negative"; }},
      {"eval_media_clips", &C::eval_media_clips, "validation clips written as MP4, WAV and PNG",
       [](const C& c) { return c.eval_media_clips >= 0 ? "" : "must not be negative"; }},
      {"eval_chunks", &C::eval_chunks, "decoder passes per full reconstruction", [](const C& c) { return positive(c.eval_chunks); }},
      {"max_nonfinite_steps", &C::max_nonfinite_steps, "consecutive non-finite steps before the run stops",
       [](const C& c) { return positive(c.max_nonfinite_steps); }},
      {"augment", &C::augment, "random crop and flip of training clips", nullptr},
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
  YAML::Node doc;
  try {
    doc = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    PCV_FAIL("cannot open config file '", path, "' (--config_file_path)");
  } catch (const YAML::Exception& e) {
    PCV_FAIL(path, ": YAML error: ", e.what());
  }
  if (doc.IsNull()) return;
  PCV_CHECK(doc.IsMap(), path, ": expected a mapping of option names to values");
  for (const auto& kv : doc) {
    const std::string key = kv.first.as<std::string>();
    const Option* o = find(key);
    PCV_CHECK(o, "unknown config key '", key, "' in ", path, " (see perceiver-train --help for the keys)");
    PCV_CHECK(key != "config_file_path", "config key 'config_file_path' cannot be set inside ", path);
    PCV_CHECK(kv.second.IsScalar(), "config key '", key, "' in ", path, ": expected a single value");
    assign(c, *o, kv.second.Scalar(), path);
    sources[key] = path;
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
  for (const auto& o : options()) os << o.name << ": " << to_string(*this, o.field) << "\n";
  os << "---------------------------------\n";
  return os.str();
}

TrainConfig parse_train_config(int argc, char** argv, bool* help_requested, std::string* help_text) {
  CLI::App app{"perceiver-train: train the Perceiver IO multimodal autoencoder on Kinetics-layout video data."};
  app.set_help_flag();
  bool help = false;
  app.add_flag("-h,--help", help, "print this help and exit");
  TrainConfig defaults;
  std::map<std::string, std::string> given;
  for (const auto& o : options()) {
    const std::string flag = std::string("--") + o.name;
    const std::string help_line = std::string(o.help) + " [" + to_string(defaults, o.field) + "]";
    if (std::holds_alternative<bool TrainConfig::*>(o.field))  // --flag, --flag true, --flag=false
      app.add_option(flag, given[o.name], help_line)->expected(0, 1);
    else
      app.add_option(flag, given[o.name], help_line);
  }
  app.footer(
      "Values come from the defaults, then --config_file_path (YAML: option: value), then flags.\n"
      "Examples:\n"
      "  perceiver-train --config_file_path configs/main.yaml\n"
      "  perceiver-train --dataset_dir /fsx/kinetics --logdir /fsx/runs/a --batch_size 8 --optimizer lamb --lr 2e-3");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    PCV_FAIL("command line: ", e.what(), " (see perceiver-train --help)");
  }
  if (help) {
    *help_requested = true;
    *help_text = app.help();
    return defaults;
  }
  *help_requested = false;
  TrainConfig c;
  std::map<std::string, std::string> sources;
  const bool explicit_file = app.count("--config_file_path") > 0;
  if (explicit_file) c.config_file_path = given["config_file_path"];
  if (explicit_file || std::filesystem::exists(c.config_file_path)) apply_yaml(c, c.config_file_path, sources);
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
