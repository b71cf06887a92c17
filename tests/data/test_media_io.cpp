// libsndfile side files (read, downmix, resample; WAV writing), PNG writing and MediaWriter.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <numbers>

#include "media/audio_file.h"
#include "media/media_writer.h"
#include "media/video_reader.h"
#include "media_fixtures.h"
#include "perceiver/error.h"

namespace perceiver {
namespace {

std::filesystem::path unique(const std::string& name) {
  return fixtures::dir() / (std::to_string(::getpid()) + "_" + name);
}

// Interleaved stereo at 44.1 kHz: left = a·sin(2π·f·t), right = sign·left.
std::vector<float> stereo_tone(int64_t n, double f, float a, float sign) {
  std::vector<float> x(size_t(n) * 2);
  for (int64_t i = 0; i < n; ++i) {
    const float v = a * float(std::sin(2 * std::numbers::pi * f * double(i) / 44100));
    x[size_t(2 * i)] = v, x[size_t(2 * i + 1)] = sign * v;
  }
  return x;
}

int zero_crossings(const std::vector<float>& x) {
  int n = 0;
  for (size_t i = 1; i < x.size(); ++i) n += (x[i - 1] < 0) != (x[i] < 0);
  return n;
}

TEST(AudioFile, WavIsDownmixedAndResampledTo48k) {
  const auto path = unique("tone.wav");
  const auto in = stereo_tone(44100, 440, 0.5f, 1.0f);
  write_wav(path, in.data(), 44100, 2, 44100, /*float32=*/true);
  const AudioData a = read_audio_file(path);
  EXPECT_EQ(a.sample_rate, 48000);
  EXPECT_NEAR(double(a.samples.size()), 48000.0, 2.0);
  EXPECT_NEAR(a.duration_s(), 1.0, 1e-3);
  float peak = 0;
  for (size_t i = 1000; i + 1000 < a.samples.size(); ++i) peak = std::max(peak, std::fabs(a.samples[i]));
  EXPECT_NEAR(peak, 0.5f, 0.01f);               // mean of two equal channels keeps the level
  EXPECT_NEAR(zero_crossings(a.samples), 880, 2);  // still 440 Hz
  std::filesystem::remove(path);
}

TEST(AudioFile, DownmixIsTheMeanOfTheChannels) {
  const auto path = unique("antiphase.wav");
  const auto in = stereo_tone(4410, 440, 0.5f, -1.0f);
  write_wav(path, in.data(), 4410, 2, 44100, true);
  AudioFileOptions keep;
  keep.sample_rate = 0;  // no resampling
  const AudioData a = read_audio_file(path, keep);
  EXPECT_EQ(a.sample_rate, 44100);
  ASSERT_EQ(a.samples.size(), size_t(4410));
  for (float v : a.samples) ASSERT_EQ(v, 0.0f);
  std::filesystem::remove(path);
}

TEST(AudioFile, FlacSideFileMatchesWav) {
  const auto dir = unique("side");
  std::filesystem::create_directories(dir);
  const auto in = stereo_tone(22050, 1000, 0.4f, 1.0f);
  write_wav(dir / "clip16.wav", in.data(), 22050, 2, 44100);  // 16-bit PCM
  ASSERT_TRUE(fixtures::run("ffmpeg -nostdin -loglevel error -y -i '" + (dir / "clip16.wav").string() + "' '" +
                            (dir / "abc.flac").string() + "'"));
  EXPECT_FALSE(find_audio_side_file(dir, "nothere").has_value());
  ASSERT_EQ(find_audio_side_file(dir, "abc"), dir / "abc.flac");
  const AudioData flac = read_audio_file(dir / "abc.flac");
  const AudioData wav = read_audio_file(dir / "clip16.wav");
  ASSERT_EQ(flac.samples.size(), wav.samples.size());
  for (size_t i = 0; i < wav.samples.size(); ++i) ASSERT_NEAR(flac.samples[i], wav.samples[i], 1e-6f);
  // WAV wins when both exist.
  std::filesystem::copy_file(dir / "clip16.wav", dir / "abc.wav");
  EXPECT_EQ(find_audio_side_file(dir, "abc"), dir / "abc.wav");
  std::filesystem::remove_all(dir);
}

TEST(AudioFile, WindowPadsOutsideTheAudioAndCounts) {
  AudioData a;
  a.sample_rate = 1000;
  a.samples.assign(1000, 1.0f);
  int64_t padded = -1;
  auto w = audio_window(a, 0.95, 100, &padded);
  EXPECT_EQ(padded, 50);
  EXPECT_EQ(w[49], 1.0f);
  EXPECT_EQ(w[50], 0.0f);
  w = audio_window(a, 0.2, 100, &padded);
  EXPECT_EQ(padded, 0);
}

TEST(AudioFile, BrokenFilesAreErrorsNamingTheFile) {
  const auto text = fixtures::file("not_audio.wav", "just some text, no RIFF header here\n");
  try {
    read_audio_file(text);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not_audio.wav"), std::string::npos) << e.what();
  }
  EXPECT_THROW(read_audio_file(fixtures::file("empty.flac", "")), Error);
  EXPECT_THROW(read_audio_file(fixtures::dir() / "missing.wav"), Error);
}

TEST(Png, WritesExactPixels) {
  const int w = 37, h = 23;
  std::vector<uint8_t> img(size_t(w) * h * 3);
  for (size_t i = 0; i < img.size(); ++i) img[i] = uint8_t(i * 7);
  const auto png = unique("image.png");
  write_png(png, img.data(), w, h);
  const std::string bytes = fixtures::read_bytes(png);
  ASSERT_GE(bytes.size(), 8u);
  EXPECT_EQ(bytes.substr(1, 3), "PNG");
  const auto raw = unique("image.rgb");
  ASSERT_TRUE(fixtures::run("ffmpeg -nostdin -loglevel error -y -i '" + png.string() +
                            "' -f rawvideo -pix_fmt rgb24 '" + raw.string() + "'"));
  EXPECT_EQ(fixtures::read_bytes(raw), std::string(img.begin(), img.end()));
  std::filesystem::remove(png);
  std::filesystem::remove(raw);
}

TEST(MediaWriter, SameInputGivesIdenticalBytes) {
  fixtures::ClipSpec s;
  s.frames = 30;
  const auto a = unique("det_a.mp4"), b = unique("det_b.mp4");
  for (const auto& p : {a, b}) {
    MediaWriterOptions o;
    o.width = 160, o.height = 120, o.audio_channels = 2;
    auto w = MediaWriter::create(p, o);
    const auto audio = fixtures::click_audio(1920 * 30, 48000, 2, 0.5);
    for (int f = 0; f < 30; ++f) {
      const auto img = fixtures::frame_code_image(160, 120, f);
      w.write_frame(img.data());
      w.write_audio(audio.data() + size_t(f) * 1920 * 2, 1920);
    }
    w.finish();
  }
  EXPECT_EQ(fixtures::read_bytes(a), fixtures::read_bytes(b));
  auto r = VideoReader::open(a);
  EXPECT_EQ(r.info().frame_count, 30);
  EXPECT_EQ(r.info().channels, 2);
  std::filesystem::remove(a);
  std::filesystem::remove(b);
}

TEST(MediaWriter, MisuseIsAnError) {
  MediaWriterOptions o;
  o.video_codec = "no-such-encoder";
  EXPECT_THROW(MediaWriter::create(unique("x.mp4"), o), Error);
  o = MediaWriterOptions{};
  o.width = 64, o.height = 64;
  auto w = MediaWriter::create(unique("y.mp4"), o);
  const std::vector<float> audio(100);
  EXPECT_THROW(w.write_audio(audio.data(), 100), Error);  // no audio track
  w.finish();
  const std::vector<uint8_t> img(64 * 64 * 3);
  EXPECT_THROW(w.write_frame(img.data()), Error);
  std::filesystem::remove(unique("y.mp4"));
  std::filesystem::remove(unique("x.mp4"));
}

}  // namespace
}  // namespace perceiver
