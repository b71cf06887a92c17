// The synthetic Kinetics set: a Kinetics-layout data set (DESIGN.md "Data set layout") whose
// classes differ in picture (a moving shape of a class-specific colour, shape, direction and
// speed) and in sound (a class-specific two-tone chord), with per-clip random background,
// position, phase, loudness and noise. Deterministic: the same seed gives byte-identical files.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace perceiver {

struct SyntheticOptions {
  int width = 340, height = 256;  // Kinetics' usual 340x256
  int fps = 25;
  int num_frames = 64;            // 2.56 s: exactly 120 AAC frames of audio at 48 kHz
  int sample_rate = 48000;
  int audio_channels = 1;         // 1 or 2
  int val_clips_per_class = -1;   // -1: max(1, clips_per_class / 5)
  int crf = 23;                   // libx264 quality
  std::string preset = "veryfast";
  int gop = 25;                   // a keyframe every second keeps random windows cheap to seek
  double edge_softness = 0.02;    // shape edges ramp over this fraction of the short side
};

/// What one class looks and sounds like (exposed for tests and documentation).
struct SyntheticClass {
  std::string label;              // e.g. "class 03 red circle" (sorted order = class index)
  uint8_t rgb[3];                 // shape colour
  int shape;                      // 0 circle, 1 square, 2 diamond, 3 triangle
  double direction_rad, speed_px_s;
  double tone_hz[2];              // chord: root and fifth
};

struct SyntheticSummary {
  std::vector<SyntheticClass> classes;
  int train_clips = 0, val_clips = 0;
};

/// The class descriptions make_synthetic_kinetics uses for K classes.
std::vector<SyntheticClass> synthetic_classes(int num_classes);

/// Writes out_dir/annotations/{train,validate}.csv (columns label,youtube_id,time_start,time_end,
/// split) and the clips out_dir/{train,val}/<label>/<youtube_id>_<start:06d>_<end:06d>.mp4
/// (H.264 + AAC). Files are written to a temporary name and renamed, so an interrupted run
/// leaves no half-written clip under a final name.
SyntheticSummary make_synthetic_kinetics(const std::filesystem::path& out_dir, int num_classes,
                                         int clips_per_class, uint64_t seed,
                                         const SyntheticOptions& opts = {});

}  // namespace perceiver
