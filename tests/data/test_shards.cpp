// HDF5 shards: bit-exact round trip (compressed and not), partial frame reads, deterministic
// bytes, empty shards, h5py can read what we write, and damaged files are refused.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <thread>

#include "core/rng.h"
#include "data/shards.h"
#include "io/hdf5_file.h"
#include "fixtures.h"
#include "perceiver/error.h"

namespace perceiver {
namespace {

namespace fs = std::filesystem;

ShardMeta small_meta(int level) {
  ShardMeta m;
  m.split = "train", m.fps = 25, m.sample_rate = 8000, m.num_frames = 4, m.image_dim = 16;
  m.class_names = {"a, b", "c \"d\"", "e"};
  m.plan = "plan-1", m.deflate_level = level;
  return m;
}

struct Raw {
  std::vector<uint8_t> video;
  std::vector<float> audio;
};

// Smooth-ish content (so deflate has something to do) plus noise (so it cannot cheat).
Raw random_clip(const ShardMeta& m, uint64_t i) {
  RngStream rng(5, RngPurpose::kTest, i);
  Raw r;
  r.video.resize(size_t(m.num_frames * m.frame_bytes()));
  for (size_t k = 0; k < r.video.size(); ++k) r.video[k] = uint8_t(k / 7 + (rng.next_u32() & 3));
  r.audio.resize(size_t(m.audio_samples()));
  for (auto& a : r.audio) a = float(rng.normal());
  return r;
}

std::vector<EncodedClip> encode_all(const ShardMeta& m, const std::vector<Raw>& raws) {
  std::vector<EncodedClip> out;
  for (size_t i = 0; i < raws.size(); ++i) {
    EncodedClip e = encode_clip(m, raws[i].video.data(), raws[i].audio.data());
    e.label = int32_t(i % 3), e.youtube_id = "id" + std::to_string(i), e.time_start = int64_t(i);
    e.time_end = int64_t(i) + 10, e.window_start_s = 0.5, e.padded_frames = int32_t(i), e.padded_samples = 7;
    out.push_back(std::move(e));
  }
  return out;
}

fs::path tmp_file(const std::string& name) { return fixtures::dir() / (name + "_" + std::to_string(::getpid()) + ".h5"); }

class ShardRoundTrip : public ::testing::TestWithParam<int> {};

TEST_P(ShardRoundTrip, BitExact) {
  const ShardMeta m = small_meta(GetParam());
  std::vector<Raw> raws;
  for (int i = 0; i < 3; ++i) raws.push_back(random_clip(m, uint64_t(i)));
  const std::vector<SkippedClip> skipped = {{"bad\tid", 1, 11, "decoder said: no\nreally"}};
  const fs::path p = tmp_file("shard_rt_" + std::to_string(GetParam()));
  write_shard(p, m, encode_all(m, raws), skipped);
  EXPECT_FALSE(fs::exists(p.string() + ".tmp"));

  const ShardReader r = ShardReader::open(p);
  const ShardIndex& ix = r.index();
  ASSERT_EQ(ix.size(), 3);
  EXPECT_EQ(ix.meta.class_names, m.class_names);
  EXPECT_EQ(ix.meta.plan, "plan-1");
  EXPECT_EQ(ix.meta.audio_samples(), 1280);
  EXPECT_EQ(ix.label, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(ix.youtube_id[2], "id2");
  EXPECT_EQ(ix.time_end[1], 11);
  ASSERT_EQ(ix.skipped.size(), 1u);
  EXPECT_EQ(ix.skipped[0].reason, skipped[0].reason);
  EXPECT_EQ(ix.skipped[0].youtube_id, skipped[0].youtube_id);
  for (int i = 0; i < 3; ++i) {
    std::vector<uint8_t> v(raws[0].video.size());
    std::vector<float> a(raws[0].audio.size());
    r.read_clip(i, 0, m.num_frames, v.data(), a.data());
    EXPECT_EQ(v, raws[size_t(i)].video) << "clip " << i;
    EXPECT_EQ(0, std::memcmp(a.data(), raws[size_t(i)].audio.data(), a.size() * sizeof(float))) << "clip " << i;
  }
  // Frames [1, 3) and the audio of those frames only.
  std::vector<uint8_t> v(size_t(2 * m.frame_bytes()));
  std::vector<float> a(640);
  r.read_clip(1, 1, 2, v.data(), a.data());
  EXPECT_TRUE(std::equal(v.begin(), v.end(), raws[1].video.begin() + m.frame_bytes()));
  EXPECT_TRUE(std::equal(a.begin(), a.end(), raws[1].audio.begin() + 320));
  EXPECT_THROW(r.read_clip(3, 0, 1, v.data(), nullptr), Error);
  EXPECT_THROW(r.read_clip(0, 3, 2, v.data(), nullptr), Error);
  fs::remove(p);
}

INSTANTIATE_TEST_SUITE_P(Deflate, ShardRoundTrip, ::testing::Values(0, 1, 6));

TEST(Shards, SameInputSameBytes) {
  const ShardMeta m = small_meta(1);
  std::vector<Raw> raws = {random_clip(m, 0), random_clip(m, 1)};
  const fs::path a = tmp_file("shard_det_a"), b = tmp_file("shard_det_b");
  write_shard(a, m, encode_all(m, raws), {});
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));  // a timestamp would now differ
  write_shard(b, m, encode_all(m, raws), {});
  EXPECT_TRUE(fixtures::read_bytes(a) == fixtures::read_bytes(b)) << "shard bytes differ between two writes";
  fs::remove(a), fs::remove(b);
}

TEST(Shards, EmptyShardRoundTrips) {
  const ShardMeta m = small_meta(1);
  const fs::path p = tmp_file("shard_empty");
  write_shard(p, m, {}, {{"x", 0, 10, "missing"}});
  const ShardReader r = ShardReader::open(p);
  EXPECT_EQ(r.index().size(), 0);
  EXPECT_EQ(r.index().skipped.size(), 1u);
  fs::remove(p);
}

TEST(Shards, DamagedFilesAreRefusedWithTheirName) {
  const ShardMeta m = small_meta(1);
  const fs::path p = tmp_file("shard_trunc");
  write_shard(p, m, encode_all(m, {random_clip(m, 0)}), {});
  const std::string bytes = fixtures::read_bytes(p);
  const auto trunc = fixtures::file("shard_truncated.h5", bytes.substr(0, bytes.size() / 2));
  const auto text = fixtures::file("shard_text.h5", "not a shard");
  for (const fs::path& bad : {trunc, text, fixtures::dir() / "no_such_shard.h5"}) {
    try {
      ShardReader::open(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(bad.filename().string()), std::string::npos) << e.what();
    }
  }
  fs::remove(p);
}

// Issue 15: shard attributes are range-checked and read as what they must hold (an array
// where one number belongs was read whole into one variable), and labels index the classes.
TEST(Shards, AttributesAndLabelsOutOfRangeAreRefusedByName) {
  const ShardMeta m = small_meta(1);
  const fs::path good = tmp_file("shard_ranges");
  write_shard(good, m, encode_all(m, {random_clip(m, 0), random_clip(m, 1)}), {});
  int n = 0;
  auto expect_refused = [&](const std::function<void(H5File&)>& damage, const std::string& want) {
    const fs::path p = tmp_file("shard_bad_" + std::to_string(n++));
    fs::copy_file(good, p, fs::copy_options::overwrite_existing);
    {
      H5File f = H5File::open(p.string(), /*writable=*/true);
      damage(f);
    }
    try {
      ShardReader::open(p);
      ADD_FAILURE() << "accepted; wanted: " << want;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(p.string() + ": " + want), std::string::npos) << e.what();
    }
    fs::remove(p);
  };
  for (double fps : {0.0, -25.0, 1e9, std::nan("")})
    expect_refused([&](H5File& f) { f.set_attr("/", "fps", fps); }, "shard attribute fps is ");
  expect_refused([](H5File& f) { f.set_attr("/", "num_frames", int64_t(1) << 40); },
                 "shard attribute num_frames is 1099511627776, outside [1, 10000]");
  expect_refused([](H5File& f) { f.set_attr("/", "sample_rate", int64_t(7)); },
                 "shard attribute sample_rate is 7, outside [1000, 384000]");
  expect_refused([](H5File& f) { f.set_attr("/", "num_classes", int64_t(5)); },
                 "num_classes is 5 but class_names holds 3 names");
  expect_refused(
      [](H5File& f) {
        H5Adelete(f.id(), "num_clips");
        const hsize_t dims = 4000;
        const hid_t space = H5Screate_simple(1, &dims, nullptr);
        const std::vector<int64_t> v(dims, 2);
        const hid_t a = H5Acreate2(f.id(), "num_clips", H5T_NATIVE_INT64, space, H5P_DEFAULT, H5P_DEFAULT);
        H5Awrite(a, H5T_NATIVE_INT64, v.data());
        H5Aclose(a);
        H5Sclose(space);
      },
      "attribute 'num_clips' on '/' must be one integer, found 4000 integers");
  expect_refused(
      [](H5File& f) {
        const int32_t labels[2] = {1, 3};  // 3 classes: 3 is one past the end
        H5Handle ds = f.dataset("label");
        H5Dwrite(ds.get(), H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, labels);
      },
      "clip 1 has label 3, outside [-1, 3)");
  fs::remove(good);
}

