// A small prepared set written directly with the core's shard writer (no media libraries), for
// the loader's tests in every build: 3 classes, 12 training clips in shards of 5, 5 and 2, each
// 8 frames of 32×32 RGB and 8·1920 samples of 48 kHz audio. A clip's frames are a gradient in
// its class colour that moves with the frame index; its audio is a tone of its class. Written
// once per build tree.
#pragma once

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <numbers>
#include <string>
#include <vector>

#include "data/shards.h"
#include "fixtures.h"

namespace fixtures {

inline std::filesystem::path small_shard_set() {
  const auto dir = fixtures::dir() / "shards_small_k3";
  if (std::filesystem::exists(dir)) return dir;
  const auto tmp = fixtures::dir() / ("shards_small_tmp_" + std::to_string(::getpid()));
  perceiver::ShardMeta meta;
  meta.split = "train", meta.num_frames = 8, meta.image_dim = 32;
  meta.class_names = {"class 0", "class 1", "class 2"};
  const int64_t t = meta.num_frames, d = meta.image_dim, s = meta.audio_samples();
  std::filesystem::create_directories(perceiver::shard_dir(tmp, perceiver::KineticsSplit::kTrain));
  constexpr int kClips = 12, kPerShard = 5;
  for (int first = 0; first < kClips; first += kPerShard) {
    std::vector<perceiver::EncodedClip> clips;
    for (int i = first; i < std::min(kClips, first + kPerShard); ++i) {
      const int label = i % 3;
      std::vector<uint8_t> video(size_t(t * d * d * 3));
      for (int64_t f = 0; f < t; ++f)
        for (int64_t y = 0; y < d; ++y)
          for (int64_t x = 0; x < d; ++x)
            for (int c = 0; c < 3; ++c)
              video[size_t(((f * d + y) * d + x) * 3 + c)] =
                  uint8_t(c == label ? 255 - (x + y + 4 * f + 7 * i) % 64 : (x * 3 + y * 5 + f + i) % 96);
      std::vector<float> audio(static_cast<size_t>(s));
      for (int64_t k = 0; k < s; ++k)
        audio[size_t(k)] = 0.5f * float(std::sin(2 * std::numbers::pi * (220.0 * (label + 1)) * double(k) / 48000.0 + i));
      perceiver::EncodedClip e = perceiver::encode_clip(meta, video.data(), audio.data());
      e.label = label, e.youtube_id = "clip" + std::to_string(i), e.time_start = 10 * i, e.time_end = 10 * i + 10;
      clips.push_back(std::move(e));
    }
    perceiver::write_shard(perceiver::shard_dir(tmp, perceiver::KineticsSplit::kTrain) /
                               perceiver::shard_file_name(first / kPerShard),
                           meta, clips, {});
  }
  std::error_code ec;
  std::filesystem::rename(tmp, dir, ec);
  if (ec) std::filesystem::remove_all(tmp);  // another test process won the race
  return dir;
}

}  // namespace fixtures
