// Audio side files (<youtube_id>.wav / .flac next to a clip) through libsndfile, and WAV output.
// Samples are mono float; resampling and downmix match the video reader's audio path.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace perceiver {

/// Mono audio at a known rate.
struct AudioData {
  int sample_rate = 0;
  std::vector<float> samples;  // [n] mono
  double duration_s() const { return sample_rate ? double(samples.size()) / sample_rate : 0; }
};

struct AudioFileOptions {
  int sample_rate = 48000;                     // output rate; 0 keeps the file's rate
  int64_t max_file_bytes = int64_t(2) << 30;   // 2 GiB
  double max_duration_s = 4 * 3600.0;
};

/// Reads a WAV/FLAC (anything libsndfile reads), downmixes to the mean of the channels and
/// resamples to opts.sample_rate. Throws perceiver::Error naming the file on any failure.
AudioData read_audio_file(const std::filesystem::path& path, const AudioFileOptions& opts = {});

/// The audio side file of a clip, if one exists: `<dir>/<youtube_id>.wav`, then `.flac`.
std::optional<std::filesystem::path> find_audio_side_file(const std::filesystem::path& dir,
                                                          const std::string& youtube_id);

/// n samples starting at start_s; samples outside the audio are zeros, counted in *padded.
std::vector<float> audio_window(const AudioData& audio, double start_s, int64_t n, int64_t* padded);

/// Writes interleaved float samples [frames, channels] as a WAV file (float32 when `float32`,
/// else 16-bit PCM, clipped to [-1, 1]).
void write_wav(const std::filesystem::path& path, const float* samples, int64_t frames, int channels,
               int sample_rate, bool float32 = false);

}  // namespace perceiver
