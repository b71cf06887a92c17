// perceiver-eval: evaluate a checkpoint, classify one video, or dump one forward/backward pass
// for parity checks. The three modes:
//   perceiver-eval --checkpoint ckpt.h5 --dataset_dir DIR [--logdir OUT]          (validation split)
//   perceiver-eval --checkpoint ckpt.h5 --video clip.mp4 [--dataset_dir DIR]      (top-5 classes, named
//                                                                                  by DIR or the checkpoint)
//   perceiver-eval --hf-config config.json --weights model.safetensors --inputs in.h5 --dump out.h5
// --video and evaluation media need the media component (PERCEIVER_WITH_MEDIA builds register
// it); without it they stop with one line, and the other modes work from prepared shards.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>

#include "data/audio_length.h"
#include "data/loader.h"
#include "data/media_hooks.h"
#include "data/prepared_dataset.h"
#include "io/atomic_file.h"
#include "io/hdf5_file.h"
#include "io/weights.h"
#include "model/loss.h"
#include "model/parity_dump.h"
#include "model/presets.h"
#include "model/sampling.h"
#include "model/step.h"
#include "perceiver/threads.h"
#include "train/checkpoint.h"
#include "train/evaluation.h"

#if PERCEIVER_WITH_MEDIA
#include "media/prep.h"
#include "perceiver/media.h"
#endif

