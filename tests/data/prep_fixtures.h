// A small synthetic Kinetics set for the prep and loader tests (few classes, tiny clips), made
// once per build tree, and helpers to compare files byte for byte.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>

#include "media/prep.h"
#include "media/synthetic.h"
#include "media_fixtures.h"

namespace fixtures {

// FFmpeg's info lines (x264 statistics per clip) would bury the test output; errors still show.
inline const bool kQuietFFmpegForPrep = (perceiver::set_ffmpeg_log_level(16 /* AV_LOG_ERROR */), true);

inline perceiver::SyntheticOptions small_synthetic_options() {
  perceiver::SyntheticOptions o;
  o.width = 64, o.height = 48, o.num_frames = 25, o.gop = 10;
  return o;
}

/// 3 classes x 4 train clips (+1 val clip each), 64x48, 1 s, H.264 + AAC.
inline std::filesystem::path small_synthetic_set() {
  const auto dir = fixtures::dir() / "synthetic_small_k3";
  if (!std::filesystem::exists(dir)) {
    const auto tmp = fixtures::dir() / ("synthetic_small_tmp_" + std::to_string(::getpid()));
    perceiver::make_synthetic_kinetics(tmp, 3, 4, 11, small_synthetic_options());
    std::error_code ec;
    std::filesystem::rename(tmp, dir, ec);
    if (ec) std::filesystem::remove_all(tmp);  // another test process won the race
  }
  return dir;
}

/// The prep options the tests share: 8 frames of 32x32, 5 clips per shard (12 clips → 3 shards).
inline perceiver::PrepOptions small_prep_options(const std::filesystem::path& data, const std::filesystem::path& out) {
  perceiver::PrepOptions o;
  o.dataset_dir = data, o.output_dir = out;
  o.num_frames = 8, o.image_dim = 32, o.clips_per_shard = 5, o.num_workers = 2;
  return o;
}

/// small_synthetic_set() prepared into shards once per build tree; returns OUT.
inline std::filesystem::path prepared_small_set() {
  const auto dir = fixtures::dir() / "prepared_small_k3";
  if (!std::filesystem::exists(dir)) {
    const auto tmp = fixtures::dir() / ("prepared_small_tmp_" + std::to_string(::getpid()));
    perceiver::prepare_kinetics(small_prep_options(small_synthetic_set(), tmp));
    std::error_code ec;
    std::filesystem::rename(tmp, dir, ec);
    if (ec) std::filesystem::remove_all(tmp);
  }
  return dir;
}

/// Copy of a folder tree (tests that break files work on a copy).
inline std::filesystem::path copy_tree(const std::filesystem::path& from, const std::string& name) {
  const auto to = fixtures::dir() / (name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(to);
  std::filesystem::copy(from, to, std::filesystem::copy_options::recursive);
  return to;
}

/// Relative path -> bytes of every regular file under root.
inline std::map<std::string, std::string> tree_bytes(const std::filesystem::path& root) {
  std::map<std::string, std::string> out;
  for (const auto& e : std::filesystem::recursive_directory_iterator(root))
    if (e.is_regular_file()) out[std::filesystem::relative(e.path(), root).string()] = fixtures::read_bytes(e.path());
  return out;
}

}  // namespace fixtures
