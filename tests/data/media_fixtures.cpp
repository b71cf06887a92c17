#include "media_fixtures.h"

#include <stdexcept>

#include "media/media_writer.h"
#include "media/video_reader.h"

namespace fixtures {

// FFmpeg's info lines (x264 banners) would bury the test output; errors still show.
static const bool kQuietFFmpeg = (perceiver::set_ffmpeg_log_level(16 /* AV_LOG_ERROR */), true);

static void write_clip(const std::filesystem::path& out, const ClipSpec& s) {
  perceiver::MediaWriterOptions o;
  o.width = s.width, o.height = s.height, o.fps = s.fps;
  o.video_codec = s.video_codec, o.pixel_format = s.pixel_format;
  o.crf = s.crf, o.gop = s.gop;
  o.audio_channels = s.audio_channels, o.audio_codec = s.audio_codec;
  auto w = perceiver::MediaWriter::create(out, o);
  const int spf = 48000 / s.fps;
  const auto audio = click_audio(int64_t(spf) * s.frames, 48000, std::max(1, s.audio_channels), s.click_s);
  for (int f = 0; f < s.frames; ++f) {
    std::vector<uint8_t> img;
    if (s.pattern == Pattern::kFrameCode) img = frame_code_image(s.width, s.height, f);
    if (s.pattern == Pattern::kQuadrants) img = quadrant_image(s.width, s.height);
    if (s.pattern == Pattern::kSolid) {
      img.resize(size_t(s.width) * s.height * 3);
      for (size_t i = 0; i < img.size(); ++i) img[i] = s.solid[i % 3];
    }
    w.write_frame(img.data());
    if (s.audio_channels > 0) w.write_audio(audio.data() + size_t(f) * spf * s.audio_channels, spf);
  }
  w.finish();
}

std::filesystem::path clip(const std::string& name, const ClipSpec& spec) {
  const auto path = dir() / name;
  if (std::filesystem::exists(path)) return path;
  const auto tmp = temp_for(path);
  write_clip(tmp, spec);
  std::filesystem::rename(tmp, path);
  return path;
}

std::filesystem::path ffmpeg_clip(const std::string& name, const std::string& args) {
  const auto path = dir() / name;
  if (std::filesystem::exists(path)) return path;
  const auto tmp = temp_for(path);
  if (!run("ffmpeg -nostdin -loglevel error -y " + args + " '" + tmp.string() + "'"))
    throw std::runtime_error("ffmpeg failed making " + name);
  std::filesystem::rename(tmp, path);
  return path;
}

}  // namespace fixtures
