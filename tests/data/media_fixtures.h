// Generated media for the data tests. Clips are made on first use in the build tree
// (build/tests/data/fixtures) with MediaWriter or the ffmpeg command line, written under a
// temporary name and renamed, so tests running in parallel never see half-written files.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

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

std::filesystem::path dir();
/// The clip `name` (its extension picks the container), made from spec if not there yet.
std::filesystem::path clip(const std::string& name, const ClipSpec& spec);
/// The file `name` made by `ffmpeg <args> <output>` if not there yet (throws if ffmpeg fails).
std::filesystem::path ffmpeg_clip(const std::string& name, const std::string& args);
/// A file holding exactly `bytes`.
std::filesystem::path file(const std::string& name, const std::string& bytes);
/// Runs a shell command; true on exit status 0.
bool run(const std::string& cmd);
std::string read_bytes(const std::filesystem::path& p);

std::vector<uint8_t> frame_code_image(int w, int h, int index);
/// Reads the index back from a decoded RGB frame of the same layout (any size).
int read_frame_code(const uint8_t* rgb, int w, int h);
std::vector<uint8_t> quadrant_image(int w, int h);
/// Interleaved [n, channels]: silence with a burst starting at click_s.
std::vector<float> click_audio(int64_t n, int rate, int channels, double click_s);
/// First sample whose magnitude exceeds `threshold`, or -1.
int64_t first_above(const std::vector<float>& x, float threshold);

}  // namespace fixtures
