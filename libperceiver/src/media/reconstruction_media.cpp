// Evaluation's media of one clip. Shape legend: T frames, H/W frame height/width, S audio samples.
#include "media/reconstruction_media.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "media/audio_file.h"
#include "media/audio_resample.h"
#include "media/media_writer.h"
#include "perceiver/error.h"

namespace perceiver {
namespace {

namespace fs = std::filesystem;

// Sample rates the AAC encoder accepts (MPEG-4 sampling frequency table); others are resampled.
constexpr std::array<int, 13> kAacRates = {96000, 88200, 64000, 48000, 44100, 32000, 24000,
                                           22050, 16000, 12000, 11025, 8000,  7350};
constexpr int kFallbackAudioRate = 48000;
constexpr int64_t kMaxGridFrames = 8;

uint8_t to_u8(float x) {
  if (!(x > 0.0f)) return 0;  // also NaN
  if (x >= 1.0f) return 255;
  return static_cast<uint8_t>(std::lround(x * 255.0f));
}

// Copies frame t of a [T,H,W,3] float video into an RGB uint8 image [out_h, out_w, 3] at
// column x0 (rows beyond H stay as they are).
void blit_frame(const float* video, int64_t t, int64_t h, int64_t w, uint8_t* out, int64_t out_w, int64_t x0,
                int64_t y0) {
  const float* src = video + t * h * w * 3;
  for (int64_t y = 0; y < h; ++y) {
    uint8_t* row = out + ((y0 + y) * out_w + x0) * 3;
    for (int64_t i = 0; i < w * 3; ++i) row[i] = to_u8(src[y * w * 3 + i]);
  }
}

// Side-by-side MP4: original left, reconstruction right. yuv420p needs even sizes: 2W always is,
// an odd H gets one black row at the bottom.
void write_side_by_side_mp4(const fs::path& out, const float* video, const float* recon, int64_t frames,
                            int64_t h, int64_t w, int fps, const std::vector<float>& audio, int audio_rate) {
  MediaWriterOptions o;
  o.width = int(2 * w);
  o.height = int(h + (h & 1));
  o.fps = fps;
  o.audio_channels = audio.empty() ? 0 : 1;
  o.sample_rate = audio_rate;
  MediaWriter writer = MediaWriter::create(out, o);
  std::vector<uint8_t> rgb(size_t(o.width) * o.height * 3, 0);  // [H', 2W, 3]
  for (int64_t t = 0; t < frames; ++t) {
    blit_frame(video, t, h, w, rgb.data(), o.width, 0, 0);
    blit_frame(recon, t, h, w, rgb.data(), o.width, w, 0);
    writer.write_frame(rgb.data());
  }
  if (!audio.empty()) writer.write_audio(audio.data(), int64_t(audio.size()));
  writer.finish();
}

// PNG grid: up to 8 frames spread evenly over the clip; originals on top, reconstructions below.
void write_frame_grid(const fs::path& out, const float* video, const float* recon, int64_t frames, int64_t h,
                      int64_t w) {
  const int64_t n = std::min(frames, kMaxGridFrames);
  const int64_t gw = n * w, gh = 2 * h;
  std::vector<uint8_t> rgb(size_t(gw * gh * 3), 0);  // [2H, nW, 3]
  for (int64_t i = 0; i < n; ++i) {
    const int64_t t = n == 1 ? 0 : (i * (frames - 1) + (n - 1) / 2) / (n - 1);
    blit_frame(video, t, h, w, rgb.data(), gw, i * w, 0);
    blit_frame(recon, t, h, w, rgb.data(), gw, i * w, h);
  }
  write_png(out, rgb.data(), int(gw), int(gh));
}

// The audio track for the MP4: as is when AAC takes the rate, else resampled to 48 kHz.
std::vector<float> aac_audio(const float* audio, int64_t n, int rate, int* out_rate) {
  *out_rate = rate;
  if (n == 0) return {};
  if (std::find(kAacRates.begin(), kAacRates.end(), rate) != kAacRates.end()) return {audio, audio + n};
  *out_rate = kFallbackAudioRate;
  return detail::resample_mono(audio, n, rate, kFallbackAudioRate);
}

fs::path with_suffix(const fs::path& stem, const char* suffix) {
  fs::path p = stem;
  p += suffix;
  return p;
}

}  // namespace

// fps is rounded to whole frames per second (the writer's time base); a clip without audio
// (audio_samples == 0) gets no audio track and no WAV.
void write_reconstruction_media(const fs::path& stem, const float* video, const float* recon_video,
                                const float* recon_audio, int64_t frames, int64_t height, int64_t width,
                                int64_t audio_samples, double fps, int sample_rate) {
  PCV_CHECK(frames > 0 && height > 0 && width > 0, "write_reconstruction_media: bad video shape [", frames, ",",
            height, ",", width, ",3] for '", stem.string(), "'");
  PCV_CHECK(audio_samples >= 0 && (audio_samples == 0 || (recon_audio && sample_rate > 0)),
            "write_reconstruction_media: bad audio (", audio_samples, " samples at ", sample_rate, " Hz) for '",
            stem.string(), "'");
  const int fps_int = int(std::lround(fps));
  PCV_CHECK(fps_int >= 1, "write_reconstruction_media: fps ", fps, " for '", stem.string(), "'");
  if (stem.has_parent_path()) fs::create_directories(stem.parent_path());

  int audio_rate = 0;
  const std::vector<float> track = aac_audio(recon_audio, audio_samples, sample_rate, &audio_rate);
  write_side_by_side_mp4(with_suffix(stem, ".mp4"), video, recon_video, frames, height, width, fps_int, track,
                         audio_rate);
  if (audio_samples > 0) write_wav(with_suffix(stem, ".wav"), recon_audio, audio_samples, 1, sample_rate);
  write_frame_grid(with_suffix(stem, "_frames.png"), video, recon_video, frames, height, width);
}

}  // namespace perceiver
