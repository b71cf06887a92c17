// Data pipeline benchmark: random 16-frame clip sampling (clips/s) straight from videos and
// from HDF5 shards, on the same clips and thread counts, through the Loader (batch size 1).
//   bench_data [--classes K] [--clips N] [--samples S] [--threads 1,2] [--dir DIR]
// Makes a synthetic Kinetics set (340x256 H.264+AAC, 25 fps, 2.56 s, keyframe every second)
// and prepares it with perceiver-prep's pipeline (16 frames, 224x224) on first use.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "data/loader.h"
#include "data/shards.h"
#include "media/prep.h"
#include "media/synthetic.h"
#include "perceiver/media.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct Args {
  int classes = 4, clips = 6, samples = 48, deflate = 1;
  std::vector<int> threads = {1, 2};
  fs::path dir = fs::temp_directory_path() / "perceiver_bench_data";
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--classes") a.classes = std::stoi(v);
    else if (k == "--clips") a.clips = std::stoi(v);
    else if (k == "--samples") a.samples = std::stoi(v);
    else if (k == "--deflate") a.deflate = std::stoi(v);
    else if (k == "--dir") a.dir = v;
    else if (k == "--threads") {
      a.threads.clear();
      std::stringstream ss(v);
      for (std::string t; std::getline(ss, t, ',');) a.threads.push_back(std::stoi(t));
    }
  }
  return a;
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Clips per second over `samples` random clips (shuffled order, random crop/flip/window).
double sample_rate(perceiver::LoaderOptions o, int threads, int samples) {
  o.num_workers = threads, o.prefetch_batches = 2 * threads, o.augment = true;
  o.sampler.batch_size = 1, o.sampler.seed = 1;
  perceiver::Loader l(o);
  l.next();  // warm-up: first open of every shard, page cache
  const auto t0 = Clock::now();
  for (int i = 0; i < samples; ++i) l.next();
  return samples / seconds_since(t0);
}

// The shard read alone (uint8 frames + audio, no float conversion), one thread.
double raw_shard_rate(const fs::path& shard, int samples) {
  const perceiver::ShardReader r = perceiver::ShardReader::open(shard);
  const auto& m = r.index().meta;
  std::vector<uint8_t> v(size_t(m.num_frames * m.frame_bytes()));
  std::vector<float> audio(size_t(m.audio_samples()));
  const auto t0 = Clock::now();
  for (int i = 0; i < samples; ++i) r.read_clip((i * 7) % r.index().size(), 0, m.num_frames, v.data(), audio.data());
  return samples / seconds_since(t0);
}

uint64_t folder_bytes(const fs::path& d) {
  uint64_t n = 0;
  for (const auto& e : fs::recursive_directory_iterator(d))
    if (e.is_regular_file()) n += e.file_size();
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  perceiver::register_media();  // the loader's video source
  perceiver::set_ffmpeg_log_level(16);
  const fs::path data = a.dir / ("synthetic_k" + std::to_string(a.classes) + "_n" + std::to_string(a.clips));
  if (!fs::exists(data)) perceiver::make_synthetic_kinetics(data, a.classes, a.clips, 1);
  const fs::path out = a.dir / ("shards_z" + std::to_string(a.deflate));
  perceiver::PrepOptions po;
  po.dataset_dir = data, po.output_dir = out, po.num_frames = 16, po.image_dim = 224, po.deflate_level = a.deflate;
  po.clips_per_shard = 8;
  const auto t0 = Clock::now();
  const perceiver::PrepSummary s = perceiver::prepare_kinetics(po);
  std::printf("prep: %lld clips -> %lld shards (%lld reused) in %.2f s; videos %.1f MB, shards %.1f MB (deflate %d)\n",
              static_cast<long long>(s.written), static_cast<long long>(s.shards),
              static_cast<long long>(s.shards_reused), seconds_since(t0), folder_bytes(data / "train") / 1e6,
              folder_bytes(out / "train") / 1e6, a.deflate);

  perceiver::LoaderOptions videos;
  videos.source = perceiver::LoaderSource::kVideos;
  videos.dataset_dir = data;
  videos.decode_dim = 224;  // same work as prep: short side to 224, 224x224 window
  perceiver::LoaderOptions shards;
  shards.shard_dir = out / "train";
  std::printf("random 16-frame 224x224 clips (+ 30720 audio samples), batch 1, float output:\n");
  std::printf("%8s %16s %16s %8s\n", "threads", "videos clips/s", "shards clips/s", "ratio");
  for (int t : a.threads) {
    const double v = sample_rate(videos, t, a.samples), h = sample_rate(shards, t, a.samples * 4);
    std::printf("%8d %16.1f %16.1f %7.1fx\n", t, v, h, h / v);
  }
  std::printf("shard read only (uint8, 1 thread): %.1f clips/s\n",
              raw_shard_rate(out / "train" / perceiver::shard_file_name(0), a.samples * 4));
  return 0;
}
