// The trainer's configuration: defaults, then a YAML file (--config_file_path, a flat mapping of
// the flag names below), then command-line flags. Flag names keep those of the seed training
// script (DESIGN.md "Trainer flags") so existing job specs carry over. Unknown keys, wrong types
// and out-of-range values stop the run before any work, naming the key and where it came from.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace perceiver {

struct TrainConfig {
  // ---- the seed script's flags ----
  std::string config_file_path = "configs/main.yaml";
  int64_t batch_size = 8;
  int64_t test_batch_size = 8;
  std::string dataset = "kinetics";
  std::string dataset_dir = "build/demo/kinetics";
  bool do_eval = false;
  bool drop_last = true;
  int64_t image_dim = 0;  // 0: the model's frame size; otherwise must equal it
  int64_t log_steps = 10;
  std::string logdir = "logs/run";
  double lr = 1e-5;
  double momentum = 0.9;
  int64_t max_steps = 0;  // 0: until num_epochs are done
  int64_t num_epochs = 1;
  int64_t num_workers = 2;                  // data loader threads (at least 1)
  double target_accuracy = 0;               // stop once eval top-1 reaches it (0: off)
  double expected_average_throughput = 0;   // fail the run below this many examples/s (0: off)
  bool metrics_debug = false;               // also log per-phase timings and gradient norms
  bool enable_autocast = false;             // true means precision bf16 (PyTorch autocast's meaning)
  // ---- ours ----
  std::string model = "small";              // preset name (configs/<name>.yaml) or a model config path
  std::string device = "cpu";
  std::string precision = "fp32";           // fp32 | bf16 (see effective_precision)
  std::string optimizer = "sgd";            // sgd | adamw | lamb
  double adam_beta1 = 0.9, adam_beta2 = 0.999;  // adamw, lamb (torch's defaults)
  double weight_decay = 0;
  double max_grad_norm = 0;                 // clip by global norm (0: off)
  std::string lr_schedule = "constant";     // constant | warmup | cosine
  int64_t warmup_steps = 0;
  int64_t grad_accum_usteps = 1;            // micro-batches per optimizer step
  int64_t seed = 0;
  std::string resume = "auto";              // auto | never | <checkpoint path>
  bool overwrite = false;                   // --resume never: delete LOGDIR's checkpoints first
  int64_t save_steps = 200;                 // 0: only at the end and on SIGTERM
  int64_t keep_checkpoints = 3;
  std::string recon_loss = "l1";            // l1 | mse
  std::string loss_weights = "0.03,1,1e-4"; // video, audio, label
  double label_mask_prob = 0.5;             // training; the paper masks the label half of the time
  std::string init = "hf";                  // hf | deepmind
  int64_t threads = 0;                      // compute threads (0: one per core)
  int64_t eval_steps = 0;                   // evaluate every n steps as well (0: at epoch ends)
  int64_t eval_epochs = 1;                  // evaluate at the end of every n-th epoch
  int64_t eval_recon_clips = 4;             // clips fully reconstructed for PSNR
  int64_t eval_media_clips = 2;             // clips written as MP4/WAV/PNG (parse: 0 without media)
  int64_t eval_chunks = 16;                 // decoder chunks of a full reconstruction
  int64_t max_nonfinite_steps = 10;         // consecutive skipped steps before the run stops
  bool augment = false;                     // random crop and flip of training clips
  std::string data_source = "shards";       // shards (prepared once) | videos (decoded as read)
  bool bind = false;                        // compute and loader threads on separate cores
  bool keep_attention_scores = true;        // memory for speed: NetOptions::keep_attention_scores
  bool fold_kv_projections = true;          // NetOptions::fold_kv_projections
  int64_t kv_row_chunk = 0;                 // NetOptions::kv_row_chunk (0: the backend's choice)
  bool factor_kv_inputs = true;             // NetOptions::factor_kv_inputs

  // ---- not options: where the values came from ----
  bool config_file_read = false;            // config_file_path existed and was read

  /// The effective config as YAML (every key, one per line, in table order).
  /// The precision the run computes in: bf16 when precision says so or enable_autocast is set
  /// (the seed job's spelling of the same request), fp32 otherwise.
  std::string effective_precision() const { return enable_autocast ? "bf16" : precision; }
  std::string to_yaml() const;
  /// The seed's banner block; its config_file_path line says whether that file was read.
  std::string banner() const;
};

/// Parses argv (flags override the YAML file, which overrides defaults; a repeated flag: the
/// last one wins). The default --config_file_path is read only if it exists (relative to the
/// working folder); one given explicitly must exist. Throws perceiver::Error naming the key for
/// unknown, repeated or non-scalar keys in the file, wrong types and values out of range. For
/// --help, `help` is set and `help_text` lists every option with its type and the default in
/// effect (built-in, or from the config file that would be read).
TrainConfig parse_train_config(int argc, char** argv, bool* help_requested, std::string* help_text);

}  // namespace perceiver
