// Sampler and loader over shards (the core; every build): every clip exactly once per epoch
// across ranks, positions that restore exactly, identical batches for any number of workers,
// deterministic augmentation, the same input for a clip wherever it lands (audio resampled to
// the model's length), the resampler itself, loader threads on their cores, and videos refused
// in one line where no media component is registered. The video source's tests (videos equal
// their shards, broken videos skipped) are in test_video_loader.cpp (media builds).
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <cmath>
#include <map>
#include <numbers>
#include <set>
#include <thread>

#include "data/audio_length.h"
#include "data/loader.h"
#include "loader_fixtures.h"
#include "data/media_hooks.h"
#include "perceiver/error.h"
#include "perceiver/threads.h"
#include "shard_fixtures.h"

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
  return fixtures::small_set_options(fixtures::small_shard_set() / "train", workers, augment);
}

using fixtures::expect_same;

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

// This process's threads allowed exactly `cpus`, by thread id.
std::set<std::string> threads_allowed_exactly(const std::string& cpus) {
  std::set<std::string> tids;
  for (const auto& e : fs::directory_iterator("/proc/self/task"))
    if (allowed_cpus(e.path().filename()) == cpus) tids.insert(e.path().filename());
  return tids;
}

// Threads allowed exactly `cpus` now that were not in `before`. Counted by id, not by number:
// a joined thread can linger in /proc/self/task for a moment after join() returns, and counting
// it in `before` but not after hides a bound worker (a CI run counted 2 of the 3).
int new_threads_allowed_exactly(const std::string& cpus, const std::set<std::string>& before) {
  int n = 0;
  for (const auto& tid : threads_allowed_exactly(cpus)) n += !before.count(tid);
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
  const std::set<std::string> before = threads_allowed_exactly(cpus);
  {
    Loader l(shard_options(3, false));
    l.next();
    int bound = 0;
    for (int i = 0; i < 500 && (bound = new_threads_allowed_exactly(cpus, before)) < 3; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_EQ(bound, 3) << "loader workers on CPUs " << cpus;
  }
  threads::set_loader_cores({});
}

TEST(Loader, BadOptionsAreClearErrors) {
  LoaderOptions o = shard_options(1, false);
  o.image_dim = 64;  // larger than the stored 32
  try {
    Loader l(o);
    ADD_FAILURE();
  } catch (const Error& e) {  // names the folder, both sizes and how to get the run's
    const std::string m = e.what(), want = "the shards in '" + o.shard_dir.string() + "' hold 8 frames of 32², and "
                                           "this run reads 8 of 64². HINT: prepare them with perceiver-prep "
                                           "--num_frames 8 --image_dim 64";
    EXPECT_NE(m.find(want), std::string::npos) << m;
  }
  o = shard_options(1, false);
  o.shard_dir = fixtures::dir() / "no_shards_here";
  try {
    Loader l(o);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("HINT: run perceiver-prep"), std::string::npos) << e.what();
  }
}

// Where no media component is registered (a build without media, or a program that did not
// register it), the video source is refused with the one line that says so.
TEST(Loader, VideosWithoutMediaAreRefusedInOneLine) {
  if (media_hooks()) GTEST_SKIP() << "a media component is registered in this process";
  LoaderOptions o;
  o.source = LoaderSource::kVideos;
  o.dataset_dir = fixtures::dir();
  try {
    Loader l(o);
    ADD_FAILURE() << "videos were opened without media";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("no media support"), std::string::npos) << m;
    // A build without media says how to rebuild; one with media, how to register the component.
    EXPECT_TRUE(m.find("-DPERCEIVER_WITH_MEDIA=ON") != std::string::npos ||
                m.find("perceiver::register_media()") != std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << "more than one line: " << m;
  }
}

// ---- the loader's audio adaptation (data/audio_length.h) ----

std::vector<float> tone(int64_t n, double cycles_per_sample, double amplitude = 0.5) {
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) x[size_t(k)] = float(amplitude * std::sin(2 * std::numbers::pi * cycles_per_sample * double(k)));
  return x;
}

// Amplitude of the tone of `cycles_per_sample` in x[lo, hi) (least squares on sin and cos).
double amplitude_of(const std::vector<float>& x, double cycles_per_sample, int64_t lo, int64_t hi) {
  double s = 0, c = 0;
  for (int64_t k = lo; k < hi; ++k) {
    const double a = 2 * std::numbers::pi * cycles_per_sample * double(k);
    s += x[size_t(k)] * std::sin(a), c += x[size_t(k)] * std::cos(a);
  }
  return 2 * std::hypot(s, c) / double(hi - lo);
}

TEST(AudioLength, ExactLengthSameLengthCopiesAndConstantsStay) {
  const std::vector<float> x = tone(7680, 0.01);
  EXPECT_TRUE(detail::resample_to_length(x.data(), 7680, 7680) == x);
  for (int64_t out : {160, 1000, 3840, 7681, 30720}) {
    EXPECT_EQ(int64_t(detail::resample_to_length(x.data(), 7680, out).size()), out);
    const std::vector<float> one(7680, 0.25f);
    const std::vector<float> y = detail::resample_to_length(one.data(), 7680, out);
    for (int64_t k = out / 8; k < out - out / 8; ++k) ASSERT_NEAR(y[size_t(k)], 0.25f, 1e-5) << out << " @" << k;
  }
  EXPECT_THROW(detail::resample_to_length(x.data(), 0, 10), Error);
}

TEST(AudioLength, KeepsWhatFitsAndRemovesWhatDoesNot) {
  // 7680 -> 1920 (48 kHz -> 12 kHz over the same span): a 1 kHz tone stays, a 9 kHz tone (above
  // the new 6 kHz Nyquist) is removed instead of folding back to 3 kHz.
  const int64_t n = 7680, m = 1920;
  const std::vector<float> low = detail::resample_to_length(tone(n, 1000.0 / 48000).data(), n, m);
  EXPECT_NEAR(amplitude_of(low, 1000.0 / 12000, 200, m - 200), 0.5, 0.005);
  const std::vector<float> high = detail::resample_to_length(tone(n, 9000.0 / 48000).data(), n, m);
  EXPECT_LT(amplitude_of(high, 3000.0 / 12000, 200, m - 200), 1e-3);
  double energy = 0;
  for (int64_t k = 200; k < m - 200; ++k) energy += double(high[size_t(k)]) * high[size_t(k)];
  EXPECT_LT(energy / double(m - 400), 1e-6);
  // Upsampling: the tone at the same time positions (output k is input time k·n/m).
  const std::vector<float> up = detail::resample_to_length(tone(m, 0.05).data(), m, n);
  for (int64_t k = 400; k < n - 400; k += 97)
    ASSERT_NEAR(up[size_t(k)], 0.5 * std::sin(2 * std::numbers::pi * 0.05 * double(k) * m / n), 2e-3) << k;
}

}  // namespace
}  // namespace perceiver
