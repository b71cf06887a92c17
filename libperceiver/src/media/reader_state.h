// Internal state of a VideoReader, shared by video_reader.cpp (open, metadata) and
// window_decode.cpp (seek and decode of one window).
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>

#include "media/ffmpeg_ptr.h"
#include "media/video_reader.h"

namespace perceiver::detail {

/// A wall-clock budget that FFmpeg's interrupt callback and our decode loops both consult.
/// Heap-allocated by the reader so the callback's pointer survives moves of the reader.
class Deadline {
 public:
  void start(double seconds) {
    until_ = std::chrono::steady_clock::now() +
             std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                 std::chrono::duration<double>(seconds));
  }
  bool expired() const { return std::chrono::steady_clock::now() > until_; }

 private:
  std::chrono::steady_clock::time_point until_ = std::chrono::steady_clock::time_point::max();
};

/// The media file as opened and checked: FFmpeg reads this descriptor through our I/O
/// callbacks and never opens the path itself, so the file that was checked is the file read.
struct MediaFile {
  MediaFile() = default;
  MediaFile(const MediaFile&) = delete;
  MediaFile& operator=(const MediaFile&) = delete;
  ~MediaFile() {
    if (fd >= 0) ::close(fd);
  }
  int fd = -1;
  int64_t size = 0;  // bytes, from fstat at open
  int64_t pos = 0;   // FFmpeg's read position
};

struct ReaderState {
  std::filesystem::path path;
  ReaderOptions opts;
  MediaInfo info;
  std::unique_ptr<Deadline> deadline;  // before fmt: the callback must outlive the demuxer
  std::unique_ptr<MediaFile> file;     // before io and fmt, which read it
  IoContextPtr io;
  InputFormatPtr fmt;
  CodecContextPtr video, audio;        // audio is null without a usable audio stream
  int video_index = -1, audio_index = -1;
  int64_t origin = 0;                  // video stream start_time: time 0 of WindowSpec::start_s
  double audio_preroll_s = 0;          // audio to decode before the window for exact samples
  PacketPtr packet;
  FramePtr frame;
  std::unique_ptr<FrameConverter> converter;  // kept across windows of the same geometry
};

/// Seeks and decodes one window (VideoReader::read_window).
Clip decode_window(ReaderState& s, const WindowSpec& spec);

}  // namespace perceiver::detail
