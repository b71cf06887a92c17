// Writing media with libavcodec/libavformat: MP4 (H.264 + AAC) for the synthetic data set and
// reconstructions, WebM (VP9 + Opus) and MOV (PCM) for tests, and PNG images.
// Frames in: RGB uint8 [H, W, 3]; audio in: interleaved float [frames, channels] in [-1, 1].
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

namespace perceiver {

struct MediaWriterOptions {
  int width = 340, height = 256;
  int fps = 25;                            // frames per second; frame i has pts i / fps
  std::string video_codec = "libx264";     // FFmpeg encoder name: libx264, libvpx-vp9, mpeg4, ...
  std::string pixel_format = "yuv420p";    // yuv420p needs even sizes; yuv444p takes odd ones
  int crf = 20;                            // quality for libx264 / libvpx-vp9 (lower is better)
  std::string preset = "veryfast";         // libx264 preset
  int gop = 0;                             // keyframe interval in frames; 0 = encoder default
  int audio_channels = 0;                  // 0: no audio track
  int sample_rate = 48000;
  std::string audio_codec = "aac";         // aac, libopus, pcm_s16le (mov/mkv only), ...
  int audio_bitrate = 128000;
  /// Same inputs give the same bytes: one encoder thread, and no version strings, dates or
  /// random ids in the container (AVFMT_FLAG_BITEXACT / AV_CODEC_FLAG_BITEXACT).
  bool deterministic = true;
};

/// An open output file; the container follows the extension (.mp4, .webm, .mkv, .mov, .avi).
/// Call finish() to get a complete file: without it (e.g. after an exception) the file is
/// closed as it is and is unusable.
class MediaWriter {
 public:
  static MediaWriter create(const std::filesystem::path& path, const MediaWriterOptions& opts);

  MediaWriter(MediaWriter&&) noexcept;
  MediaWriter& operator=(MediaWriter&&) noexcept;
  ~MediaWriter();

  /// Appends one frame, RGB uint8 [height, width, 3] without row padding.
  void write_frame(const uint8_t* rgb);
  /// Appends `frames` interleaved samples [frames, audio_channels].
  void write_audio(const float* samples, int64_t frames);
  /// Drains the encoders and writes the trailer.
  void finish();

 private:
  struct State;
  explicit MediaWriter(std::unique_ptr<State> s);
  std::unique_ptr<State> s_;
};

/// Writes an RGB uint8 [height, width, 3] image as PNG (libavcodec's png encoder).
void write_png(const std::filesystem::path& path, const uint8_t* rgb, int width, int height);

}  // namespace perceiver