namespace {

namespace fs = std::filesystem;
using namespace perceiver;

struct Options {
  std::string config, weights, inputs, dump;          // parity
  std::string checkpoint, dataset_dir, logdir, video, model;
  std::string recon_loss = "l1";
  std::string loss_weights = "0.03,1,1e-4";
  uint64_t seed = 0;
  int threads = 0;
  std::string device = "cpu", precision = "fp32";
  int64_t test_batch_size = 0, recon_clips = -1, media_clips = -1;
};

// The network on the device named by --device, with weights from `path` (HF names). Its
// forward-only passes (Pass::kForwardOnly) keep nothing for a backward pass.
std::unique_ptr<PerceiverNet<float>> load_net(Backend& backend, const ModelConfig& cfg, const std::string& path) {
  auto net = std::make_unique<PerceiverNet<float>>(cfg, backend);
  // strict: throws naming any missing, extra or mis-shaped tensor
  with_host_params(net->store(), true, [&](ParamStore<float>& s) { load_weights(s, path); });
  return net;
}

int run_parity(const Options& o, Backend& backend) {
  const auto net = load_net(backend, load_model_config(o.config), o.weights);
  const LossValues t = forward_backward_dump(*net, o.inputs, o.dump, parse_loss_config(o.recon_loss, o.loss_weights), o.seed);
  std::printf("loss=%.8g image=%.8g audio=%.8g label=%.8g -> %s\n", t.total, t.image, t.audio, t.label, o.dump.c_str());
  return 0;
}

// The training config the checkpoint was written with (its config_yaml attribute).
TrainConfig checkpoint_train_config(const std::string& ckpt) {
  const H5File f = H5File::open(ckpt);
  PCV_CHECK(f.has_attr("/", "config_yaml"), ckpt, ": not a perceiver-train checkpoint (no config_yaml attribute)");
  const fs::path tmp = fs::temp_directory_path() / ("perceiver-eval-" + std::to_string(::getpid()) + ".yaml");
  std::ofstream(tmp) << f.attr_string("/", "config_yaml");
  std::string arg0 = "perceiver-eval", arg1 = "--config_file_path", arg2 = tmp.string();
  char* argv[] = {arg0.data(), arg1.data(), arg2.data()};
  bool help = false;
  std::string text;
  TrainConfig tc = parse_train_config(3, argv, &help, &text);
  fs::remove(tmp);
  return tc;
}

int64_t checkpoint_step(const std::string& ckpt) {
  const H5File f = H5File::open(ckpt);
  return f.has_attr("/", "step") ? f.attr_int("/", "step") : 0;
}

// The model named by --model, or the one the checkpoint stores (announced once the run's checks
// passed). Checkpoints written before they stored their model: the preset their config names.
struct NamedModel {
  ModelConfig config;
  std::string name;
  fs::path file;
  void announce() const { std::printf("model: %s (%s)\n", name.c_str(), file.c_str()); }
};

NamedModel model_config(const Options& o, const TrainConfig& tc) {
  const std::optional<ModelConfig> saved = stored_model_config(o.checkpoint);
  NamedModel m;
  if (o.model.empty() && saved) {
    m.config = *saved;
    m.name = tc.model + ", as stored in the checkpoint";
    m.file = o.checkpoint;
    return m;
  }
  m.name = o.model.empty() ? tc.model : o.model;
  m.config = resolve_model_config(m.name, "", &m.file);
  m.config.mask_prob_label = tc.label_mask_prob;  // as the trainer sets it (evaluation masks every label)
  if (saved)  // --model overrides the stored model: say where they differ
    for (const std::string& d : model_config_differences(*saved, m.config))
      std::fprintf(stderr, "warning: --model %s differs from the checkpoint's model: %s (checkpoint vs --model)\n",
                   o.model.c_str(), d.c_str());
  return m;
}

int run_checkpoint_eval(const Options& o, Backend& backend) {
  TrainConfig tc = checkpoint_train_config(o.checkpoint);
  tc.dataset_dir = o.dataset_dir;
  if (o.test_batch_size > 0) tc.test_batch_size = o.test_batch_size;
  if (o.recon_clips >= 0) tc.eval_recon_clips = o.recon_clips;
  // The checkpoint's eval_media_clips is what its training run wrote, not a request of this
  // evaluation: without media it writes none, unless --eval_media_clips asks (then refused).
  if (o.media_clips >= 0) tc.eval_media_clips = o.media_clips;
  else if (!media_hooks()) tc.eval_media_clips = 0;
  if (evaluation_media_clips(tc) > 0)
    require_media("--eval_media_clips " + std::to_string(tc.eval_media_clips) + " (MP4/WAV/PNG of evaluation clips)",
                  "or pass --eval_media_clips 0 (metrics only)");
  const fs::path logdir = o.logdir.empty() ? fs::path(o.checkpoint).parent_path().parent_path() : fs::path(o.logdir);
  const std::string in_the_way = output_folder_problem(logdir);
  PCV_CHECK(in_the_way.empty(), "--logdir ", in_the_way);
  set_media_log_level(MediaLogLevel::kErrors);
  const NamedModel m = model_config(o, tc);
  check_preparable("--dataset_dir", tc.dataset_dir, "validate", m.config.num_frames, m.config.frame_height);
  m.announce();
  auto net = load_net(backend, m.config, o.checkpoint);
  const ModelConfig& c = net->config();
  LoaderOptions val;
  val.shard_dir = prepared_shards(tc.dataset_dir, "validate", c.num_frames, c.frame_height,
                                  std::max<int64_t>(1, tc.num_workers));
  const int64_t step = checkpoint_step(o.checkpoint);
  const EvalReport r = evaluate(*net, tc, val, step, logdir);
  std::printf("checkpoint %s (step %ld) on %ld validation clips:\n", o.checkpoint.c_str(), long(step), long(r.clips));
  std::printf("  top-1 %.4f  top-5 %.4f  loss %.5f  video PSNR %.2f dB  audio PSNR %.2f dB (%ld full reconstructions)\n",
              r.top1, r.top5, r.loss, r.video_psnr, r.audio_psnr, long(r.recon_clips));
  const fs::path media_dir = logdir / "eval" / ("step-" + std::to_string(step));
  if (evaluation_media_clips(tc) > 0)
    std::printf("  report %s; media in %s\n", (logdir / "eval.json").c_str(), media_dir.c_str());
  else
    std::printf("  report %s (no media: eval_media_clips 0)\n", (logdir / "eval.json").c_str());
  return 0;
}

// Class names from the prepared training shards when a data set is given, else those the
// checkpoint stores (absent in checkpoints written before they were stored: then none).
[[maybe_unused]] std::vector<std::string> class_names(const std::string& dataset_dir, const std::string& checkpoint,
                                                      const ModelConfig& c) {
  if (dataset_dir.empty()) return read_checkpoint_state(checkpoint).class_names;
  LoaderOptions lo;
  lo.shard_dir = prepared_shards(dataset_dir, "train", c.num_frames, c.frame_height, 2);
  lo.num_frames = int(c.num_frames);
  lo.image_dim = int(c.frame_height);
  lo.num_workers = 1;
  Loader loader(lo);
  return loader.source().class_names();
}

int run_video(const Options& o, Backend& backend) {
#if !PERCEIVER_WITH_MEDIA
  require_media("--video (decoding '" + o.video + "')");
  (void)backend;
  return 1;
#else
  const TrainConfig tc = checkpoint_train_config(o.checkpoint);
  set_media_log_level(MediaLogLevel::kErrors);
  const NamedModel m = model_config(o, tc);
  if (!o.dataset_dir.empty())
    check_preparable("--dataset_dir", o.dataset_dir, "train", m.config.num_frames, m.config.frame_height);
  m.announce();
  auto net = load_net(backend, m.config, o.checkpoint);
  const ModelConfig& c = net->config();
  WindowSpec spec;
  spec.num_frames = int(c.num_frames);
  spec.image_dim = int(c.frame_height);
  const Clip clip = read_clip_window(o.video, fs::path(o.video).stem().string(), spec, ReaderOptions{});
  std::vector<float> video(clip.video.begin(), clip.video.end());
  for (auto& v : video) v /= 255.0f;
  // The clip's 48 kHz audio in the model's samples per frame, as the loader gives it in training.
  const std::vector<float> audio =
      int64_t(clip.audio.size()) == c.audio_samples()
          ? clip.audio
          : detail::resample_to_length(clip.audio.data(), int64_t(clip.audio.size()), c.audio_samples());
  const int64_t label = 0;  // masked: the model classifies
  std::vector<float> logits;
  run_step(*net, video.data(), audio.data(), &label, 1, OutputPoints{}, draw_masks(c, 1, 0, 0, 0, true),
           LossConfig{}, false, &logits);
  const auto names = class_names(o.dataset_dir, o.checkpoint, c);
  // A model with more labels than the training set has classes (700 labels on Kinetics-400):
  // the labels without a class were never a target, so only the named ones are ranked.
  const size_t ranked = names.empty() ? logits.size() : std::min(names.size(), logits.size());
  std::vector<int64_t> order(ranked);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return logits[a] > logits[b]; });
  const double top = *std::max_element(logits.begin(), logits.end());
  double z = 0;
  for (float l : logits) z += std::exp(double(l) - top);
  const size_t shown = std::min<size_t>(5, order.size());
  std::printf("%s: top-%zu classes\n", o.video.c_str(), shown);
  for (size_t i = 0; i < shown; ++i) {
    const int64_t k = order[i];
    const std::string name = names.empty() ? "class " + std::to_string(k) : names[k];
    std::printf("  %zu. %-32s p=%.4f\n", i + 1, name.c_str(), std::exp(double(logits[k]) - top) / z);
  }
  if (ranked < logits.size())
    std::printf("  (%zu of the model's %zu labels have no class in the training set and are not ranked; p is over "
                "all %zu)\n", logits.size() - ranked, logits.size(), logits.size());
  return 0;
