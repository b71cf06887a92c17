// libsndfile reading and writing. SNDFILE* is owned by a unique_ptr like the FFmpeg objects.
#include "media/audio_file.h"

#include <sndfile.h>

#include <cmath>
#include <memory>

#include "media/audio_resample.h"
#include "perceiver/error.h"

namespace perceiver {
namespace {

struct SndfileDeleter {
  void operator()(SNDFILE* f) const { sf_close(f); }
};
using SndfilePtr = std::unique_ptr<SNDFILE, SndfileDeleter>;

SndfilePtr open_sndfile(const std::filesystem::path& path, int mode, SF_INFO& info) {
  SndfilePtr f(sf_open(path.c_str(), mode, &info));
  PCV_CHECK(f, "libsndfile cannot open '", path.string(), "': ", sf_strerror(nullptr));
  return f;
}

// Reads all frames and averages the channels (the same mean downmix as the video reader).
std::vector<float> read_mono(SNDFILE* f, const SF_INFO& info, const std::filesystem::path& path) {
  const int c = info.channels;
  std::vector<float> mono;
  mono.reserve(size_t(info.frames));
  std::vector<float> chunk(size_t(4096) * c);
  for (;;) {
    const sf_count_t got = sf_readf_float(f, chunk.data(), 4096);
    PCV_CHECK(got >= 0 && sf_error(f) == SF_ERR_NO_ERROR, "libsndfile read error in '", path.string(),
              "': ", sf_strerror(f));
    for (sf_count_t i = 0; i < got; ++i) {
      float sum = 0;
      for (int ch = 0; ch < c; ++ch) sum += chunk[size_t(i * c + ch)];
      mono.push_back(sum / float(c));
    }
    if (got < 4096) return mono;
  }
}

}  // namespace

AudioData read_audio_file(const std::filesystem::path& path, const AudioFileOptions& opts) {
  std::error_code ec;
  PCV_CHECK(std::filesystem::is_regular_file(path, ec), "'", path.string(), "' is not a regular file");
  const auto bytes = std::filesystem::file_size(path, ec);
  PCV_CHECK(!ec && bytes > 0, "'", path.string(), "' is empty");
  PCV_CHECK(int64_t(bytes) <= opts.max_file_bytes, "'", path.string(), "' is ", bytes,
            " bytes, over the limit of ", opts.max_file_bytes);
  SF_INFO info{};
  SndfilePtr f = open_sndfile(path, SFM_READ, info);
  PCV_CHECK(info.channels >= 1 && info.channels <= 64 && info.samplerate > 0, "'", path.string(),
            "': unsupported audio (", info.channels, " channels at ", info.samplerate, " Hz)");
  PCV_CHECK(double(info.frames) / info.samplerate <= opts.max_duration_s, "'", path.string(), "' lasts ",
            double(info.frames) / info.samplerate, " s, over the limit of ", opts.max_duration_s, " s");
  std::vector<float> mono = read_mono(f.get(), info, path);
  AudioData out;
  out.sample_rate = opts.sample_rate > 0 ? opts.sample_rate : info.samplerate;
  out.samples = detail::resample_mono(mono.data(), int64_t(mono.size()), info.samplerate, out.sample_rate);
  return out;
}

std::optional<std::filesystem::path> find_audio_side_file(const std::filesystem::path& dir,
                                                          const std::string& youtube_id) {
  for (const char* ext : {".wav", ".flac"}) {
    auto p = dir / (youtube_id + ext);
    std::error_code ec;
    if (std::filesystem::is_regular_file(p, ec)) return p;
  }
  return std::nullopt;
}

std::vector<float> audio_window(const AudioData& audio, double start_s, int64_t n, int64_t* padded) {
  std::vector<float> out(size_t(n), 0.0f);
  const int64_t first = std::llround(start_s * audio.sample_rate);
  int64_t pad = 0;
  for (int64_t k = 0; k < n; ++k) {
    const int64_t src = first + k;
    if (src >= 0 && src < int64_t(audio.samples.size()))
      out[size_t(k)] = audio.samples[size_t(src)];
    else
      ++pad;
  }
  if (padded) *padded = pad;
  return out;
}

void write_wav(const std::filesystem::path& path, const float* samples, int64_t frames, int channels,
               int sample_rate, bool float32) {
  SF_INFO info{};
  info.samplerate = sample_rate;
  info.channels = channels;
  info.format = SF_FORMAT_WAV | (float32 ? SF_FORMAT_FLOAT : SF_FORMAT_PCM_16);
  PCV_CHECK(sf_format_check(&info), "cannot write WAV with ", channels, " channels at ", sample_rate, " Hz");
  SndfilePtr f = open_sndfile(path, SFM_WRITE, info);
  // Float -> PCM conversion clips instead of wrapping around on out-of-range samples.
  sf_command(f.get(), SFC_SET_CLIPPING, nullptr, SF_TRUE);
  // The PEAK chunk of float WAVs carries the current time; leave it out so output is reproducible.
  sf_command(f.get(), SFC_SET_ADD_PEAK_CHUNK, nullptr, SF_FALSE);
  const sf_count_t wrote = sf_writef_float(f.get(), samples, frames);
  PCV_CHECK(wrote == frames, "short write to '", path.string(), "': ", sf_strerror(f.get()));
}

}  // namespace perceiver
