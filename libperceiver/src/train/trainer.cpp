#include "train/trainer.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <numeric>
#include <sstream>

#include <nlohmann/json.hpp>

#include "data/loader.h"
#include "data/media_hooks.h"
#include "data/prepared_dataset.h"
#include "data/shards.h"
#include "dist/communicator.h"
#include "io/metrics_jsonl.h"
#include "io/tensorboard.h"
#include "model/presets.h"
#include "model/sampling.h"
#include "model/step.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "perceiver/threads.h"
#include "train/checkpoint.h"
#include "train/evaluation.h"

namespace perceiver {
namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// "2026-11-22 10:57:48.654494", the seed's log time format.
std::string now_string() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() % 1000000;
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  char out[80];
  std::snprintf(out, sizeof out, "%s.%06ld", buf, long(us));
  return out;
}

// rank0.json: where rank 0 runs, so its log is easy to find on a cluster.
void write_rank0_json(const fs::path& logdir, const dist::Communicator& comm, int64_t start_step) {
  char host[256] = "unknown";
  gethostname(host, sizeof host - 1);
  std::vector<std::string> ranks;
  for (int i = 0; i < comm.world_size(); ++i) ranks.push_back(comm.describe(i));
  nlohmann::json j{{"host", host},
                   {"pid", getpid()},
                   {"start_time", now_string()},
                   {"rank", 0},
                   {"world_size", comm.world_size()},
                   {"start_step", start_step},
                   {"logdir", fs::absolute(logdir).string()},
                   {"ranks", ranks}};
  std::ofstream(logdir / "rank0.json") << j.dump(2) << "\n";
}

// FNV-1a over the parameter bytes: the ranks must hold bit-identical parameters.
uint64_t checksum(const std::vector<float>& p) {
  uint64_t h = 1469598103934665603ull;
  const auto* b = reinterpret_cast<const unsigned char*>(p.data());
  for (size_t i = 0; i < p.size() * sizeof(float); ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}


}  // namespace

