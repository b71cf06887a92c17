// make_test_shards OUT [--classes K] [--train N] [--val M] [--num_frames T] [--image_dim D]
// [--seed S]: a small prepared set (OUT/train and OUT/validate shards, perceiver-prep's layout)
// written directly with the core's shard writer, for the end-to-end tests of builds without the
// media component (where perceiver-prep synth and preparation are not there). Clip i of class c:
// frames of a moving gradient in the class's colour plus per-clip noise, and a tone of the class
// (220·(c+1) Hz) with per-clip phase and loudness; labels name the classes like the synthetic
// set's. Deterministic: the same arguments give the same bytes.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <numbers>
#include <string>
#include <vector>

#include "core/rng.h"
#include "data/shards.h"
#include "perceiver/error.h"

namespace {

using namespace perceiver;

struct Args {
  std::filesystem::path out;
  int classes = 3, train = 4, val = 1, num_frames = 2, image_dim = 16, clips_per_shard = 32;
  uint64_t seed = 0;
};

void write_split(const Args& a, KineticsSplit split, int per_class, uint64_t stream) {
  ShardMeta meta;
  meta.split = split_name(split), meta.num_frames = a.num_frames, meta.image_dim = a.image_dim;
  for (int c = 0; c < a.classes; ++c) {
    char name[32];
    std::snprintf(name, sizeof name, "class %02d", c);
    meta.class_names.push_back(name);
  }
  meta.plan = "make_test_shards";
  const int64_t t = a.num_frames, d = a.image_dim, s = meta.audio_samples();
  const std::filesystem::path dir = shard_dir(a.out, split);
  std::filesystem::create_directories(dir);
  const int total = a.classes * per_class;
  std::vector<EncodedClip> clips;
  int shard = 0;
  for (int i = 0; i < total; ++i) {
    const int c = i % a.classes;
    RngStream rng(a.seed, RngPurpose::kAugment, stream << 32 | uint64_t(i));
    const uint8_t colour[3] = {uint8_t(c % 3 == 0 ? 230 : 40), uint8_t(c % 3 == 1 ? 230 : 40),
                               uint8_t(c % 3 == 2 ? 230 : 40 + 60 * (c / 3))};
    std::vector<uint8_t> video(size_t(t * d * d * 3));
    for (int64_t f = 0; f < t; ++f)
      for (int64_t y = 0; y < d; ++y)
        for (int64_t x = 0; x < d; ++x) {
          const double ramp = double((x + y + 2 * f * (c + 1)) % d) / double(d);
          for (int k = 0; k < 3; ++k) {
            const double v = colour[k] * (0.5 + 0.5 * ramp) + 20 * (rng.uniform() - 0.5);
            video[size_t(((f * d + y) * d + x) * 3 + k)] = uint8_t(std::clamp(v, 0.0, 255.0));
          }
        }
    const double phase = 2 * std::numbers::pi * rng.uniform(), loud = 0.3 + 0.4 * rng.uniform();
    std::vector<float> audio(static_cast<size_t>(s));
    for (int64_t k = 0; k < s; ++k)
      audio[size_t(k)] = float(loud * std::sin(2 * std::numbers::pi * 220.0 * (c + 1) * double(k) / 48000.0 + phase));
    EncodedClip e = encode_clip(meta, video.data(), audio.data());
    e.label = c, e.youtube_id = "test" + std::to_string(stream) + "_" + std::to_string(i);
    e.time_start = 0, e.time_end = 10;
    clips.push_back(std::move(e));
    if (int(clips.size()) == a.clips_per_shard || i + 1 == total) {
      write_shard(dir / shard_file_name(shard++), meta, clips, {});
      clips.clear();
    }
  }
  write_skip_report(a.out / ("skipped_" + std::string(split_name(split)) + ".tsv"), {}, {});
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string k = argv[i];
      auto value = [&]() -> long {
        PCV_CHECK(i + 1 < argc, k, " needs a value");
        return std::stol(argv[++i]);
      };
      if (k == "--classes") a.classes = int(value());
      else if (k == "--train") a.train = int(value());
      else if (k == "--val") a.val = int(value());
      else if (k == "--num_frames") a.num_frames = int(value());
      else if (k == "--image_dim") a.image_dim = int(value());
      else if (k == "--clips_per_shard") a.clips_per_shard = int(value());
      else if (k == "--seed") a.seed = uint64_t(value());
      else if (a.out.empty() && !k.starts_with("--")) a.out = k;
      else PCV_FAIL("unknown argument '", k, "'");
    }
    PCV_CHECK(!a.out.empty() && a.classes >= 1 && a.train >= 1 && a.val >= 1 && a.clips_per_shard >= 1,
              "usage: make_test_shards OUT [--classes K] [--train N] [--val M] [--num_frames T] [--image_dim D] "
              "[--clips_per_shard K] [--seed S]");
    write_split(a, KineticsSplit::kTrain, a.train, 1);
    write_split(a, KineticsSplit::kValidate, a.val, 2);
    std::printf("make_test_shards: %d classes, %d train and %d validation clips of %dx%dx%d in %s\n", a.classes,
                a.classes * a.train, a.classes * a.val, a.num_frames, a.image_dim, a.image_dim, a.out.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_test_shards: error: %s\n", e.what());
    return 1;
  }
}
