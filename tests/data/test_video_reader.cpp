// VideoReader on generated clips: metadata, frame selection by timestamp, seeking, audio
// alignment, resize/crop geometry, odd sizes and pixel formats, missing audio, short clips, WebM.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "media/video_reader.h"
#include "media_fixtures.h"
#include "perceiver/error.h"

namespace perceiver {
namespace {

using fixtures::ClipSpec;
using fixtures::Pattern;

std::filesystem::path seq25() { return fixtures::clip("seq25.mp4", ClipSpec{}); }

std::filesystem::path seq30() {
  ClipSpec s;
  s.fps = 30, s.frames = 90, s.audio_channels = 0;
  return fixtures::clip("seq30.mp4", s);
}

WindowSpec native(double start_s, int frames) {
  WindowSpec w;
  w.start_s = start_s, w.num_frames = frames, w.image_dim = 0;
  return w;
}

const uint8_t* frame(const Clip& c, int i) { return c.video.data() + size_t(i) * c.height * c.width * 3; }
int code(const Clip& c, int i) { return fixtures::read_frame_code(frame(c, i), c.width, c.height); }

TEST(VideoReader, ReportsStreamMetadata) {
  auto r = VideoReader::open(seq25());
  const MediaInfo& m = r.info();
  EXPECT_NE(m.container.find("mp4"), std::string::npos);
  EXPECT_EQ(m.video_codec, "h264");
  EXPECT_EQ(m.pixel_format, "yuv420p");
  EXPECT_EQ(m.width, 320);
  EXPECT_EQ(m.height, 240);
  EXPECT_DOUBLE_EQ(m.fps, 25.0);
  EXPECT_EQ(m.frame_count, 75);
  EXPECT_NEAR(m.duration_s, 3.0, 0.05);
  EXPECT_TRUE(m.has_audio);
  EXPECT_EQ(m.audio_codec, "aac");
  EXPECT_EQ(m.sample_rate, 48000);
  EXPECT_EQ(m.channels, 1);
}

TEST(VideoReader, SequentialDecodeGivesEveryFrameWithItsTimestamp) {
  auto r = VideoReader::open(seq25());
  const Clip c = r.read_window(native(0, 75));
  ASSERT_EQ(c.num_frames, 75);
  ASSERT_EQ(c.width, 320);
  ASSERT_EQ(c.height, 240);
  ASSERT_EQ(c.video.size(), size_t(75) * 240 * 320 * 3);
  EXPECT_EQ(c.padded_frames, 0);
  for (int i = 0; i < 75; ++i) {
    EXPECT_EQ(code(c, i), i) << "output frame " << i;
    EXPECT_NEAR(c.frame_times[size_t(i)], i / 25.0, 1e-6) << "output frame " << i;
  }
}

TEST(VideoReader, SeekingGivesTheSameBytesAsSequentialDecode) {
  auto r = VideoReader::open(seq25());
  const Clip all = r.read_window(native(0, 75));
  // Forward, backward, on and between keyframes (gop 10), and near the end.
  for (int first : {44, 3, 60, 10, 0, 27, 66, 9}) {
    const Clip w = r.read_window(native(first / 25.0, 8));
    ASSERT_EQ(w.padded_frames, 0);
    for (int i = 0; i < 8; ++i)
      ASSERT_EQ(std::memcmp(frame(w, i), frame(all, first + i), size_t(320) * 240 * 3), 0)
          << "window at frame " << first << ", frame " << i;
  }
}

// One keyframe (x264's default interval of 250): windows past 1 s are reached by decoding from
// frame 0, skipping the non-reference frames more than a second before the window.
TEST(VideoReader, SeekingWithSparseKeyframesGivesTheSameBytes) {
  ClipSpec s;
  s.gop = 0, s.audio_channels = 0;
  auto r = VideoReader::open(fixtures::clip("seq25_sparse.mp4", s));
  const Clip all = r.read_window(native(0, 75));
  for (int first : {60, 26, 50, 67}) {
    const Clip w = r.read_window(native(first / 25.0, 8));
    for (int i = 0; i < 8; ++i)
      ASSERT_EQ(std::memcmp(frame(w, i), frame(all, first + i), size_t(320) * 240 * 3), 0)
          << "window at frame " << first << ", frame " << i;
  }
}

TEST(VideoReader, StrideSkipsFrames) {
  auto r = VideoReader::open(seq25());
  WindowSpec w = native(0.2, 10);
  w.stride = 3;
  const Clip c = r.read_window(w);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(code(c, i), 5 + 3 * i);
}

TEST(VideoReader, ResamplesFrameRateByTimestamps) {
  auto r = VideoReader::open(seq30());
  EXPECT_DOUBLE_EQ(r.info().fps, 30.0);
  const Clip c = r.read_window(native(0, 50));  // 2 s at 25 fps
  for (int i = 0; i < 50; ++i) EXPECT_EQ(code(c, i), i * 30 / 25) << "output frame " << i;
  // Upsampling repeats frames: 25 fps read at 50 fps shows each frame twice.
  auto r25 = VideoReader::open(seq25());
  WindowSpec up = native(0, 20);
  up.fps = 50;
  const Clip u = r25.read_window(up);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(code(u, i), i / 2) << "output frame " << i;
}

TEST(VideoReader, AudioHasExactLengthAndTheClickLandsOnTime) {
  auto r = VideoReader::open(seq25());
  WindowSpec w;
  w.start_s = 0.8, w.num_frames = 16, w.image_dim = 32;
  const Clip c = r.read_window(w);
  ASSERT_EQ(c.audio.size(), size_t(16 * 1920));
  EXPECT_EQ(c.padded_samples, 0);
  // Click at 1.0 s = sample 9600 of the window; AAC smears a little (pre-echo, 1024-sample MDCT).
  const int64_t onset = fixtures::first_above(c.audio, 0.3f);
  EXPECT_NEAR(double(onset), 9600.0, 48.0);
  // The window before the click is silent.
  WindowSpec early = w;
  early.start_s = 0.2;
  const Clip e = r.read_window(early);
  EXPECT_EQ(fixtures::first_above(e.audio, 0.05f), -1);
}

TEST(VideoReader, PcmAudioInMovIsSampleExact) {
  ClipSpec s;
  s.audio_codec = "pcm_s16le";
  s.frames = 50;
  const auto path = fixtures::clip("pcm.mov", s);
  auto r = VideoReader::open(path);
  for (double start : {0.0, 0.52, 0.96}) {
    WindowSpec w;
    w.start_s = start, w.num_frames = 5, w.image_dim = 16;
    const Clip c = r.read_window(w);
    ASSERT_EQ(c.audio.size(), size_t(5 * 1920));
    const int64_t expected = std::llround((1.0 - start) * 48000);
    const int64_t onset = fixtures::first_above(c.audio, 0.3f);
    if (expected < int64_t(c.audio.size())) {
      EXPECT_NEAR(double(onset), double(expected), 2.0) << "window at " << start;
    } else {
      EXPECT_EQ(onset, -1) << "window at " << start;
    }
  }
}

// Quadrant colours of a 120x120 output from 320x240 with 40 px black margins: any misplaced crop
// shows black (or the wrong colour) near the borders.
void expect_quadrants(const Clip& c, int tolerance) {
  const int d = c.width;
  static const uint8_t kColours[4][3] = {{255, 0, 0}, {0, 255, 0}, {0, 0, 255}, {255, 255, 255}};
  for (int q = 0; q < 4; ++q) {
    const int qy = q / 2, qx = q % 2;
    for (int y : {qy * d / 2 + 1, qy * d / 2 + d / 4, qy * d / 2 + d / 2 - 3})
      for (int x : {qx * d / 2 + 1, qx * d / 2 + d / 4, qx * d / 2 + d / 2 - 3})
        for (int ch = 0; ch < 3; ++ch)
          ASSERT_NEAR(int(frame(c, 0)[(size_t(y) * d + x) * 3 + ch]), int(kColours[q][ch]), tolerance)
              << "quadrant " << q << " pixel (" << x << "," << y << ") channel " << ch;
  }
}

TEST(VideoReader, ShortSideResizeAndCentreCrop) {
  ClipSpec s;
  s.pattern = Pattern::kQuadrants, s.frames = 5, s.audio_channels = 0, s.pixel_format = "yuv444p";
  auto r = VideoReader::open(fixtures::clip("quad444.mp4", s));
  for (ResizeFilter f : {ResizeFilter::kArea, ResizeFilter::kBilinear}) {
    WindowSpec w;
    w.num_frames = 2, w.image_dim = 120, w.filter = f, w.audio = false;
    const Clip c = r.read_window(w);
    ASSERT_EQ(c.width, 120);
    ASSERT_EQ(c.height, 120);
    EXPECT_TRUE(c.audio.empty());
    expect_quadrants(c, 12);
  }
}

// Packed 4:2:2 (YUYV) cannot be cropped by moving plane pointers, so it takes the scale-then-crop
// path; both paths must give the same picture.
TEST(VideoReader, PackedSubsampledFormatsTakeTheSlowPathToTheSameResult) {
  ClipSpec s;
  s.pattern = Pattern::kQuadrants, s.frames = 3, s.audio_channels = 0;
  s.video_codec = "rawvideo", s.pixel_format = "yuyv422";
  ReaderOptions raw;  // uncompressed video is not on the default list of codecs
  raw.allowed_video_codecs.push_back("rawvideo");
  auto yuyv = VideoReader::open(fixtures::clip("quad_yuyv.avi", s), raw);
  s.video_codec = "libx264", s.pixel_format = "yuv444p", s.crf = 0;  // lossless
  auto planar = VideoReader::open(fixtures::clip("quad444_lossless.mp4", s));
  EXPECT_EQ(yuyv.info().pixel_format, "yuyv422");
  WindowSpec w;
  w.num_frames = 1, w.image_dim = 120, w.audio = false;
  const Clip a = yuyv.read_window(w), b = planar.read_window(w);
  expect_quadrants(a, 12);
  expect_quadrants(b, 12);
  // Away from the colour edges (where 4:2:2 chroma blurs) the two paths agree closely.
  for (int y : {10, 50, 70, 110})
    for (int x : {10, 50, 70, 110})
      for (int ch = 0; ch < 3; ++ch) {
        const size_t i = (size_t(y) * 120 + x) * 3 + ch;
        EXPECT_NEAR(int(a.video[i]), int(b.video[i]), 4) << x << "," << y;
      }
}

TEST(VideoReader, OddSizeYuv444) {
  ClipSpec s;
  s.width = 341, s.height = 255, s.pixel_format = "yuv444p", s.pattern = Pattern::kSolid;
  s.frames = 10, s.audio_channels = 2;
  auto r = VideoReader::open(fixtures::clip("odd444.mp4", s));
  EXPECT_EQ(r.info().width, 341);
  EXPECT_EQ(r.info().height, 255);
  EXPECT_EQ(r.info().pixel_format, "yuv444p");
  EXPECT_EQ(r.info().channels, 2);
  for (int dim : {0, 97}) {
    WindowSpec w;
    w.num_frames = 10, w.image_dim = dim;
    const Clip c = r.read_window(w);
    EXPECT_EQ(c.width, dim ? dim : 341);
    EXPECT_EQ(c.height, dim ? dim : 255);
    double mean[3] = {};
    for (size_t i = 0; i < c.video.size(); ++i) mean[i % 3] += c.video[i];
    for (int ch = 0; ch < 3; ++ch) EXPECT_NEAR(mean[ch] / (c.video.size() / 3), s.solid[ch], 3.0);
  }
}

TEST(VideoReader, MjpegYuvj422OddSizeAt30FpsFromTheCommandLine) {
  const auto path = fixtures::ffmpeg_clip(
      "mjpeg321.avi", "-f lavfi -i testsrc=size=321x241:rate=30 -t 1 -c:v mjpeg -pix_fmt yuvj422p");
  auto r = VideoReader::open(path);
  EXPECT_EQ(r.info().pixel_format, "yuvj422p");
  EXPECT_EQ(r.info().width, 321);
  WindowSpec w;
  w.num_frames = 25, w.image_dim = 64;
  const Clip c = r.read_window(w);
  EXPECT_EQ(c.padded_frames, 0);
  EXPECT_EQ(c.padded_samples, 25 * 1920);  // no audio track
}

TEST(VideoReader, ClipWithoutAudioGivesCountedSilence) {
  auto r = VideoReader::open(seq30());
  EXPECT_FALSE(r.info().has_audio);
  EXPECT_EQ(r.info().sample_rate, 0);
  WindowSpec w;
  w.num_frames = 16, w.image_dim = 32;
  const Clip c = r.read_window(w);
  ASSERT_EQ(c.audio.size(), size_t(16 * 1920));
  EXPECT_EQ(c.padded_samples, 16 * 1920);
  for (float v : c.audio) ASSERT_EQ(v, 0.0f);
}

TEST(VideoReader, ClipShorterThanTheWindowIsPaddedAndCounted) {
  ClipSpec s;
  s.frames = 5, s.click_s = 10;
  auto r = VideoReader::open(fixtures::clip("short5.mp4", s));
  const Clip c = r.read_window(native(0, 16));
  EXPECT_EQ(c.padded_frames, 11);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(code(c, i), std::min(i, 4));
  ASSERT_EQ(c.audio.size(), size_t(16 * 1920));
  EXPECT_NEAR(double(c.padded_samples), 11.0 * 1920, 1024.0);
}

TEST(VideoReader, WindowAfterTheLastFrameIsAnError) {
  auto r = VideoReader::open(seq25());
  EXPECT_THROW(r.read_window(native(5.0, 4)), Error);
  // A window that starts on the last frame is fine and padded.
  const Clip c = r.read_window(native(74 / 25.0, 4));
  EXPECT_EQ(c.padded_frames, 3);
  EXPECT_EQ(code(c, 0), 74);
}

std::filesystem::path vp9_opus() {
  ClipSpec s;
  s.video_codec = "libvpx-vp9", s.audio_codec = "libopus", s.crf = 20, s.frames = 50;
  return fixtures::clip("vp9.webm", s);
}

TEST(VideoReader, Vp9OpusInWebm) {
  auto r = VideoReader::open(vp9_opus());
  EXPECT_EQ(r.info().video_codec, "vp9");
  EXPECT_EQ(r.info().audio_codec, "opus");
  EXPECT_NE(r.info().container.find("webm"), std::string::npos);
  const Clip all = r.read_window(native(0, 50));
  for (int i = 0; i < 50; ++i) EXPECT_EQ(code(all, i), i);
  const Clip w = r.read_window(native(0.8, 8));
  for (int i = 0; i < 8; ++i)
    EXPECT_EQ(std::memcmp(frame(w, i), frame(all, 20 + i), size_t(320) * 240 * 3), 0) << "frame " << i;
  // The WebM muxer shifts all timestamps by the Opus pre-skip (312 samples, stored as 7 ms) to
  // keep them non-negative, so in the file the click is 7 ms before video frame 25.
  EXPECT_NEAR(double(fixtures::first_above(w.audio, 0.3f)), 9600.0 - 0.007 * 48000, 48.0);
}

// The audio of a window after a seek equals the same span of a sequential decode (the reader
// decodes enough audio before the window for the decoder's overlap and pre-roll). Up to
// `max_lag` samples of shift are allowed where the container's timestamps are coarser than a
// sample (Matroska: 1 ms = 48 samples).
void expect_window_audio_matches_sequential(const std::filesystem::path& path, int max_lag, float tolerance) {
  auto r = VideoReader::open(path);
  WindowSpec all;
  all.num_frames = int(r.info().frame_count), all.image_dim = 16;
  const Clip full = r.read_window(all);
  for (int first : {20, 7, 33}) {
    WindowSpec w = all;
    w.start_s = first / 25.0, w.num_frames = 16;
    const Clip c = r.read_window(w);
    ASSERT_EQ(c.padded_samples, 0);
    float best = 1e9f;
    for (int lag = -max_lag; lag <= max_lag; ++lag) {
      float worst = 0;
      for (size_t k = size_t(max_lag); k + size_t(max_lag) < c.audio.size(); ++k)
        worst = std::max(worst, std::fabs(c.audio[k] - full.audio[size_t(first * 1920 + lag) + k]));
      best = std::min(best, worst);
    }
    EXPECT_LE(best, tolerance) << "window at frame " << first;
  }
}

TEST(VideoReader, WindowAudioMatchesSequentialDecodeAac) {
  expect_window_audio_matches_sequential(seq25(), 0, 1e-6f);
}

TEST(VideoReader, WindowAudioMatchesSequentialDecodeOpus) {
  expect_window_audio_matches_sequential(vp9_opus(), 24, 2e-2f);
}

TEST(VideoReader, ReaderStillWorksAfterAMove) {
  auto a = VideoReader::open(seq25());
  VideoReader b = std::move(a);
  const Clip c = b.read_window(native(1.0, 2));
  EXPECT_EQ(code(c, 0), 25);
}

TEST(VideoReader, RejectsBadWindowSpecs) {
  auto r = VideoReader::open(seq25());
  WindowSpec w;
  w.num_frames = 0;
  EXPECT_THROW(r.read_window(w), Error);
  w = WindowSpec{};
  w.fps = 0;
  EXPECT_THROW(r.read_window(w), Error);
  w = WindowSpec{};
  w.start_s = -1;
  EXPECT_THROW(r.read_window(w), Error);
}

}  // namespace
}  // namespace perceiver
