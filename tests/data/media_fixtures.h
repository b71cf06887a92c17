// Generated media for the media tests. Clips are made on first use in the build tree
// (build/tests/data/fixtures) with MediaWriter or the ffmpeg command line, written under a
// temporary name and renamed, so tests running in parallel never see half-written files.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "fixtures.h"

namespace fixtures {

enum class Pattern {
  kFrameCode,  // the frame index in binary as 8 vertical bars (white = 1), MSB on the left
  kQuadrants,  // crop test: 40 px black margins left/right, red|green over blue|white
  kSolid,      // one colour
};

struct ClipSpec {
  int width = 320, height = 240, fps = 25, frames = 75;
  std::string video_codec = "libx264", pixel_format = "yuv420p";
  int crf = 18, gop = 10;
  int audio_channels = 1;             // 0: no audio
  std::string audio_codec = "aac";
  Pattern pattern = Pattern::kFrameCode;
  uint8_t solid[3] = {200, 60, 100};
  double click_s = 1.0;               // start of a 20 ms 1 kHz burst; silence elsewhere
};

/// The clip `name` (its extension picks the container), made from spec if not there yet.
std::filesystem::path clip(const std::string& name, const ClipSpec& spec);
/// The file `name` made by `ffmpeg <args> <output>` if not there yet (throws if ffmpeg fails).
std::filesystem::path ffmpeg_clip(const std::string& name, const std::string& args);

}  // namespace fixtures
