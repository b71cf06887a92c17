// Decode + resize throughput of VideoReader against the ffmpeg command line, one thread each:
//   bench_video_reader [clip.mp4]
// Without an argument it makes a 30 s 340x256 H.264 clip (testsrc2, default x264 settings,
// keyframe every 250 frames) in the build tree. Prints frames/s for the full-clip decode at
// 224x224 RGB and random 16-frame windows/s (with audio) as in the loader's on-the-fly mode.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>

#include "media/video_reader.h"

using namespace perceiver;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::filesystem::path make_clip(bool audio) {
  const auto dir = std::filesystem::path(PERCEIVER_BINARY_DIR) / "tests" / "data" / "fixtures";
  std::filesystem::create_directories(dir);
  const auto path = dir / (audio ? "bench_340x256_av.mp4" : "bench_340x256.mp4");
  if (!std::filesystem::exists(path)) {
    const std::string a = audio ? " -f lavfi -i sine=f=440:r=48000 -c:a aac -ac 1" : "";
    const std::string cmd = "ffmpeg -nostdin -loglevel error -y -f lavfi -i testsrc2=size=340x256:rate=25" + a +
                            " -t 30 -c:v libx264 -pix_fmt yuv420p '" + path.string() + "'";
    if (std::system(cmd.c_str()) != 0) throw std::runtime_error("ffmpeg failed: " + cmd);
  }
  return path;
}

double reader_fps(const std::filesystem::path& clip, ResizeFilter filter) {
  auto r = VideoReader::open(clip);
  WindowSpec w;
  w.num_frames = int(r.info().frame_count), w.image_dim = 224, w.filter = filter, w.audio = false;
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = Clock::now();
    const Clip c = r.read_window(w);
    best = std::max(best, c.num_frames / seconds_since(t0));
  }
  return best;
}

double ffmpeg_fps(const std::filesystem::path& clip, int frames) {
  const std::string cmd = "ffmpeg -nostdin -loglevel error -threads 1 -filter_threads 1 -i '" + clip.string() +
                          "' -vf scale=224:224 -pix_fmt rgb24 -f null -";
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = Clock::now();
    if (std::system(cmd.c_str()) != 0) return 0;
    best = std::max(best, frames / seconds_since(t0));
  }
  return best;
}

double random_windows_per_s(const std::filesystem::path& clip, int count) {
  auto r = VideoReader::open(clip);
  std::mt19937 rng(1);
  std::uniform_real_distribution<double> start(0, r.info().duration_s - 16 / 25.0);
  WindowSpec w;
  w.num_frames = 16, w.image_dim = 224;
  const auto t0 = Clock::now();
  for (int i = 0; i < count; ++i) {
    w.start_s = start(rng);
    r.read_window(w);
  }
  return count / seconds_since(t0);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    set_ffmpeg_log_level(16);
    const auto clip = argc > 1 ? std::filesystem::path(argv[1]) : make_clip(false);
    const int frames = int(VideoReader::open(clip).info().frame_count);
    std::printf("clip: %s (%d frames)\n", clip.c_str(), frames);
    std::printf("ffmpeg CLI  scale=224:224 (bicubic, no crop)  %7.1f frames/s\n", ffmpeg_fps(clip, frames));
    std::printf("VideoReader 224x224 crop, bilinear            %7.1f frames/s\n", reader_fps(clip, ResizeFilter::kBilinear));
    std::printf("VideoReader 224x224 crop, area                %7.1f frames/s\n", reader_fps(clip, ResizeFilter::kArea));
    const auto av = argc > 1 ? clip : make_clip(true);
    std::printf("VideoReader random 16-frame windows + audio   %7.2f windows/s\n", random_windows_per_s(av, 40));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_video_reader: %s\n", e.what());
    return 1;
  }
}
