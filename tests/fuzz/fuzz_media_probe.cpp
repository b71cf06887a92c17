// libFuzzer target: opening untrusted media (VideoReader::open: our checks around FFmpeg's
// demuxers and the allowed decoders) and reading one small window. The first byte picks the
// file name's extension; the rest is the file. Properties on every input: open and read return
// or throw perceiver::Error; nothing else escapes, nothing crashes; an opened file's metadata is
// within the limits the options set.
#include <cstddef>
#include <cstdint>

#include "media/video_reader.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace perceiver;
  static const bool quiet = (set_ffmpeg_log_level(-8), true);  // AV_LOG_QUIET
  (void)quiet;
  if (size < 1) return 0;
  static const char* const kExtensions[] = {".mp4", ".mkv", ".webm", ".avi", ".mov", ".wav", ".flac"};
  const auto path = fuzz::put(std::string("clip") + kExtensions[data[0] % 7], data + 1, size - 1);
  ReaderOptions opts;
  opts.timeout_s = 2;
  opts.max_width = opts.max_height = 1024;
  fuzz::accepts([&] {
    VideoReader r = VideoReader::open(path, opts);
    fuzz::require(r.info().width <= 1024 && r.info().height <= 1024, "an opened file is over the size limit");
    WindowSpec w;
    w.num_frames = 2, w.image_dim = 16;
    const Clip c = r.read_window(w);
    fuzz::require(c.video.size() == size_t(2 * 16 * 16 * 3), "a window has the wrong size");
  });
  return 0;
}
