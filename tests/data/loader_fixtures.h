// What the loader's tests share (tests/data/test_loader.cpp on shards in every build,
// test_video_loader.cpp on videos with media): the options for the small 12-clip set, batches of
// 5, 5 and 2, and a batch-by-batch comparison.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>

#include "data/loader.h"

namespace fixtures {

inline perceiver::LoaderOptions small_set_options(const std::filesystem::path& train_shards, int workers,
                                                  bool augment) {
  perceiver::LoaderOptions o;
  o.shard_dir = train_shards;
  o.sampler.seed = 5, o.sampler.batch_size = 5;  // 12 clips: batches of 5, 5, 2
  o.num_frames = augment ? 6 : 8, o.image_dim = augment ? 24 : 32;
  o.num_workers = workers, o.augment = augment;
  return o;
}

inline void expect_same(const perceiver::Batch& a, const perceiver::Batch& b) {
  EXPECT_EQ(a.position, b.position);
  EXPECT_EQ(a.clip, b.clip);
  EXPECT_EQ(a.label, b.label);
  EXPECT_TRUE(a.video == b.video) << "video of batch " << a.position.epoch << "/" << a.position.batch;
  EXPECT_TRUE(a.audio == b.audio);
}

}  // namespace fixtures
