// The seam between the core and the media component (perceiver::media, libperceiver/src/media/).
// The core links no FFmpeg and no libsndfile; where a run asks for media (videos decoded as they
// are read, a Kinetics-layout folder to prepare into shards, MP4/WAV/PNG of evaluation) it calls
// the hooks the media component registered (perceiver::register_media(), perceiver/media.h; the
// apps call it at the start of main). Nothing registered: the request stops with one line that
// says so and how to get media support (require_media).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>

namespace perceiver {

class ClipSource;
struct LoaderOptions;

/// One split of a Kinetics-layout folder to prepare into shards (perceiver-prep's pipeline with
/// its defaults; progress and a summary line go to stdout).
struct PrepareRequest {
  std::filesystem::path dataset_dir, output_dir;
  std::string split;                 // train, validate, test
  int64_t num_frames = 16, image_dim = 224, num_workers = 1;
};

/// What one reconstructed clip is written as: <stem>.mp4 (original left, reconstruction right,
/// with the reconstructed audio), <stem>.wav and <stem>_frames.png.
/// video/recon_video: f32 [T,H,W,3] in [0,1]; recon_audio: f32 [S] mono at sample_rate.
struct ReconstructionMedia {
  std::filesystem::path stem;
  const float* video = nullptr;
  const float* recon_video = nullptr;
  const float* recon_audio = nullptr;
  int64_t frames = 0, height = 0, width = 0, audio_samples = 0;
  double fps = 25;
  int sample_rate = 48000;
};

enum class MediaLogLevel { kQuiet, kErrors };

struct MediaHooks {
  /// LoaderSource::kVideos: the clips of a Kinetics-layout folder, decoded as they are read.
  std::function<std::unique_ptr<ClipSource>(const LoaderOptions&)> video_source;
  /// Prepares one split into request.output_dir (resumable; finished shards are kept).
  std::function<void(const PrepareRequest&)> prepare;
  /// Writes one clip's reconstruction media.
  std::function<void(const ReconstructionMedia&)> write_reconstruction;
  /// How much the media libraries print (FFmpeg's log level).
  std::function<void(MediaLogLevel)> set_log_level;
};

/// Installs the hooks (every one must be set); a second call replaces them. Thread-safe.
void set_media_hooks(MediaHooks hooks);
/// The registered hooks, or nullptr when no media component is registered in this process.
const MediaHooks* media_hooks();

/// The one line a request for media gets where none is registered: `what` (the request, e.g.
/// "config key 'data_source' is 'videos'"), that this build (or program) has no media support,
/// how to get it, and `alternative` (what to do instead, if anything) after a semicolon.
std::string no_media_message(const std::string& what, const std::string& alternative = "");
/// The hooks, or throws perceiver::Error(no_media_message(what, alternative)).
const MediaHooks& require_media(const std::string& what, const std::string& alternative = "");
/// Sets the media libraries' log level when media are registered; nothing otherwise.
void set_media_log_level(MediaLogLevel level);

}  // namespace perceiver
