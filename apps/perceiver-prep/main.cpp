// perceiver-prep: Kinetics-layout videos → HDF5 shards, and the synthetic Kinetics set.
//   perceiver-prep --dataset_dir DIR --output_dir OUT [--split train|validate|test] [--num_frames 16]
//                  [--image_dim 224] [--num_workers N] [--clips_per_shard K]
//   perceiver-prep synth --out DIR --classes K --clips-per-class N [--seed S]
// The pipeline lives in the media component (media/prep.h); this file parses flags and prints.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "media/prep.h"
#include "media/synthetic.h"
#include "perceiver/threads.h"

namespace {

struct SynthFlags {
  std::string out;
  int classes = 0, clips_per_class = 0;
  uint64_t seed = 0;
};

int run_synth(const SynthFlags& f) {
  perceiver::set_ffmpeg_log_level(16);  // AV_LOG_ERROR: libx264 prints statistics per clip otherwise
  const auto s = perceiver::make_synthetic_kinetics(f.out, f.classes, f.clips_per_class, f.seed);
  std::printf("Wrote a synthetic Kinetics set to %s: %zu classes, %d train and %d val clips\n", f.out.c_str(),
              s.classes.size(), s.train_clips, s.val_clips);
  return 0;
}

int run_prep(perceiver::PrepOptions o, const std::string& split, bool quiet_ffmpeg) {
  o.split = perceiver::parse_split(split);
  if (quiet_ffmpeg) perceiver::set_ffmpeg_log_level(-8);  // skipped clips are reported with reasons
  o.on_progress = perceiver::console_progress(stderr, perceiver::split_name(o.split));
  const perceiver::PrepSummary s = perceiver::prepare_kinetics(o);
  std::printf(
      "Successfully built the dataset: %lld clips in %lld shards (%lld reused) under %s; %lld annotation rows, "
      "%lld skipped, %lld missing or duplicate (see %s); %lld classes; %.1f s\n",
      static_cast<long long>(s.written), static_cast<long long>(s.shards), static_cast<long long>(s.shards_reused),
      s.shard_dir.c_str(), static_cast<long long>(s.rows), static_cast<long long>(s.skipped),
      static_cast<long long>(s.missing), s.report.c_str(), static_cast<long long>(s.num_classes), s.seconds);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  perceiver::threads::use_fastest_cpu_kernels(argv);
  CLI::App app{"perceiver-prep: decode a Kinetics-layout data set into HDF5 shards (layout in "
               "libperceiver/src/data/README.md), or make the synthetic Kinetics set."};
  perceiver::PrepOptions o;
  std::string dataset_dir, output_dir, split = "train";
  bool ffmpeg_logs = false;
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // job specs append flags
  app.add_option("--dataset_dir", dataset_dir, "DIR with annotations/{train,validate,test}.csv and train|val|test/")
      ->type_name("PATH")->check(CLI::ExistingDirectory);
  app.add_option("--output_dir", output_dir, "where the shards (OUT/<split>/shard-NNNNN.h5) and the skip report go")
      ->type_name("PATH");
  app.add_option("--split", split, "split to prepare")->check(CLI::IsMember({"train", "validate", "val", "test"}))
      ->capture_default_str();
  app.add_option("--num_frames", o.num_frames, "frames per clip (T)")->capture_default_str();
  app.add_option("--image_dim", o.image_dim, "square frame size after short-side resize + centre crop")
      ->capture_default_str();
  app.add_option("--num_workers", o.num_workers, "decode threads (0: one per hardware thread)")->capture_default_str();
  app.add_option("--clips_per_shard", o.clips_per_shard, "clips per shard file")->capture_default_str();
  app.add_option("--deflate", o.deflate_level, "zlib level of the frames (0: uncompressed)")->capture_default_str();
  app.add_option("--timeout", o.reader.timeout_s, "seconds allowed per clip before it is skipped")
      ->capture_default_str();
  app.add_flag("--ffmpeg_logs", ffmpeg_logs, "let FFmpeg print its warnings about broken files");

  SynthFlags sf;
  CLI::App* synth = app.add_subcommand("synth", "write the synthetic Kinetics-layout set (H.264+AAC clips, CSVs)");
  synth->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  synth->add_option("--out", sf.out, "output directory")->type_name("PATH")->required();
  synth->add_option("--classes", sf.classes, "number of classes")->required()->check(CLI::Range(1, 1000));
  synth->add_option("--clips-per-class", sf.clips_per_class, "train clips per class")->required()
      ->check(CLI::Range(1, 100000));
  synth->add_option("--seed", sf.seed, "seed (same seed, same bytes)")->capture_default_str();
  app.require_subcommand(0, 1);
  CLI11_PARSE(app, argc, argv);
  try {
    if (synth->parsed()) return run_synth(sf);
    if (dataset_dir.empty() || output_dir.empty()) {
      std::fprintf(stderr, "perceiver-prep: error: --dataset_dir and --output_dir are required (or use `synth`)\n");
      return 2;
    }
    o.dataset_dir = dataset_dir, o.output_dir = output_dir;
    return run_prep(o, split, !ffmpeg_logs);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "perceiver-prep: error: %s\n", e.what());
    return 1;
  }
}
