// Reading clips of untrusted local media files: metadata, and windows of T frames (RGB uint8,
// [T, H, W, 3]) with the audio of the same window (mono float at 48 kHz, [T·1920]).
// Guarantees and limits are listed in media/README.md.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "media/frame_convert.h"

namespace perceiver {

/// Limits and policy for opening a file. The defaults suit Kinetics-like clips and leave ample
/// room; a file over a limit is rejected with a message naming the limit.
struct ReaderOptions {
  /// Demuxers that may be used (FFmpeg short names). Playlists and indirections (hls, concat,
  /// image2, tee, ...) are deliberately absent: they would open other files.
  std::vector<std::string> allowed_formats = {"mov", "mp4", "m4a", "3gp", "3g2", "mj2", "matroska",
                                              "webm", "avi", "wav", "flac"};
  /// Codecs that may be decoded (FFmpeg codec names): what a Kinetics-like set needs. A stream
  /// in any other codec is refused by name, so the many rarely used decoders FFmpeg carries are
  /// never run on untrusted input (also not while probing the streams).
  std::vector<std::string> allowed_video_codecs = {"h264", "hevc", "vp8", "vp9", "av1", "mpeg4", "mjpeg"};
  std::vector<std::string> allowed_audio_codecs = {
      "aac",       "mp3",       "opus",      "vorbis",    "flac",      "pcm_s16le", "pcm_s16be", "pcm_s24le",
      "pcm_s24be", "pcm_s32le", "pcm_s32be", "pcm_f32le", "pcm_f32be", "pcm_f64le", "pcm_f64be", "pcm_u8"};
  int64_t max_file_bytes = int64_t(4) << 30;  // 4 GiB
  double max_duration_s = 4 * 3600.0;
  int max_width = 8192, max_height = 8192;
  /// Wall-clock budget for open() and for each read_window(); FFmpeg's blocking calls are
  /// interrupted when it runs out.
  double timeout_s = 60.0;
  /// Reject frames the decoder flags as corrupt and abort on bitstream errors instead of
  /// concealing them.
  bool reject_corrupt = true;
  /// Decoder threads per reader (the loader runs one reader per worker: keep 1 there).
  int decoder_threads = 1;
};

/// What a file holds, from the container and stream headers.
struct MediaInfo {
  std::string container;        // demuxer name, e.g. "mov,mp4,m4a,3gp,3g2,mj2"
  double duration_s = 0;        // video stream duration (container duration if unknown)
  double fps = 0;               // average frame rate
  int64_t frame_count = 0;      // container's frame count, else duration x fps (an estimate)
  int width = 0, height = 0;    // coded picture size
  std::string pixel_format;     // e.g. "yuv420p"
  std::string video_codec;      // e.g. "h264"
  bool has_audio = false;
  int sample_rate = 0;          // of the source audio stream (0 without audio)
  int channels = 0;
  std::string audio_codec;
};

/// Which frames and samples to read.
struct WindowSpec {
  double start_s = 0;     // time of the first frame, seconds from the start of the video stream
  int num_frames = 16;    // T
  double fps = 25;        // frame rate of the output; source frames are picked by timestamp
  int stride = 1;         // output frame i is at start_s + i·stride/fps
  int image_dim = 224;    // short side resize + centre crop to image_dim^2; 0 keeps source size
  ResizeFilter filter = ResizeFilter::kArea;
  bool audio = true;      // decode the audio of the window
  int sample_rate = 48000;
};

/// One decoded window.
struct Clip {
  int num_frames = 0, height = 0, width = 0;
  std::vector<uint8_t> video;        // [T, H, W, 3] RGB
  std::vector<double> frame_times;   // [T] source pts (s) of the frame used for each output frame
  int padded_frames = 0;             // trailing outputs past the end: repeats of the last frame
  std::vector<float> audio;          // [round(T·sample_rate/fps)] mono, starting at start_s
  int64_t padded_samples = 0;        // zeros in `audio` where the source had no samples
};

/// A demuxer plus the video (and audio) decoder of one local file. Move-only; a VideoReader
/// always holds an open file (there is no empty state). Not thread-safe: one per thread.
class VideoReader {
 public:
  /// Opens `path` (a local regular file; never a URL, a protocol or a playlist) or throws
  /// perceiver::Error with the reason.
  static VideoReader open(const std::filesystem::path& path, const ReaderOptions& opts = {});

  VideoReader(VideoReader&&) noexcept;
  VideoReader& operator=(VideoReader&&) noexcept;
  ~VideoReader();

  const MediaInfo& info() const;
  const std::filesystem::path& path() const;

  /// Decodes the frames (and audio) of one window: seeks to the keyframe at or before
  /// spec.start_s and decodes forward. Throws perceiver::Error on corrupt data, a timeout, or a
  /// window that starts after the last frame.
  Clip read_window(const WindowSpec& spec);

 private:
  struct State;
  explicit VideoReader(std::unique_ptr<State> state);
  std::unique_ptr<State> s_;
};

/// Audio samples in a window of T frames at `fps`: round(T·sample_rate/fps), 1920 per frame at
/// 25 fps and 48 kHz.
int64_t window_audio_samples(int num_frames, double fps, int sample_rate);

/// Sets FFmpeg's global log level (AV_LOG_QUIET = -8 ... AV_LOG_DEBUG = 48). Broken files make
/// FFmpeg print warnings; tools that report skipped files themselves may lower it.
void set_ffmpeg_log_level(int level);

}  // namespace perceiver
