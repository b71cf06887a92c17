// The synthetic Kinetics set: layout and CSVs, byte-identical output for the same seed, clip
// properties, and classes that differ in picture and sound.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <numbers>
#include <set>

#include "media/synthetic.h"
#include "media/video_reader.h"
#include "media_fixtures.h"
#include "perceiver/error.h"

namespace perceiver {
namespace {

constexpr int kClasses = 3, kClipsPerClass = 2;

// A set made once per build tree (made in a temporary directory, then renamed into place).
std::filesystem::path cached_set() {
  const auto dir = fixtures::dir() / "synthetic_k3_seed7";
  if (!std::filesystem::exists(dir)) {
    const auto tmp = fixtures::dir() / ("synthetic_tmp_" + std::to_string(::getpid()));
    make_synthetic_kinetics(tmp, kClasses, kClipsPerClass, 7);
    std::error_code ec;
    std::filesystem::rename(tmp, dir, ec);
    if (ec) std::filesystem::remove_all(tmp);  // another test process won the race
  }
  return dir;
}

struct Row {
  std::string label, id, split;
  int start = 0, end = 0;
};

// Minimal reader for the generator's own CSV (the full parser with its edge cases is the
// Kinetics index's job).
std::vector<Row> read_csv(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "label,youtube_id,time_start,time_end,split");
  std::vector<Row> rows;
  while (std::getline(in, line)) {
    Row r;
    size_t pos = 0;
    if (line[0] == '"') {
      pos = line.find('"', 1);
      r.label = line.substr(1, pos - 1);
      pos += 2;
    } else {
      pos = line.find(',');
      r.label = line.substr(0, pos++);
    }
    std::istringstream rest(line.substr(pos));
    std::string start, end;
    std::getline(rest, r.id, ',');
    std::getline(rest, start, ',');
    std::getline(rest, end, ',');
    std::getline(rest, r.split);
    r.start = std::stoi(start), r.end = std::stoi(end);
    rows.push_back(r);
  }
  return rows;
}

std::filesystem::path clip_path(const std::filesystem::path& root, const std::string& folder, const Row& r) {
  char name[64];
  std::snprintf(name, sizeof name, "%s_%06d_%06d.mp4", r.id.c_str(), r.start, r.end);
  return root / folder / r.label / name;
}

// Relative path -> bytes of every file under root.
std::map<std::string, std::string> tree(const std::filesystem::path& root) {
  std::map<std::string, std::string> out;
  for (const auto& e : std::filesystem::recursive_directory_iterator(root))
    if (e.is_regular_file()) out[std::filesystem::relative(e.path(), root).string()] = fixtures::read_bytes(e.path());
  return out;
}

TEST(Synthetic, KineticsLayoutAndAnnotations) {
  const auto root = cached_set();
  const auto classes = synthetic_classes(kClasses);
  const auto train = read_csv(root / "annotations" / "train.csv");
  const auto val = read_csv(root / "annotations" / "validate.csv");
  EXPECT_EQ(train.size(), size_t(kClasses * kClipsPerClass));
  EXPECT_EQ(val.size(), size_t(kClasses));  // max(1, N / 5) per class
  std::set<std::string> ids;
  for (const auto& [rows, folder, split] : {std::tuple{train, "train", "train"}, std::tuple{val, "val", "val"}}) {
    for (const Row& r : rows) {
      EXPECT_EQ(r.split, split);
      EXPECT_EQ(r.id.size(), 11u);
      EXPECT_EQ(r.end - r.start, 3);  // ceil(2.56 s)
      EXPECT_TRUE(std::filesystem::is_regular_file(clip_path(root, folder, r))) << clip_path(root, folder, r);
      EXPECT_TRUE(ids.insert(r.id).second) << "duplicate id " << r.id;
    }
  }
  EXPECT_EQ(classes[3 % kClasses].label.substr(0, 8), "class 00");
  EXPECT_EQ(train.front().label, classes[0].label);
  EXPECT_NE(train.front().label.find(' '), std::string::npos);
  // Labels sort in class order, and no temporary files are left behind.
  for (int k = 1; k < kClasses; ++k) EXPECT_LT(classes[size_t(k - 1)].label, classes[size_t(k)].label);
  for (const auto& [rel, bytes] : tree(root)) EXPECT_EQ(rel.find(".tmp"), std::string::npos) << rel;
}

TEST(Synthetic, ClipsHaveTheDefaultFormat) {
  const auto root = cached_set();
  const Row r = read_csv(root / "annotations" / "train.csv").front();
  auto reader = VideoReader::open(clip_path(root, "train", r));
  const MediaInfo& m = reader.info();
  EXPECT_EQ(m.width, 340);
  EXPECT_EQ(m.height, 256);
  EXPECT_DOUBLE_EQ(m.fps, 25.0);
  EXPECT_EQ(m.frame_count, 64);
  EXPECT_NEAR(m.duration_s, 2.56, 0.01);
  EXPECT_EQ(m.video_codec, "h264");
  EXPECT_EQ(m.audio_codec, "aac");
  EXPECT_EQ(m.sample_rate, 48000);
  EXPECT_EQ(m.channels, 1);
}

// The second run fills every fresh heap block with a pattern (glibc's M_PERTURB), so bytes that
// depend on uninitialized memory anywhere in the writer or the codecs show up as a difference
// instead of passing by luck. (libx264's AVX-512 macroblock-tree code reads such memory; the
// writer turns mbtree off for deterministic output.)
TEST(Synthetic, SameSeedGivesIdenticalBytesAndOtherSeedsDiffer) {
  SyntheticOptions small;
  small.num_frames = 20, small.audio_channels = 2;
  const auto base = fixtures::dir() / ("synthetic_det_" + std::to_string(::getpid()));
  make_synthetic_kinetics(base / "a", 2, 2, 123, small);
  fixtures::perturb_fresh_heap_blocks(0x5a);
  make_synthetic_kinetics(base / "b", 2, 2, 123, small);
  fixtures::perturb_fresh_heap_blocks(0);
  make_synthetic_kinetics(base / "c", 2, 2, 124, small);
  const auto a = tree(base / "a"), b = tree(base / "b"), c = tree(base / "c");
  ASSERT_EQ(a.size(), size_t(2 + 2 * 2 + 2));  // 2 CSVs, 4 train clips, 2 val clips
  for (const auto& [rel, bytes] : a) {
    ASSERT_TRUE(b.count(rel)) << rel << " only in the first run";
    EXPECT_TRUE(bytes == b.at(rel)) << rel << " differs between two runs with the same seed";
  }
  EXPECT_NE(a.at("annotations/train.csv"), c.at("annotations/train.csv"));
  std::filesystem::remove_all(base);
}

double goertzel_power(const std::vector<float>& x, double f, int rate) {
  const double w = 2 * std::numbers::pi * f / rate, coeff = 2 * std::cos(w);
  double s1 = 0, s2 = 0;
  for (float v : x) {
    const double s0 = v + coeff * s1 - s2;
    s2 = s1, s1 = s0;
  }
  return s1 * s1 + s2 * s2 - coeff * s1 * s2;
}

// Each clip's shape colour (mean of the bright pixels; backgrounds stay below 71) is nearest to
// its own class colour, its loudest class tone is its own, and the class mean colours differ.
TEST(Synthetic, ClassesDifferInPictureAndSound) {
  const auto root = cached_set();
  const auto classes = synthetic_classes(kClasses);
  std::map<std::string, int> class_of;
  for (int k = 0; k < kClasses; ++k) class_of[classes[size_t(k)].label] = k;
  std::vector<std::array<double, 3>> class_mean(kClasses, {0, 0, 0});
  for (const Row& r : read_csv(root / "annotations" / "train.csv")) {
    const int k = class_of.at(r.label);
    auto reader = VideoReader::open(clip_path(root, "train", r));
    WindowSpec w;
    w.start_s = 0.5, w.num_frames = 16, w.image_dim = 96;
    const Clip c = reader.read_window(w);
    double sum[3] = {}, n = 0;
    for (size_t p = 0; p < c.video.size(); p += 3) {
      if (std::max({c.video[p], c.video[p + 1], c.video[p + 2]}) < 120) continue;
      for (int ch = 0; ch < 3; ++ch) sum[ch] += c.video[p + size_t(ch)];
      n += 1;
    }
    ASSERT_GT(n, 100) << "no shape visible in " << r.id;
    int nearest = -1, loudest = -1;
    double best_d = 1e18, best_p = -1;
    for (int j = 0; j < kClasses; ++j) {
      double d = 0;
      for (int ch = 0; ch < 3; ++ch) d += std::pow(sum[ch] / n - classes[size_t(j)].rgb[ch], 2);
      if (d < best_d) best_d = d, nearest = j;
      const double p = goertzel_power(c.audio, classes[size_t(j)].tone_hz[0], 48000);
      if (p > best_p) best_p = p, loudest = j;
    }
    EXPECT_EQ(nearest, k) << r.id << " looks like class " << nearest;
    EXPECT_EQ(loudest, k) << r.id << " sounds like class " << loudest;
    for (int ch = 0; ch < 3; ++ch) class_mean[size_t(k)][size_t(ch)] += sum[ch] / n / kClipsPerClass;
  }
  for (int i = 0; i < kClasses; ++i)
    for (int j = i + 1; j < kClasses; ++j) {
      double d = 0;
      for (int ch = 0; ch < 3; ++ch) d += std::fabs(class_mean[size_t(i)][size_t(ch)] - class_mean[size_t(j)][size_t(ch)]);
      EXPECT_GT(d, 60.0) << "classes " << i << " and " << j << " have similar colours";
    }
}

// Shape edges ramp over edge_softness of the short side: with a ramp of 5% (6.4 px of 128) the
// first frame holds over twice as many pixels between background and shape as with the
// 1-px edge of edge_softness 0 (same seed, so the same shape at the same place).
TEST(Synthetic, EdgesRampOverEdgeSoftness) {
  const auto base = fixtures::dir() / ("synthetic_edge_" + std::to_string(::getpid()));
  auto mid_pixels = [&](double softness) {
    SyntheticOptions o;
    o.width = o.height = 128, o.num_frames = 2, o.edge_softness = softness;
    const auto dir = base / std::to_string(softness);
    make_synthetic_kinetics(dir, 1, 1, 11, o);
    const Row r = read_csv(dir / "annotations" / "train.csv").at(0);
    auto reader = VideoReader::open(clip_path(dir, "train", r));
    WindowSpec w;
    w.start_s = 0, w.num_frames = 1, w.image_dim = 128;
    const Clip c = reader.read_window(w);
    int n = 0;  // background channels stay below 71, the class-0 red reaches 242
    for (size_t p = 0; p < c.video.size(); p += 3) {
      const double v = std::max({c.video[p], c.video[p + 1], c.video[p + 2]});
      n += v > 100 && v < 200;
    }
    return n;
  };
  const int hard = mid_pixels(0.0), soft = mid_pixels(0.05);
  std::printf("pixels between background and shape: %d with a 1-px edge, %d with a 5%% ramp\n", hard, soft);
  EXPECT_GT(hard, 0);
  EXPECT_GT(soft, 2 * hard);  // 145 and 454 when written
  std::filesystem::remove_all(base);
}

TEST(Synthetic, BadArgumentsAreErrors) {
  EXPECT_THROW(make_synthetic_kinetics(fixtures::dir() / "never", 0, 1, 1), Error);
  SyntheticOptions odd;
  odd.width = 341;
  EXPECT_THROW(make_synthetic_kinetics(fixtures::dir() / "never", 2, 1, 1, odd), Error);
  SyntheticOptions blurred;
  blurred.edge_softness = 0.5;
  EXPECT_THROW(make_synthetic_kinetics(fixtures::dir() / "never", 2, 1, 1, blurred), Error);
}

}  // namespace
}  // namespace perceiver