namespace {

// Everything the loop carries between steps.
struct Run {
  Run(const TrainConfig& c, dist::Communicator& m) : tc(c), comm(m), root(m.rank() == 0), logdir(c.logdir) {}
  const TrainConfig& tc;
  dist::Communicator& comm;
  bool root;  // rank 0: the only one that logs and writes LOGDIR
  ModelConfig model;
  fs::path logdir;
  std::unique_ptr<Backend> backend;  // --device: owns every tensor of the run
  std::unique_ptr<PerceiverNet<float>> net;
  OptimizerOptions optimizer_options;
  std::unique_ptr<Optimizer> optimizer;
  // The step's device results, read by the host once per step: kLossTermCount per micro-batch,
  // then the optimizer's kOptimStatCount.
  Arena<double> step_stats;
  std::unique_ptr<Schedule> schedule;
  std::unique_ptr<Loader> loader;
  std::unique_ptr<TensorBoardWriter> tb;
  std::unique_ptr<MetricsJsonl> jsonl;
  LoaderOptions val;  // where evaluation reads the validation clips
  threads::CorePlacement placement;  // --bind: compute and loader cores (empty: no binding)
  fs::path skip_report;              // data_source videos: clips skipped as unusable
  int64_t step = 0;
  int64_t epoch = 0;  // epoch of the last trained batch (0-based), for logs
  uint64_t seed = 0;
  bool stop_agreed = false;  // some rank was asked to stop (agreed by all at the last step)
  double allreduce_s = 0, allreduce_wait_s = 0;  // summed over the run (MPI only)
  int64_t allreduce_steps = 0;
};

TrainingState state_of(const Run& r) {
  TrainingState s;
  s.step = r.step;
  s.epoch = r.loader->position().epoch;
  s.sampler_epoch = r.loader->position().epoch;
  s.sampler_batch = r.loader->position().batch;
  s.seed = r.seed;
  s.world_size = r.comm.world_size();
  s.sampler_global_batch = r.tc.batch_size * r.comm.world_size();
  s.optimizer = r.tc.optimizer;
  s.config_yaml = r.tc.to_yaml();
  s.model_yaml = model_config_yaml(r.model);
  s.class_names = r.loader->source().class_names();  // for perceiver-eval --video without the data set
  return s;
}

// Checkpoints are host IO: where the device's memory is not host memory, they go through host
// mirrors of the parameters and of the optimizer state.
struct HostMirror {
  ParamStore<float> store;
  std::unique_ptr<Optimizer> optimizer;
};

HostMirror host_mirror(const Run& r) {
  const ParamRegistry& reg = r.net->store().registry();
  ParamStore<float> host(reg);  // host memory
  auto optimizer = make_optimizer(r.optimizer_options, reg, host.backend());
  return {std::move(host), std::move(optimizer)};
}

fs::path save_run_checkpoint(Run& r) {
  const fs::path path = checkpoint_path(r.logdir, r.step);
  if (r.backend->host_accessible()) return save_checkpoint(path, r.net->store(), r.optimizer.get(), state_of(r));
  HostMirror m = host_mirror(r);
  copy_arena(r.net->store().params(), m.store.params());
  r.optimizer->copy_state_to(*m.optimizer);
  return save_checkpoint(path, m.store, m.optimizer.get(), state_of(r));
}

TrainingState load_run_checkpoint(Run& r, const fs::path& path) {
  if (r.backend->host_accessible()) return load_checkpoint(path, r.net->store(), r.optimizer.get());
  HostMirror m = host_mirror(r);
  const TrainingState s = load_checkpoint(path, m.store, m.optimizer.get());
  copy_arena(m.store.params(), r.net->store().params());
  m.optimizer->copy_state_to(*r.optimizer);
  return s;
}

void save(Run& r, const char* why) {
  if (!r.root) return;
  const fs::path p = save_run_checkpoint(r);
  prune_checkpoints(r.logdir, r.tc.keep_checkpoints, p);
  std::printf("saved checkpoint %s (%s)\n", p.c_str(), why);
  std::fflush(stdout);
}

// A resumed run must continue with the model it saved: a preset edited in a way that keeps every
// shape would otherwise load and train on silently as another model. Checked before any tensor
// is read, so the message names the keys rather than a shape.
void check_same_model(const Run& r, const fs::path& path) {
  const std::optional<ModelConfig> saved = stored_model_config(path);
  if (!saved) {  // written before checkpoints stored their model
    if (r.root)
      std::fprintf(stderr, "warning: %s does not store its model config; resuming with model '%s' unchecked\n",
                   path.c_str(), r.tc.model.c_str());
    return;
  }
  const std::vector<std::string> diff = model_config_differences(*saved, r.model);
  if (diff.empty()) return;
  std::string keys;
  for (const std::string& d : diff) keys += "\n  " + d;
  PCV_FAIL("checkpoint ", path.string(), " was written with another model than this run's (model '", r.tc.model,
           "'); checkpoint vs now:", keys, "\nHINT: restore the model config to continue that run, or start ",
           "afresh in a new --logdir (or with --resume never --overwrite true)");
}

// --resume: auto picks the newest valid checkpoint in logdir; a path loads that one. Every rank
// loads it (LOGDIR is shared; nothing is written there before the first collective).
SamplerPosition resume(Run& r) {
  if (r.tc.resume == "never") return {};
  std::optional<fs::path> path;
  if (r.tc.resume == "auto") {
    std::vector<std::string> warnings;
    path = newest_valid_checkpoint(r.logdir, &warnings);
    if (r.root)
      for (const auto& w : warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
  } else {
    path = r.tc.resume;
  }
  if (!path) return {};
  check_same_model(r, *path);
  const TrainingState s = load_run_checkpoint(r, *path);
  PCV_CHECK(s.optimizer == r.tc.optimizer, "checkpoint ", path->string(), " was written with optimizer '", s.optimizer,
            "' but this run uses '", r.tc.optimizer, "'");
  // The seed keys the shuffle, masks and dropout of every step: continuing under another one
  // would silently be a different run from the saved sampler position on.
  PCV_CHECK(s.seed == r.seed, "checkpoint ", path->string(), " was written by a run with --seed ", s.seed,
            " but this run has --seed ", r.seed, "\nHINT: pass --seed ", s.seed,
            " to continue it, or start a new --logdir");
  r.step = s.step;
  if (r.root)
    std::printf("resumed from %s at step %ld (epoch %ld, batch %ld; written by %ld rank(s))\n", path->c_str(),
                long(s.step), long(s.sampler_epoch), long(s.sampler_batch), long(s.world_size));
  // The sampler position counts global batches of batch_size × world_size clips of the run that
  // wrote it. When that size changes, continue after the same number of clips of the epoch.
  const int64_t old_global = s.sampler_global_batch;
  const int64_t new_global = r.tc.batch_size * r.comm.world_size();
  if (old_global == new_global) return {s.sampler_epoch, s.sampler_batch};
  const int64_t clips = s.sampler_batch * old_global;
  const SamplerPosition p{s.sampler_epoch, clips / new_global};
  if (r.root) {
    std::printf("sampler position: %ld clips of epoch %ld seen in global batches of %ld; continuing at batch %ld "
                "of %ld clips\n", long(clips), long(s.sampler_epoch), long(old_global), long(p.batch), long(new_global));
    if (clips % new_global)
      std::fprintf(stderr, "warning: %ld clips seen is not a multiple of the new global batch of %ld clips: the "
                   "last %ld are visited again\n", long(clips), long(new_global), long(clips % new_global));
  }
  return p;
}

// The cores this rank may use: the node's, shared out between its ranks under MPI.
std::vector<int> rank_cores(const dist::Communicator& c) {
  const int cores = std::max(1, threads::topology().cores);
  if (c.uses_mpi()) return dist::local_cores(cores, c.local_rank(), c.local_size());
  std::vector<int> all(static_cast<size_t>(cores));
  std::iota(all.begin(), all.end(), 0);
  return all;
}

// Compute threads of this rank: `threads`, or one per core of the rank (with --bind: per core
// left after the loader's). Under MPI the process is first bound to the rank's own cores (so the
// loader's threads, started next, stay on them; mpirun's default binding would squeeze them onto
// one core); with --bind the loader workers bind themselves to the loader cores as they start.
// bind_threads() then pins each compute thread to one core.
void setup_threads(Run& r) {
  const TrainConfig& tc = r.tc;
  dist::Communicator& c = r.comm;
  const std::vector<int> mine = rank_cores(c);
  if (tc.bind) {
    r.placement = threads::split_cores(mine, int(tc.num_workers));
    threads::set_loader_cores(r.placement.loader);
  }
  const std::vector<int>& compute = tc.bind ? r.placement.compute : mine;
  const int n = tc.threads > 0 ? int(tc.threads) : int(compute.size());
  if (n > int(compute.size()) && (tc.bind || c.uses_mpi()) && c.local_rank() == 0)
    std::fprintf(stderr, "warning: %d compute thread(s) on %zu core(s) oversubscribe them\n", n, compute.size());
  threads::set_num_threads(n);
  if (c.uses_mpi()) threads::bind_process(mine);
  if (r.root)
    std::printf("threads: %s; device %s; precision %s\n", threads::topology().summary.c_str(),
                r.backend->describe().c_str(), precision_name(r.backend->precision()));
}

std::string core_list(const std::vector<int>& cores) {
  std::string s;
  for (int c : cores) s += (s.empty() ? "L#" : ",L#") + std::to_string(c);
  return s;
}

void bind_threads(Run& r) {
  dist::Communicator& c = r.comm;
  if (!c.uses_mpi() && !r.tc.bind) return;
  const std::vector<int>& cores = r.tc.bind ? r.placement.compute : rank_cores(c);
  std::vector<int> use;
  for (int i = 0; i < threads::num_threads(); ++i) use.push_back(cores[size_t(i) % cores.size()]);
  std::string lines;
  for (const auto& l : threads::bind_compute_threads(use)) lines += (lines.empty() ? "" : "; ") + l;
  const std::string loader = r.tc.bind ? "loader threads (" + std::to_string(r.tc.num_workers) + ") on core(s) " +
                                             core_list(r.placement.loader) +
                                             (r.placement.loader == r.placement.compute ? " (one core: shared)" : "")
                                       : "loader threads on the rank's cores";
  if (c.uses_mpi())
    std::printf("rank %d of %d (local %d of %d, %s): %d compute thread(s): %s; %s\n", c.rank(), c.world_size(),
                c.local_rank(), c.local_size(), c.describe(c.rank()).c_str(), threads::num_threads(), lines.c_str(),
                loader.c_str());
  else
    std::printf("binding: %d compute thread(s): %s; %s\n", threads::num_threads(), lines.c_str(), loader.c_str());
}

// Where the clips come from (data_source): prepared shards (a Kinetics layout is prepared once),
// or the videos themselves, decoded as they are read.
LoaderOptions data_of(const Run& r, const std::string& split) {
  const TrainConfig& tc = r.tc;
  LoaderOptions lo;
  if (tc.data_source == "videos") {
    lo.source = LoaderSource::kVideos;
    lo.dataset_dir = tc.dataset_dir;
    lo.split = parse_split(split);
  } else {
    lo.shard_dir = prepared_shards(tc.dataset_dir, split, r.model.num_frames, r.model.frame_height,
                                   std::max<int64_t>(1, tc.num_workers));
  }
  return lo;
}

// data_source videos: the skip report (prep's format) starts with the annotation rows that have
// no clip (rank 0 writes it before the start-up collective); each rank appends the clips it
// finds unusable, one line per append, as it meets them.
void start_skip_report(Run& r) {
  if (r.tc.data_source != "videos") return;
  r.skip_report = r.logdir / "skipped_train.tsv";
  if (!r.root) return;
  const std::vector<SkippedClip> missing = r.loader->source().missing();
  write_skip_report(r.skip_report, missing, {});
  std::printf("videos: %ld clips decoded as they are read; %zu annotation rows without a clip (%s)\n",
              long(r.loader->size()), missing.size(), r.skip_report.c_str());
}

std::string rank_prefix(const Run& r) {
  return r.comm.uses_mpi() ? "rank " + std::to_string(r.comm.rank()) + ": " : "";
}

void report_skipped(Run& r, const Batch& b) {
  for (const UnusableClip& u : b.skipped) {
    if (!u.first_time) continue;
    std::ofstream(r.skip_report, std::ios::app) << skip_report_line(u.row);
    std::fprintf(stderr, "%swarning: skipped clip %s: %s (%ld unusable clip(s) so far, listed in %s)\n",
                 rank_prefix(r).c_str(), u.path.c_str(), u.row.reason.c_str(), long(r.loader->unusable_clips()),
                 r.skip_report.c_str());
  }
}

void setup(Run& r) {
  const TrainConfig& tc = r.tc;
  // Errors only: encoders' chatter would drown the training log. From videos, quiet: a clip that
  // fails is reported with FFmpeg's reason when it is skipped.
  set_media_log_level(tc.data_source == "videos" ? MediaLogLevel::kQuiet : MediaLogLevel::kErrors);
  PCV_CHECK(tc.device != "neuron" || r.comm.world_size() == 1, "--device neuron: ", r.comm.world_size(),
            " ranks; this version trains on one NeuronCore (one rank). HINT: run one process");
  BackendOptions backend_options;
  backend_options.precision = parse_precision(tc.effective_precision());
  r.backend = make_backend(tc.device, backend_options);
  setup_threads(r);
  fs::path model_file;
  r.model = resolve_model_config(tc.model, tc.config_file_read ? tc.config_file_path : "", &model_file);
  if (r.root) std::printf("model: %s (%s)\n", tc.model.c_str(), model_file.c_str());
  const int64_t dim = tc.image_dim ? tc.image_dim : r.model.frame_height;
  PCV_CHECK(dim == r.model.frame_height && dim == r.model.frame_width, "config key 'image_dim': ", tc.image_dim,
            " does not match the model's ", r.model.frame_height, "x", r.model.frame_width, " frames");
  r.model.mask_prob_label = tc.label_mask_prob;
  r.seed = uint64_t(tc.seed);
  if (tc.resume == "never") start_afresh(r.logdir, tc.overwrite, false);  // refuse before any work
  LoaderOptions lo = data_of(r, "train");
  if (tc.do_eval) r.val = data_of(r, "validate");
  r.net = std::make_unique<PerceiverNet<float>>(r.model, *r.backend,
                                                NetOptions{tc.keep_attention_scores, tc.fold_kv_projections, tc.kv_row_chunk,
                                                           tc.factor_kv_inputs});
  r.net->store().initialize(r.seed, tc.init == "deepmind" ? InitScheme::kDeepMind : InitScheme::kHuggingFace);
  OptimizerOptions& oo = r.optimizer_options;
  oo.name = tc.optimizer;
  oo.momentum = tc.momentum;
  oo.beta1 = tc.adam_beta1, oo.beta2 = tc.adam_beta2;
  oo.weight_decay = tc.weight_decay;
  oo.max_grad_norm = tc.max_grad_norm;
  r.optimizer = make_optimizer(oo, r.net->store().registry(), *r.backend);
  r.step_stats = Arena<double>(*r.backend, size_t(tc.grad_accum_usteps * kLossTermCount + kOptimStatCount));
  r.step_stats.name("step_stats");
  const SamplerPosition start = resume(r);
  // Rank r reads its slice of every global batch of batch_size × world_size clips.
  lo.sampler = {r.seed, true, tc.drop_last, tc.batch_size, r.comm.rank(), r.comm.world_size()};
  lo.num_frames = int(r.model.num_frames);
  lo.image_dim = int(dim);
  lo.audio_samples = r.model.audio_samples();  // 48 kHz clip audio resampled per clip when the model differs
  lo.num_workers = int(tc.num_workers);
  lo.num_epochs = tc.num_epochs;
  lo.augment = tc.augment;
  r.loader = std::make_unique<Loader>(lo, start);
  bind_threads(r);  // after the loader's threads started with the rank's whole core set
  const int64_t per_epoch = r.loader->sampler().batches_per_epoch() / tc.grad_accum_usteps;
  PCV_CHECK(per_epoch > 0, "the training split has ", r.loader->size(), " clips: fewer than one step of ",
            tc.batch_size * tc.grad_accum_usteps * r.comm.world_size(),
            " (batch_size × grad_accum_usteps × ranks)");
  const int64_t total = tc.max_steps ? tc.max_steps : per_epoch * tc.num_epochs;
  PCV_CHECK(tc.lr_schedule != "cosine" || total > tc.warmup_steps, "config key 'warmup_steps' (", tc.warmup_steps,
            "): the cosine schedule needs more steps than its warm-up, and the run has ", total, " (",
            tc.max_steps ? "max_steps" : std::to_string(tc.num_epochs) + " epochs of " + std::to_string(per_epoch),
            "); lower warmup_steps or train longer");
  r.schedule = std::make_unique<Schedule>(ScheduleOptions{tc.lr_schedule, tc.lr, tc.warmup_steps, total, 0.0});
  // The config, model and data are valid: only now is LOGDIR changed (a refused run leaves it
  // as it was) and written.
  if (tc.resume == "never")
    for (const fs::path& p : start_afresh(r.logdir, tc.overwrite, r.root))
      if (r.root) std::printf("--overwrite: deleted %s\n", p.c_str());
  fs::create_directories(r.logdir / "checkpoints");
  start_skip_report(r);
  if (r.root) {
    std::ofstream(r.logdir / "config.yaml") << tc.to_yaml();
    write_rank0_json(r.logdir, r.comm, r.step);
    r.tb = std::make_unique<TensorBoardWriter>(r.logdir.string());
    r.tb->session_start(r.step);
    r.jsonl = std::make_unique<MetricsJsonl>((r.logdir / "metrics.jsonl").string());
    std::printf("model: %ld parameters; data: %ld training clips, %ld steps per epoch, %ld steps in all\n",
                long(r.net->store().registry().num_parameters()), long(r.loader->size()), long(per_epoch), long(total));
    if (r.comm.uses_mpi())
      std::printf("data parallel: %d rank(s) × batch %ld = %ld clips per micro-batch; gradient allreduce in buckets "
                  "of %.3g MB; collective deadline %g s (%g s after work of rank 0 alone)\n",
                  r.comm.world_size(), long(tc.batch_size), long(tc.batch_size * r.comm.world_size()),
                  double(r.comm.options().bucket_bytes) / (1 << 20), r.comm.options().timeout_s,
                  r.comm.options().long_timeout_s);
  }
  if (r.comm.uses_mpi()) {
    // Start-up may differ between ranks (data preparation under a lock): a long deadline. Every
    // rank must have resumed from the same step with the same parameters.
    const uint64_t h = checksum(r.net->store().params().to_host()) ^ uint64_t(r.step) * 0x9E3779B97F4A7C15ull;
    if (!r.comm.same_everywhere(h, "start-up check of the resumed step and parameters", r.comm.options().long_timeout_s))
      PCV_FAIL("ranks start from different steps or parameters (different checkpoints in LOGDIR '", r.logdir.string(),
               "'? LOGDIR must be shared by all ranks)");
  }
}

struct Window {  // the log window
  double loss = 0, image = 0, audio = 0, label = 0, grad_norm = 0;
  double allreduce = 0, allreduce_wait = 0;
  int64_t steps = 0, examples = 0;  // examples of all ranks
  Clock::time_point start = Clock::now();
};

void log_step(Run& r, Window& w, double lr) {
  // Every rank checks that the ranks still hold identical parameters (cheap next to a step).
  if (r.comm.uses_mpi()) {
    if (!r.comm.same_everywhere(checksum(r.net->store().params().to_host()), "parameter check at step " + std::to_string(r.step),
                                r.comm.options().timeout_s))
      PCV_FAIL("step ", r.step, ": the ranks' parameters differ (non-deterministic allreduce?)");
  }
  if (!r.root) {
    w = Window{};
    return;
  }
  const double dt = seconds_since(w.start), thr = double(w.examples) / std::max(dt, 1e-9);
  const double n = double(std::max<int64_t>(w.steps, 1));
  const int64_t epoch = r.epoch + 1;
  const std::string time = now_string();
  std::printf("| Training Device=%s Epoch=%ld Step=%ld Learning_Rate=%g Loss=%.5f Throughput=%g Time=%s\n",
              r.tc.device.c_str(), long(epoch), long(r.step), lr, w.loss / n, thr, time.c_str());
  std::fflush(stdout);
  std::vector<std::pair<std::string, double>> scalars = {
      {"loss", w.loss / n},          {"loss/video", w.image / n}, {"loss/audio", w.audio / n},
      {"loss/label", w.label / n},   {"learning_rate", lr},       {"throughput", thr},
      {"grad_norm", w.grad_norm / n}};
  if (r.comm.uses_mpi()) {
    scalars.emplace_back("allreduce_seconds", w.allreduce / n);
    scalars.emplace_back("allreduce_waiting_seconds", w.allreduce_wait / n);
    scalars.emplace_back("step_seconds", dt / n);
  }
  for (const auto& [tag, v] : scalars) r.tb->scalar("train/" + tag, v, r.step);
  r.jsonl->append({r.step, {{"epoch", epoch}}, scalars, {{"time", time}}});
  w = Window{};
}

// The loss terms of the micro-batches, read back and weighted: Σ_micro weight · terms.
LossValues weighted_loss(const double* terms, const std::vector<double>& weights, const LossConfig& lc) {
  LossValues sum;
  for (size_t micro = 0; micro < weights.size(); ++micro) {
    if (weights[micro] == 0) continue;  // this rank had no clips in that micro-batch
    const LossValues t = loss_terms(terms + micro * kLossTermCount, lc);
    const double w = weights[micro];
    sum.total += t.total * w, sum.image += t.image * w, sum.audio += t.audio * w, sum.label += t.label * w;
  }
  return sum;
}

// One optimizer step of grad_accum_usteps micro-batches. False when the data is exhausted (on
// every rank at once: all ranks run the same number of batches per epoch). Everything runs on
// the device; the host uploads the batches and reads the step's results back once (and, with
// MPI, the loss terms once more before they travel with the gradients).
bool train_one_step(Run& r, const LossConfig& lc, NonFiniteGuard& guard, Window& w, const std::atomic<bool>& stop) {
  const TrainConfig& tc = r.tc;
  const int64_t W = r.comm.world_size(), rank = r.comm.rank(), K = tc.grad_accum_usteps;
  Arena<float>& grads = r.net->store().grads();
  const Kernels<float> kern = r.backend->kernels<float>();
  r.net->store().zero_grad();
  std::vector<double> weights(size_t(K), 0.0);  // each micro-batch's weight in the mean (0: no clips here)
  int64_t examples = 0;
  // With full global batches the last micro-batch's backward starts the allreduce of each bucket
  // as soon as its gradients are final (the condition is the same on every rank, as the
  // collectives' order must be).
  std::unique_ptr<dist::Communicator::Session> session;
  for (int64_t micro = 0; micro < K; ++micro) {
    std::optional<Batch> batch = r.loader->next();
    if (!batch) return false;
    report_skipped(r, *batch);
    PCV_ASSERT(batch->audio_samples == r.model.audio_samples(), "loader audio ", batch->audio_samples, " samples");
    const int64_t B = batch->size;
    r.epoch = batch->position.epoch;
    // This rank's clips are [lo, lo + B) of the global batch of m clips (Sampler::batch), the
    // clips a single rank with batch_size × W would see at the same place: masks keyed by it.
    const int64_t global = tc.batch_size * W, g0 = batch->position.batch * global;
    const int64_t m = std::min(global, r.loader->size() - g0), lo = rank * m / W;
    const int64_t first_example = micro * global + lo;
    examples += B;
    if (B == 0) continue;  // an uneven last batch left this rank nothing
    // Weight of this rank's mean in the mean over the global batch (1 unless the batch is uneven
    // or lost unusable clips; those count as zeros, so the gradient does not depend on the ranks).
    const double weight = double(W * B) / double(m);
    weights[size_t(micro)] = weight;
    if (weight != 1.0) kern.scale(int64_t(grads.size()), float(1.0 / weight), grads.data());
    const OutputPoints pts = draw_output_points(r.model, r.seed, r.step);
    const auto mask = draw_masks(r.model, B, r.seed, r.step, first_example);
    // Train mode: attention dropout (if configured) keyed like the masks, by step and example.
    GradsReady ready;
    if (r.comm.uses_mpi() && micro + 1 == K && m == global) {
      session = std::make_unique<dist::Communicator::Session>(r.comm, *r.backend, grads.data(), int64_t(grads.size()));
      ready = [&session](int64_t offset) { session->ready_from(offset); };
    }
    enqueue_step(*r.net, batch->video.data(), batch->audio.data(), batch->label.data(), B, pts, mask, lc, true,
                 r.step_stats.data() + micro * kLossTermCount, TrainingMode{true, r.seed, r.step, first_example},
                 ready);
    if (weight != 1.0) kern.scale(int64_t(grads.size()), float(weight), grads.data());
  }
  // k micro-batch means averaged over W ranks: the same gradient as one batch k·W times larger.
  const double k = double(K);
  const size_t n_loss = size_t(K * kLossTermCount);
  std::vector<double> stats(r.step_stats.size());
  LossValues sum;
  if (r.comm.uses_mpi()) {
    // Loss terms, examples and the stop flag travel with the gradients.
    r.step_stats.download(stats.data(), n_loss);
    sum = weighted_loss(stats.data(), weights, lc);
    double scalars[6] = {sum.total, sum.image, sum.audio, sum.label, double(examples), stop.load() ? 1.0 : 0.0};
    const std::string what = "gradient allreduce of step " + std::to_string(r.step + 1);
    const float scale = float(1.0 / (k * double(W)));
    const dist::AllreduceTiming t =
        session ? session->finish(scale, scalars, 6, what, r.comm.options().timeout_s)
                : r.comm.allreduce_gradients(*r.backend, grads.data(), int64_t(grads.size()), scale, scalars, 6, what,
                                             r.comm.options().timeout_s);
    sum = LossValues{};
    sum.total = scalars[0] / double(W), sum.image = scalars[1] / double(W), sum.audio = scalars[2] / double(W),
    sum.label = scalars[3] / double(W);
    examples = int64_t(std::llround(scalars[4]));
    r.stop_agreed = scalars[5] > 0;
    w.allreduce += t.total_s, w.allreduce_wait += t.waiting_s;
    r.allreduce_s += t.total_s, r.allreduce_wait_s += t.waiting_s, ++r.allreduce_steps;
  } else {
    if (K > 1) kern.scale(int64_t(grads.size()), float(1.0 / k), grads.data());
    r.stop_agreed = stop.load();
  }
  const double lr = r.schedule->lr_at(r.step);
  r.optimizer->enqueue_step(r.net->store(), lr, r.step_stats.data() + n_loss);
  if (r.comm.uses_mpi()) {
    r.step_stats.download(stats.data() + n_loss, size_t(kOptimStatCount), n_loss);
  } else {
    r.step_stats.download(stats.data(), stats.size());
    sum = weighted_loss(stats.data(), weights, lc);
  }
  const StepResult res = r.optimizer->finish_step(stats.data() + n_loss);
  if (!guard.check(sum.total / k, res.grad_norm, r.step) && r.root) {
    std::fprintf(stderr, "warning: step %ld skipped: non-finite loss or gradient (%ld skipped so far)\n", long(r.step),
                 long(guard.total_skipped()));
    r.tb->scalar("train/skipped_steps", double(guard.total_skipped()), r.step);
  }
  ++r.step;
  w.loss += sum.total / k, w.image += sum.image / k, w.audio += sum.audio / k, w.label += sum.label / k;
  w.grad_norm += res.grad_norm;
  ++w.steps;
  w.examples += examples;
  return true;
}

void log_eval(Run& r, const EvalReport& e) {
  std::printf("| Evaluation Step=%ld Clips=%ld Top1=%.4f Top5=%.4f Loss=%.5f Video_PSNR=%.2f Audio_PSNR=%.2f Report=%s\n",
              long(r.step), long(e.clips), e.top1, e.top5, e.loss, e.video_psnr, e.audio_psnr,
              (r.logdir / "eval.json").c_str());
  std::fflush(stdout);
  for (const auto& [tag, v] : {std::pair{"eval/top1", e.top1}, {"eval/top5", e.top5}, {"eval/loss", e.loss},
                               {"eval/video_psnr", e.video_psnr}, {"eval/audio_psnr", e.audio_psnr}})
    r.tb->scalar(tag, v, r.step);
  r.tb->flush();
}

// Rank 0 evaluates; the others wait (long deadline) and learn whether the target was reached.
bool evaluate_and_share(Run& r) {
  double reached = 0;
  if (r.root) {
    const EvalReport e = evaluate(*r.net, r.tc, r.val, r.step, r.logdir);
    log_eval(r, e);
    reached = r.tc.target_accuracy > 0 && e.top1 >= r.tc.target_accuracy ? 1 : 0;
  }
  r.comm.sum(&reached, 1, "evaluation by rank 0 at step " + std::to_string(r.step), r.comm.options().long_timeout_s);
  return reached > 0;
}

// The end of the run on every rank: rank 0 may still be saving or evaluating; the exit code is
// rank 0's.
int finish(Run& r, int code) {
  double c = r.root ? double(code) : 0;
  r.comm.sum(&c, 1, "end of training (rank 0 saving)", r.comm.options().long_timeout_s);
  return int(c);
}

}  // namespace

int run_training(const TrainConfig& tc, const std::atomic<bool>& stop) {
  auto single = dist::Communicator::single();
  return run_training(tc, stop, *single);
}

void check_media_requests(const TrainConfig& tc) {
  if (media_hooks()) return;
  if (tc.data_source == "videos")
    require_media("config key 'data_source' is 'videos' (clips decoded as they are read)",
                  "or train from prepared shards (data_source: shards)");
  if (tc.do_eval && evaluation_media_clips(tc) > 0)
    require_media("config key 'eval_media_clips' is " + std::to_string(tc.eval_media_clips) +
                      " (MP4/WAV/PNG of evaluation clips)",
                  "or set eval_media_clips: 0 (metrics only)");
  // A Kinetics layout needs preparing (decoding) unless its prepared-<T>x<D> folder is complete.
  if (!fs::exists(fs::path(tc.dataset_dir) / "annotations")) return;
  const ModelConfig m = resolve_model_config(tc.model, tc.config_file_read ? tc.config_file_path : "");
  check_preparable("config key 'dataset_dir'", tc.dataset_dir, "train", m.num_frames, m.frame_height);
  if (tc.do_eval) check_preparable("config key 'dataset_dir'", tc.dataset_dir, "validate", m.num_frames, m.frame_height);
}

int run_training(const TrainConfig& tc, const std::atomic<bool>& stop, dist::Communicator& comm) {
  check_media_requests(tc);  // before any work: one line where this build or program has no media
  Run r(tc, comm);
  if (r.root) std::printf("%s", tc.banner().c_str());
  setup(r);
  const LossConfig lc = parse_loss_config(tc.recon_loss, tc.loss_weights);
  NonFiniteGuard guard(tc.max_nonfinite_steps);
  Window w;
  double train_seconds = 0;
  int64_t train_examples = 0;
  const int64_t max_steps = tc.max_steps ? tc.max_steps : INT64_MAX;
  int64_t last_epoch = r.loader->position().epoch;
  const int64_t first_step = r.step;  // > 0: resumed from the checkpoint of this step
  bool reached_target = false;
  int64_t evaluated_at = -1;
  while (r.step < max_steps && !reached_target) {
    const auto t0 = Clock::now();
    const int64_t before = w.examples;
    if (!train_one_step(r, lc, guard, w, stop)) break;
    train_seconds += seconds_since(t0);
    train_examples += w.examples - before;
    if (r.step % tc.log_steps == 0) log_step(r, w, r.schedule->lr_at(r.step - 1));
    if (r.stop_agreed) {  // every rank saw the same flag in the step's allreduce
      save(r, "stop requested by signal");
      if (r.root) std::printf("stopped at step %ld on request; resume with --resume auto\n", long(r.step));
      return finish(r, kTrainOk);
    }
    if (tc.save_steps && r.step % tc.save_steps == 0) save(r, "every save_steps");
    // Epoch last_epoch (0-based) just ended: evaluate after every eval_epochs-th.
    const bool epoch_end = r.loader->position().epoch != last_epoch;
    const bool eval_epoch = epoch_end && (last_epoch + 1) % tc.eval_epochs == 0;
    last_epoch = r.loader->position().epoch;
    if (tc.do_eval && ((tc.eval_steps && r.step % tc.eval_steps == 0) || eval_epoch)) {
      reached_target = evaluate_and_share(r);
      evaluated_at = r.step;
    }
  }
  if (w.steps) log_step(r, w, r.schedule->lr_at(r.step - 1));
  // Resumed where the run had ended already: the checkpoint it resumed from is this state.
  const bool trained = r.step != first_step || first_step == 0;
  if (trained) save(r, "end of training");
  if (reached_target && r.root)
    std::printf("target accuracy %.4f reached at step %ld\n", tc.target_accuracy, long(r.step));
  if (tc.do_eval && evaluated_at != r.step) evaluate_and_share(r);
  if (r.loader->unusable_clips())  // each rank the clips it met (under MPI a clip may meet several)
    std::printf("%sskipped %ld unusable clip(s) (listed in %s)\n", rank_prefix(r).c_str(),
                long(r.loader->unusable_clips()), r.skip_report.c_str());
  const double avg = train_seconds > 0 ? double(train_examples) / train_seconds : 0;
  int code = kTrainOk;
  if (r.root) {
    if (trained)
      std::printf("training done: %ld steps, average throughput %.4f examples/s, logs in %s (TensorBoard: tensorboard "
                  "--logdir %s)\n", long(r.step), avg, r.logdir.c_str(), r.logdir.c_str());
    else
      std::printf("training done: the run had ended at step %ld already, nothing left to train (a longer run: raise "
                  "num_epochs or max_steps; a new one: another --logdir), logs in %s\n", long(r.step),
                  r.logdir.c_str());
    if (r.allreduce_steps)
      std::printf("allreduce: %.2f ms per step on average (%.2f ms of it waiting; %d rank(s))\n",
                  1e3 * r.allreduce_s / double(r.allreduce_steps), 1e3 * r.allreduce_wait_s / double(r.allreduce_steps),
                  comm.world_size());
    if (tc.expected_average_throughput > 0 && train_examples > 0 && avg < tc.expected_average_throughput) {
      std::fprintf(stderr, "error: average throughput %.4f examples/s is below --expected_average_throughput %.4f\n", avg,
                   tc.expected_average_throughput);
      code = kTrainSlow;
    }
  }
  return finish(r, code);
}

}  // namespace perceiver
