// The loader's video source (media component): a prepared set and its videos give the same
// batches, and a clip that does not decode is skipped and counted as perceiver-prep skips it.
#include <gtest/gtest.h>

#include <fstream>

#include "data/loader.h"
#include "loader_fixtures.h"
#include "perceiver/error.h"
#include "perceiver/media.h"
#include "prep_fixtures.h"

namespace perceiver {
namespace {

namespace fs = std::filesystem;

// The media component serves data_source videos once registered, as the apps do in main().
const bool kRegistered = (register_media(), true);

LoaderOptions shard_options(int workers, bool augment) {
  return fixtures::small_set_options(fixtures::prepared_small_set() / "train", workers, augment);
}

using fixtures::expect_same;

TEST(Loader, VideosGiveTheSameBatchesAsShards) {
  LoaderOptions o = shard_options(2, false);
  o.num_epochs = 1;
  LoaderOptions v = o;
  v.source = LoaderSource::kVideos;
  v.dataset_dir = fixtures::small_synthetic_set();
  Loader from_shards(o), from_videos(v);
  int batches = 0;
  while (auto s = from_shards.next()) {
    expect_same(*s, *from_videos.next());
    ++batches;
  }
  EXPECT_EQ(batches, 3);
  EXPECT_FALSE(from_videos.next().has_value());
}

TEST(Loader, BrokenVideosAreSkippedAndCountedLikePrep) {
  const fs::path data = fixtures::copy_tree(fixtures::small_synthetic_set(), "loader_broken");
  const KineticsIndex idx = index_kinetics(data, KineticsSplit::kTrain);
  std::ofstream(idx.clips[3].path, std::ios::binary) << "not a video";
  LoaderOptions o;
  o.source = LoaderSource::kVideos;
  o.dataset_dir = data;
  o.sampler.shuffle = false, o.sampler.batch_size = 2;
  o.num_frames = 4, o.image_dim = 16, o.num_workers = 2;
  {
    Loader l(o);
    EXPECT_EQ(l.next()->clip, (std::vector<int64_t>{0, 1}));
    const Batch b = *l.next();  // clips 2 and 3: 3 does not decode
    EXPECT_EQ(b.clip, (std::vector<int64_t>{2}));
    EXPECT_EQ(b.size, 1);
    EXPECT_EQ(b.label.size(), 1u);
    EXPECT_EQ(b.video.size(), size_t(4 * 16 * 16 * 3));
    EXPECT_EQ(b.audio.size(), size_t(b.audio_samples));
    ASSERT_EQ(b.skipped.size(), 1u);
    EXPECT_EQ(b.skipped[0].clip, 3);
    EXPECT_TRUE(b.skipped[0].first_time);
    EXPECT_EQ(b.skipped[0].path, idx.clips[3].path.string());
    EXPECT_EQ(b.skipped[0].row.youtube_id, idx.clips[3].youtube_id);
    EXPECT_FALSE(b.skipped[0].row.reason.empty());
    EXPECT_EQ(l.unusable_clips(), 1);
    // The clip that remains is the one a loader of the intact set gives.
    LoaderOptions intact = o;
    intact.dataset_dir = fixtures::small_synthetic_set();
    Loader good(intact);
    good.seek({0, 1});
    const Batch g = *good.next();
    EXPECT_TRUE(std::equal(b.video.begin(), b.video.end(), g.video.begin()));
    EXPECT_EQ(l.next()->clip, (std::vector<int64_t>{4, 5}));  // the run goes on
    l.seek({1, 1});  // next epoch: skipped again, counted once
    const Batch again = *l.next();
    ASSERT_EQ(again.skipped.size(), 1u);
    EXPECT_FALSE(again.skipped[0].first_time);
    EXPECT_EQ(l.unusable_clips(), 1);
  }  // destroyed with batches in flight: joins, does not throw
  fs::remove_all(data);
}

}  // namespace
}  // namespace perceiver
