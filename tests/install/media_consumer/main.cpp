// Uses only installed headers of the media component: writes a one-class synthetic set with
// FFmpeg's encoders, probes a clip of it, and registers the component with the core.
#include <cstdio>
#include <filesystem>
#include <string>

#include <perceiver/error.h>
#include <perceiver/media.h>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: media_consumer SCRATCH_DIR\n");
    return 2;
  }
  namespace fs = std::filesystem;
  perceiver::register_media();
  const fs::path out = fs::path(argv[1]) / "synthetic";
  const int64_t clips = perceiver::write_synthetic_kinetics(out.string(), 1, 1, 7);
  fs::path clip;
  for (const auto& e : fs::recursive_directory_iterator(out))
    if (e.path().extension() == ".mp4") clip = e.path();
  if (clips != 2 || clip.empty()) {
    std::fprintf(stderr, "expected 2 clips, got %ld (%s)\n", long(clips), clip.c_str());
    return 1;
  }
  const perceiver::MediaFileInfo info = perceiver::probe_media_file(clip.string());
  if (info.video_codec != "h264" || info.width != 340 || info.height != 256 || !info.has_audio) {
    std::fprintf(stderr, "unexpected clip: %s %dx%d audio %d\n", info.video_codec.c_str(), info.width, info.height,
                 int(info.has_audio));
    return 1;
  }
  try {
    perceiver::probe_media_file((out / "annotations" / "train.csv").string());
    return 1;
  } catch (const perceiver::Error& e) {
    std::printf("media consumer ok: %s %dx%d %.2f s, %s; a CSV is refused: %s\n", info.video_codec.c_str(), info.width,
                info.height, info.duration_s, perceiver::media_versions().c_str(), e.what());
  }
  return 0;
}