TEST(Shards, ReadableWithH5py) {
  const ShardMeta m = small_meta(1);
  std::vector<Raw> raws = {random_clip(m, 0), random_clip(m, 1)};
  const fs::path p = tmp_file("shard_h5py");
  write_shard(p, m, encode_all(m, raws), {{"gone", 3, 13, "missing"}});
  const fs::path script = fixtures::dir() / "read_shard.py";
  {
    std::FILE* f = std::fopen(script.c_str(), "w");
    std::fputs(
        "import sys, h5py, numpy as np\n"
        "f = h5py.File(sys.argv[1], 'r')\n"
        "v, a = f['video'][:], f['audio'][:]\n"
        "assert v.shape == (2, 4, 16, 16, 3) and v.dtype == np.uint8, v.shape\n"
        "assert a.shape == (2, 1280) and a.dtype == np.float32\n"
        "print(int(v.astype(np.int64).sum()), repr(float(a.astype(np.float64).sum())))\n"
        "print(list(f['label'][:]), [s.decode() for s in f['youtube_id'][:]])\n"
        "print(f.attrs['format_version'], f.attrs['fps'], f.attrs['sample_rate'], f.attrs['num_frames'],\n"
        "      f.attrs['image_dim'], f.attrs['split'])\n"
        "print('|'.join(str(s) for s in f.attrs['class_names']))\n"
        "print([s.decode() for s in f['skipped_youtube_id'][:]], list(f['skipped_time_end'][:]))\n",
        f);
    std::fclose(f);
  }
  const fs::path out = fixtures::dir() / ("h5py_out_" + std::to_string(::getpid()) + ".txt");
  ASSERT_TRUE(fixtures::run(std::string(PERCEIVER_PYTHON) + " " + script.string() + " " + p.string() + " > " +
                            out.string()))
      << "h5py could not read the shard";
  int64_t vsum = 0;
  double asum = 0;
  for (const Raw& r : raws) {
    for (uint8_t x : r.video) vsum += x;
    for (float x : r.audio) asum += double(x);
  }
  char expect[256];
  std::snprintf(expect, sizeof expect, "%lld ", static_cast<long long>(vsum));
  const std::string got = fixtures::read_bytes(out);
  EXPECT_EQ(got.rfind(expect, 0), 0u) << got;
  EXPECT_NE(got.find("[0, 1] ['id0', 'id1']"), std::string::npos) << got;
  EXPECT_NE(got.find("1 25.0 8000 4 16 train"), std::string::npos) << got;
  EXPECT_NE(got.find("a, b|c \"d\"|e"), std::string::npos) << got;
  EXPECT_NE(got.find("['gone'] [13]"), std::string::npos) << got;
  fs::remove(p), fs::remove(out);
}

}  // namespace
}  // namespace perceiver