#endif
}

}  // namespace

int main(int argc, char** argv) {
  threads::use_fastest_cpu_kernels(argv);
#if PERCEIVER_WITH_MEDIA
  register_media();
#endif
  CLI::App app{"perceiver-eval: evaluate a checkpoint on the validation split, classify a video, or dump one "
               "forward/backward pass for parity checks."};
  app.footer(
      "Modes:\n"
      "  perceiver-eval --checkpoint logs/checkpoints/ckpt-00001000.h5 --dataset_dir DIR [--logdir OUT]\n"
      "      top-1/top-5, loss, video and audio PSNR of full reconstructions; JSON report and MP4/WAV/PNG media\n"
      "  perceiver-eval --checkpoint CKPT --video clip.mp4 [--dataset_dir DIR]\n"
      "      the top-5 classes of one video, among those the training set had (class names from DIR's prepared\n"
      "      shards, else from the checkpoint)\n"
      "  perceiver-eval --hf-config config.json --weights model.safetensors --inputs in.h5 --dump out.h5\n"
      "      in.h5: video f32 [B,T,H,W,3], audio f32 [B,S], label i64 [B], subsample/image i64, subsample/audio i64,\n"
      "      optional masks/{audio,image,label}; out.h5: logits/{image,audio,label}, loss, loss_terms/*, grads/<HF name>.");
  Options o;
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // job specs append flags
  app.add_option("--checkpoint", o.checkpoint, "perceiver-train checkpoint (.h5)")->type_name("PATH")
      ->check(CLI::ExistingFile);
  app.add_option("--dataset_dir", o.dataset_dir, "prepared shards or a Kinetics-layout folder")->type_name("PATH");
  app.add_option("--logdir", o.logdir, "where the report and media go")->type_name("PATH")
      ->default_str("the checkpoint's run directory");
  app.add_option("--video", o.video, "a video to classify")->type_name("PATH")->check(CLI::ExistingFile);
  app.add_option("--model", o.model, "model preset or config")->type_name("NAME|PATH")
      ->default_str("the one stored in the checkpoint");
  app.add_option("--test_batch_size", o.test_batch_size, "evaluation batch size")->default_str("the run's");
  app.add_option("--eval_recon_clips", o.recon_clips, "clips fully reconstructed for PSNR (spread over the set)")
      ->default_str("the run's");
  app.add_option("--eval_media_clips", o.media_clips, "clips written as MP4/WAV/PNG")->default_str("the run's");
  app.add_option("--hf-config,--config", o.config, "parity mode: HF config.json or our YAML preset")
      ->type_name("PATH")->check(CLI::ExistingFile);
  app.add_option("--weights", o.weights, "parity mode: model.safetensors (F32/F16/BF16) or our HDF5 checkpoint")
      ->type_name("PATH")->check(CLI::ExistingFile);
  app.add_option("--inputs", o.inputs, "parity mode: HDF5 inputs")->type_name("PATH")->check(CLI::ExistingFile);
  app.add_option("--dump", o.dump, "parity mode: HDF5 file to write")->type_name("PATH");
  app.add_option("--recon_loss", o.recon_loss, "parity mode: reconstruction loss")->check(CLI::IsMember({"l1", "mse"}))->capture_default_str();
  app.add_option("--loss_weights", o.loss_weights, "parity mode: weights of the video, audio and label terms")->capture_default_str();
  app.add_option("--seed", o.seed, "parity mode: seed of the mask stream when 0 < mask probability < 1")->capture_default_str();
  app.add_option("--threads", o.threads, "compute threads (0: one per core)")->check(CLI::Range(0, 4096))->capture_default_str();
  app.add_option("--device", o.device, "compute device (cpu, guarded, cuda, ...)")->capture_default_str();
  app.add_option("--precision", o.precision, "fp32, or bf16 products with float32 accumulation (cuda; cpu with AVX512-BF16 or AMX)")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    threads::set_num_threads(o.threads);
    require_op_by_op_device(o.device, "perceiver-eval");
    BackendOptions backend_options;
    backend_options.precision = parse_precision(o.precision);
    const std::unique_ptr<Backend> backend = make_backend(o.device, backend_options);
    if (!o.inputs.empty() || !o.dump.empty()) {
      PCV_CHECK(!o.config.empty() && !o.weights.empty() && !o.inputs.empty() && !o.dump.empty(),
                "parity mode needs --hf-config, --weights, --inputs and --dump");
      return run_parity(o, *backend);
    }
    PCV_CHECK(!o.checkpoint.empty(), "nothing to do: give --checkpoint (with --dataset_dir or --video) or the parity "
              "options; see --help");
    if (!o.video.empty()) return run_video(o, *backend);
    PCV_CHECK(!o.dataset_dir.empty(), "--checkpoint needs --dataset_dir (evaluation) or --video (classification)");
    return run_checkpoint_eval(o, *backend);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "perceiver-eval: error: %s\n", e.what());
    return 1;
  }
}
