// Evaluation's media (media component): reconstruction media that decode (MP4 through
// perceiver's VideoReader, PNG dimensions from its header, WAV through libsndfile).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <vector>

#include "media/audio_file.h"
#include "media/reconstruction_media.h"
#include "media/video_reader.h"
#include "perceiver/error.h"

namespace perceiver {
namespace {

namespace fs = std::filesystem;

fs::path media_dir(const std::string& name) {
  const fs::path dir = fs::path(PERCEIVER_BINARY_DIR) / "test_tmp" / "train" / ("media_" + name);
  fs::remove_all(dir);
  return dir;  // write_reconstruction_media creates it
}

struct PngSize {
  uint32_t width = 0, height = 0;
};

// Width and height from the IHDR chunk, which the PNG format places first (bytes 16..23).
PngSize png_size(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  unsigned char h[24] = {};
  in.read(reinterpret_cast<char*>(h), 24);
  EXPECT_EQ(in.gcount(), 24);
  EXPECT_EQ(std::string(reinterpret_cast<char*>(h + 1), 3), "PNG");
  EXPECT_EQ(std::string(reinterpret_cast<char*>(h + 12), 4), "IHDR");
  auto be32 = [&](int o) { return uint32_t(h[o]) << 24 | uint32_t(h[o + 1]) << 16 | uint32_t(h[o + 2]) << 8 | h[o + 3]; };
  return {be32(16), be32(20)};
}

// Constant-grey clips (original 0.75, reconstruction 0.25) so decoded pixels are checkable.
struct TestClip {
  int64_t t, h, w, s;
  std::vector<float> video, recon, audio;
  TestClip(int64_t t_, int64_t h_, int64_t w_, int64_t s_, int rate)
      : t(t_), h(h_), w(w_), s(s_), video(t * h * w * 3, 0.75f), recon(t * h * w * 3, 0.25f), audio(s) {
    for (int64_t i = 0; i < s; ++i) audio[i] = 0.5f * float(std::sin(2 * M_PI * 440.0 * double(i) / rate));
    recon[0] = -3.0f;  // out of range: clamped
    recon[1] = std::numeric_limits<float>::quiet_NaN();
  }
};

void expect_decodable_mp4(const fs::path& mp4, const TestClip& c, int expected_rate) {
  VideoReader r = VideoReader::open(mp4);
  const MediaInfo& info = r.info();
  EXPECT_EQ(info.video_codec, "h264");
  EXPECT_EQ(info.width, 2 * c.w);
  EXPECT_EQ(info.height, c.h + (c.h & 1));  // odd heights are padded to even
  EXPECT_EQ(info.frame_count, c.t);
  EXPECT_NEAR(info.fps, 25.0, 1e-6);
  EXPECT_TRUE(info.has_audio);
  EXPECT_EQ(info.audio_codec, "aac");
  EXPECT_EQ(info.sample_rate, expected_rate);

  WindowSpec w;
  w.num_frames = int(c.t);
  w.image_dim = 0;
  w.audio = false;
  const Clip clip = r.read_window(w);
  ASSERT_EQ(clip.num_frames, c.t);
  EXPECT_EQ(clip.padded_frames, 0);
  // Middle row, a pixel in each half: original left (~191), reconstruction right (~64).
  const int64_t y = c.h / 2, W2 = 2 * c.w;
  const uint8_t* last = clip.video.data() + (c.t - 1) * clip.height * W2 * 3;
  EXPECT_NEAR(last[(y * W2 + c.w / 2) * 3 + 1], 191, 8);
  EXPECT_NEAR(last[(y * W2 + c.w + c.w / 2) * 3 + 1], 64, 8);
}

TEST(ReconstructionMedia, WritesDecodableMp4WavAndPng) {
  const TestClip c(12, 33, 40, 48000 * 12 / 25, 48000);  // odd height
  const fs::path stem = media_dir("basic") / "clip0";
  write_reconstruction_media(stem, c.video.data(), c.recon.data(), c.audio.data(), c.t, c.h, c.w, c.s, 25.0,
                             48000);
  expect_decodable_mp4(fs::path(stem.string() + ".mp4"), c, 48000);

  const AudioData wav = read_audio_file(stem.string() + ".wav", AudioFileOptions{.sample_rate = 0});
  EXPECT_EQ(wav.sample_rate, 48000);
  ASSERT_EQ(int64_t(wav.samples.size()), c.s);
  EXPECT_NEAR(wav.samples[100], c.audio[100], 1e-4);  // 16-bit PCM

  const PngSize png = png_size(stem.string() + "_frames.png");
  EXPECT_EQ(png.width, 8 * c.w);  // up to 8 frames across
  EXPECT_EQ(png.height, 2 * c.h);  // originals over reconstructions
}

TEST(ReconstructionMedia, RateAacCannotTakeIsResampledAndShortClipsMakeSmallGrids) {
  const int rate = 20000;  // not an AAC rate: the MP4 track is 48 kHz, the WAV keeps 20 kHz
  const TestClip c(3, 16, 18, rate * 3 / 25, rate);
  const fs::path stem = media_dir("resampled") / "sub" / "clip1";
  write_reconstruction_media(stem, c.video.data(), c.recon.data(), c.audio.data(), c.t, c.h, c.w, c.s, 25.0,
                             rate);
  expect_decodable_mp4(fs::path(stem.string() + ".mp4"), c, 48000);
  const AudioData wav = read_audio_file(stem.string() + ".wav", AudioFileOptions{.sample_rate = 0});
  EXPECT_EQ(wav.sample_rate, rate);
  EXPECT_EQ(int64_t(wav.samples.size()), c.s);
  const PngSize png = png_size(stem.string() + "_frames.png");
  EXPECT_EQ(png.width, 3 * c.w);
  EXPECT_EQ(png.height, 2 * c.h);
}

TEST(ReconstructionMedia, BadShapesNameTheStem) {
  const std::vector<float> v(12, 0.5f);
  try {
    write_reconstruction_media(media_dir("bad") / "x", v.data(), v.data(), nullptr, 0, 2, 2, 0, 25.0, 48000);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("x"), std::string::npos);
  }
}

}  // namespace
}  // namespace perceiver
