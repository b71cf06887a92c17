// Sampler and loader: every clip exactly once per epoch across ranks, positions that restore
// exactly, identical batches for any number of workers, shards equal to decoding the videos,
// deterministic augmentation, the same input for a clip wherever it lands (audio resampled to
// the model's length), broken videos skipped and counted, and loader threads on their cores.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "data/audio_resample.h"
#include "data/loader.h"
#include "perceiver/threads.h"
#include "perceiver/error.h"
#include "prep_fixtures.h"

namespace perceiver {
namespace {

namespace fs = std::filesystem;

TEST(Sampler, EveryClipOncePerEpochAcrossRanks) {
  for (int64_t n : {1, 7, 10, 64})
    for (int w : {1, 2, 3, 4})
      for (int64_t b : {1, 3})
        for (bool drop : {false, true}) {
          SamplerOptions so;
          so.seed = 9, so.batch_size = b, so.world_size = w, so.drop_last = drop;
          if (drop && n < b * w) {
            EXPECT_THROW(Sampler(n, so), Error);
            continue;
          }
          for (int64_t epoch : {0, 1}) {
            std::multiset<int64_t> seen;
            int64_t steps = -1;
            for (int r = 0; r < w; ++r) {
              so.rank = r;
              const Sampler s(n, so);
              if (steps >= 0) {
                EXPECT_EQ(s.batches_per_epoch(), steps);  // same step count on every rank
              }
              steps = s.batches_per_epoch();
              for (int64_t k = 0; k < steps; ++k) {
                const auto items = s.batch({epoch, k});
                EXPECT_LE(int64_t(items.size()), b);
                if (drop) {
                  EXPECT_EQ(int64_t(items.size()), b);
                }
                seen.insert(items.begin(), items.end());
              }
            }
            const int64_t expect = drop ? n / (b * w) * b * w : n;
            EXPECT_EQ(int64_t(seen.size()), expect) << n << " " << w << " " << b << " " << drop;
            EXPECT_EQ(int64_t(std::set<int64_t>(seen.begin(), seen.end()).size()), expect) << "a clip came twice";
          }
        }
}

TEST(Sampler, ShuffleDependsOnSeedAndEpochOnly) {
  SamplerOptions so;
  so.seed = 3;
  const Sampler a(100, so), b(100, so);
  EXPECT_EQ(a.epoch_order(4), b.epoch_order(4));
  EXPECT_NE(a.epoch_order(4), a.epoch_order(5));
  so.seed = 4;
  EXPECT_NE(Sampler(100, so).epoch_order(4), a.epoch_order(4));
  so.shuffle = false;
  EXPECT_EQ(Sampler(5, so).epoch_order(7), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(a.after({2, 99}), (SamplerPosition{3, 0}));
}

LoaderOptions shard_options(int workers, bool augment) {
  LoaderOptions o;
  o.shard_dir = fixtures::prepared_small_set() / "train";
  o.sampler.seed = 5, o.sampler.batch_size = 5;  // 12 clips: batches of 5, 5, 2
  o.num_frames = augment ? 6 : 8, o.image_dim = augment ? 24 : 32;
  o.num_workers = workers, o.augment = augment;
  return o;
}

void expect_same(const Batch& a, const Batch& b) {
  EXPECT_EQ(a.position, b.position);
  EXPECT_EQ(a.clip, b.clip);
  EXPECT_EQ(a.label, b.label);
  EXPECT_TRUE(a.video == b.video) << "video of batch " << a.position.epoch << "/" << a.position.batch;
  EXPECT_TRUE(a.audio == b.audio);
}

TEST(Loader, BatchesInTheModelsLayout) {
  Loader l(shard_options(2, false));
  ASSERT_EQ(l.size(), 12);
  EXPECT_EQ(l.sampler().batches_per_epoch(), 3);
  const Batch b = *l.next();
  EXPECT_EQ(b.size, 5);
  EXPECT_EQ(b.video.size(), size_t(5 * 8 * 32 * 32 * 3));
  EXPECT_EQ(b.audio.size(), size_t(5 * 8 * 1920));
  EXPECT_EQ(b.audio_samples, 8 * 1920);
  const auto [lo, hi] = std::minmax_element(b.video.begin(), b.video.end());
  EXPECT_GE(*lo, 0.0f);
  EXPECT_LE(*hi, 1.0f);
  EXPECT_GT(*hi, 0.5f);
  for (size_t j = 0; j < 5; ++j) EXPECT_EQ(b.label[j], l.source().label(b.clip[j]));
  EXPECT_EQ(l.position(), (SamplerPosition{0, 1}));
  EXPECT_EQ(l.source().class_names().size(), 3u);
}

TEST(Loader, PositionRestoresExactlyAndWorkersDoNotMatter) {
  for (bool augment : {false, true}) {
    std::vector<Batch> straight;
    SamplerPosition saved;
    {
      Loader l(shard_options(2, augment));
      for (int k = 0; k < 8; ++k) {  // crosses two epoch boundaries
        if (k == 4) saved = l.position();
        straight.push_back(*l.next());
      }
    }
    EXPECT_EQ(saved, (SamplerPosition{1, 1}));
    EXPECT_TRUE(straight[2].last_in_epoch);
    EXPECT_EQ(straight[2].size, 2);
    Loader resumed(shard_options(3, augment), saved);
    for (int k = 4; k < 8; ++k) expect_same(*resumed.next(), straight[size_t(k)]);
    Loader one(shard_options(1, augment));
    for (int k = 0; k < 8; ++k) expect_same(*one.next(), straight[size_t(k)]);
    one.seek(saved);
    expect_same(*one.next(), straight[4]);
  }
}

TEST(Loader, AugmentationIsKeyedAndChangesTheClips) {
  LoaderOptions o = shard_options(2, true);
  o.sampler.shuffle = false;
  LoaderOptions plain = o;
  plain.augment = false;
  Loader a(o), b(o), c(plain);
  const Batch ba = *a.next(), bb = *b.next(), bc = *c.next();
  EXPECT_TRUE(ba.video == bb.video);
  EXPECT_FALSE(ba.video == bc.video);
  EXPECT_TRUE(ba.audio.size() == bc.audio.size());
  // The next epoch draws new crops for the same clips.
  a.seek({1, 0});
  EXPECT_FALSE(a.next()->video == ba.video);
}

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

// The model's audio length differs from the clip's (48 kHz: 8 × 1920 samples) and its frames
// are a window and a crop of the stored ones: a clip's input must not depend on where the
// clip lands (rank, batch size, place in the batch) or on the worker count.
TEST(Loader, SameClipSameInputWhateverRankBatchAndWorkers) {
  struct Split {
    int world, batch, workers;
  };
  std::map<int64_t, std::pair<std::vector<float>, std::vector<float>>> first;
  for (const Split sp : {Split{1, 4, 1}, Split{1, 3, 3}, Split{2, 2, 2}, Split{3, 1, 1}}) {
    std::map<int64_t, std::pair<std::vector<float>, std::vector<float>>> seen;
    for (int rank = 0; rank < sp.world; ++rank) {
      LoaderOptions o = shard_options(sp.workers, false);
      o.num_frames = 4, o.image_dim = 24, o.audio_samples = 4 * 40;  // 40 samples per frame
      o.sampler.batch_size = sp.batch, o.sampler.world_size = sp.world, o.sampler.rank = rank;
      o.num_epochs = 1;
      Loader l(o);
      while (auto b = l.next()) {
        ASSERT_EQ(b->audio_samples, 160);
        const size_t vs = size_t(4 * 24 * 24 * 3);
        for (int64_t j = 0; j < b->size; ++j)
          seen[b->clip[size_t(j)]] = {{b->video.begin() + long(j * vs), b->video.begin() + long((j + 1) * vs)},
                                      {b->audio.begin() + j * 160, b->audio.begin() + (j + 1) * 160}};
      }
    }
    ASSERT_EQ(seen.size(), 12u) << sp.world << " ranks × " << sp.batch;
    if (first.empty()) first = seen;
    for (const auto& [clip, input] : seen) {
      EXPECT_TRUE(input.first == first[clip].first) << "video of clip " << clip << ", " << sp.world << " × " << sp.batch;
      EXPECT_TRUE(input.second == first[clip].second) << "audio of clip " << clip << ", " << sp.world << " × " << sp.batch;
    }
  }
  // The adapted audio is the clip's own audio resampled (not a neighbour's, not silence).
  LoaderOptions plain = shard_options(1, false);
  plain.num_frames = 4, plain.image_dim = 24, plain.sampler.shuffle = false, plain.sampler.batch_size = 1;
  Loader l(plain);
  const Batch b = *l.next();
  ASSERT_EQ(b.audio_samples, 4 * 1920);
  const std::vector<float> want = detail::resample_to_length(b.audio.data(), b.audio_samples, 160);
  EXPECT_TRUE(want == first[b.clip[0]].second);
  double energy = 0;
  for (float x : want) energy += double(x) * x;
  EXPECT_GT(energy, 1e-3);
}

// Cpus_allowed_list of one of this process's threads.
std::string allowed_cpus(const std::string& tid) {
  std::ifstream in("/proc/self/task/" + tid + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("Cpus_allowed_list:", 0) == 0) return line.substr(line.find_first_not_of(" \t", 18));
  return "";
}

int threads_allowed_exactly(const std::string& cpus) {
  int n = 0;
  for (const auto& e : fs::directory_iterator("/proc/self/task")) n += allowed_cpus(e.path().filename()) == cpus;
  return n;
}

TEST(Loader, WorkersRunOnTheLoaderCoresWhenBound) {
  const int cores = threads::topology().cores;
  if (cores < 2) GTEST_SKIP() << "one core: nothing to separate";
  const threads::CorePlacement p = threads::split_cores({0, 1}, 3);
  EXPECT_EQ(p.compute, (std::vector<int>{0}));
  EXPECT_EQ(p.loader, (std::vector<int>{1}));
  const threads::CorePlacement wide = threads::split_cores({0, 1, 2, 3, 4, 5}, 2);
  EXPECT_EQ(wide.compute, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(wide.loader, (std::vector<int>{4, 5}));
  EXPECT_EQ(threads::split_cores({3}, 2).loader, (std::vector<int>{3}));

  threads::set_loader_cores({cores - 1});
  std::string cpus;
  std::thread([&] {
    threads::bind_loader_thread();
    EXPECT_EQ(threads::current_thread_cores(), (std::vector<int>{cores - 1}));
    cpus = allowed_cpus(std::to_string(::gettid()));
  }).join();
  const int before = threads_allowed_exactly(cpus);
  {
    Loader l(shard_options(3, false));
    l.next();
    int bound = 0;
    for (int i = 0; i < 500 && (bound = threads_allowed_exactly(cpus) - before) < 3; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_EQ(bound, 3) << "loader workers on CPUs " << cpus;
  }
  threads::set_loader_cores({});
}

TEST(Loader, BadOptionsAreClearErrors) {
  LoaderOptions o = shard_options(1, false);
  o.image_dim = 64;  // larger than the stored 32
  EXPECT_THROW(Loader{o}, Error);
  o = shard_options(1, false);
  o.shard_dir = fixtures::dir() / "no_shards_here";
  try {
    Loader l(o);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("HINT: run perceiver-prep"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace perceiver
