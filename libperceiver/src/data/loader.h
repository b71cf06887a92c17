// The sampler and the threaded loader (DESIGN.md #7: determinism, #9: every rank reads its own
// shard of the sampler). Shape legend: B clips per batch on this rank, T frames, D image_dim,
// S = T·sample_rate/fps audio samples.
//
// Sampler: epoch e visits the permutation of RngStream(seed, kShuffle, e) (identity without
// shuffle) in global batches of B·W clips (W ranks). Rank r takes its slice of each global batch,
// so every rank runs the same number of steps and an epoch covers each clip exactly once across
// ranks. Without drop_last the last global batch is split as evenly as possible (some ranks
// may get fewer clips, or none); with drop_last it is dropped.
//
// Loader: batch k after the start position is produced by one of num_workers threads; batches
// come out in sampler order through a bounded queue, so the output depends only on (seed,
// options, position), never on the number of workers or on timing. Augmentation draws from
// RngStream(seed, kAugment, epoch << 32 | clip): the same clip in the same epoch is augmented
// the same way on any rank count. Everything done to a clip (crop, window, audio resampled to
// the model's length) depends on the clip and its key only, never on its place in a batch.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "data/kinetics_index.h"
#include "data/shards.h"

namespace perceiver {

struct SamplerOptions {
  uint64_t seed = 0;
  bool shuffle = true;
  bool drop_last = false;
  int64_t batch_size = 1;  // B, per rank
  int rank = 0, world_size = 1;
};

/// Where a run stands: the next batch is batch `batch` of epoch `epoch`. A checkpoint stores
/// these two integers; a loader started from them continues exactly.
struct SamplerPosition {
  int64_t epoch = 0, batch = 0;
  bool operator==(const SamplerPosition&) const = default;
};

class Sampler {
 public:
  Sampler(int64_t num_items, const SamplerOptions& opts);
  int64_t num_items() const { return n_; }
  /// Steps per epoch, the same on every rank.
  int64_t batches_per_epoch() const { return batches_; }
  /// This rank's items of batch p.batch of epoch p.epoch (fewer than B, possibly none, only in
  /// the last batch of an epoch without drop_last).
  std::vector<int64_t> batch(const SamplerPosition& p) const;
  /// The position after p (the next epoch starts after the last batch).
  SamplerPosition after(const SamplerPosition& p) const;
  /// The order in which epoch e visits the items.
  std::vector<int64_t> epoch_order(int64_t epoch) const;
  const SamplerOptions& options() const { return o_; }

 private:
  int64_t n_, batches_;
  SamplerOptions o_;
  mutable std::mutex m_;  // batch() is called from the loader's workers
  mutable int64_t cached_epoch_ = -1;
  mutable std::shared_ptr<const std::vector<int64_t>> cached_order_;
};

/// A clip the source could not read (a broken or unreadable video), left out of its batch.
struct UnusableClip {
  int64_t clip = 0;                 // index in the data set
  std::string path;
  SkippedClip row;                  // annotation fields and the reason, as in prep's skip report
  bool first_time = false;          // set by Loader::next() the first time a clip is met
};

/// One batch in the model's layout.
struct Batch {
  int64_t size = 0;                 // B (this rank's clips; below batch_size at the end, or with skipped clips)
  int64_t num_frames = 0, image_dim = 0, audio_samples = 0;
  std::vector<float> video;         // [B,T,D,D,3] RGB in [0, 1]
  std::vector<float> audio;         // [B,S] mono
  std::vector<int64_t> label;       // [B] class index, -1 without labels
  std::vector<int64_t> clip;        // [B] index of each clip in the data set
  std::vector<UnusableClip> skipped;  // clips of this batch that could not be read
  SamplerPosition position;         // of this batch
  bool last_in_epoch = false;
};

/// kShards: prepared HDF5 shards (the core reads them). kVideos: the videos of a Kinetics-layout
/// folder, decoded as they are read by the media component (data/media_hooks.h); without it
/// the loader refuses with one line.
enum class LoaderSource { kShards, kVideos };

struct LoaderOptions {
  LoaderSource source = LoaderSource::kShards;
  std::filesystem::path shard_dir;      // kShards: OUT/<split> as written by perceiver-prep
  std::filesystem::path dataset_dir;    // kVideos: a Kinetics-layout data set
  KineticsSplit split = KineticsSplit::kTrain;
  SamplerOptions sampler;
  int num_frames = 16, image_dim = 224;
  /// Audio samples per clip the consumer takes (S); 0: as the source has them (T·sample_rate/fps).
  /// Another count resamples each clip's audio over the same T/fps seconds (a model whose
  /// audio_samples_per_frame is not sample_rate/fps).
  int64_t audio_samples = 0;
  double fps = 25;                      // kVideos (shards carry their own)
  int sample_rate = 48000;              // kVideos
  /// kVideos: short side the frames are resized to before cropping to image_dim (0: image_dim).
  int decode_dim = 0;
  int num_workers = 2;
  int prefetch_batches = 4;             // batches decoded ahead of the consumer (all workers)
  int64_t num_epochs = 0;               // next() returns nullopt after this many; 0: endless
  /// Random crop (when the stored/decoded frames are larger than image_dim), horizontal flip,
  /// and a random window in time (when the shard stores more frames than num_frames; from
  /// videos, anywhere in the clip). Off: centred crop and window, no flip.
  bool augment = false;
};

/// A data set of clips the loader reads from (shards or videos).
class ClipSource {
 public:
  virtual ~ClipSource() = default;
  virtual int64_t size() const = 0;
  virtual int64_t label(int64_t i) const = 0;
  virtual const std::vector<std::string>& class_names() const = 0;
  /// Writes clip i as video f32 [T,D,D,3] in [0,1] and audio f32 [S] (S = audio_samples()),
  /// augmented from `rng_key`. Returns an unusable clip's description when the clip itself is
  /// bad (videos: it fails to decode); throws when the source is (shards are validated at open).
  virtual std::optional<UnusableClip> read(int64_t i, uint64_t rng_key, float* video, float* audio) const = 0;
  virtual int64_t audio_samples() const = 0;
  /// Annotation rows without a clip (videos: as in prep's skip report; shards: none).
  virtual std::vector<SkippedClip> missing() const { return {}; }
};

namespace detail {

/// Where a clip's window and crop sit (shared by the clip sources, here and in the media
/// component, so that shards and videos give the same clip the same crop).
struct Crop {
  int64_t t0 = 0, y0 = 0, x0 = 0;
  bool flip = false;
};

/// Draws the window, crop and flip of one clip from RngStream(seed, kAugment, key) (fixed draw
/// order, so keys stay comparable); without augment the centred window and crop, no flip.
Crop draw_crop(uint64_t key, uint64_t seed, bool augment, int64_t slack_t, int64_t slack_xy);

/// src uint8 [T,Ds,Ds,3] → dst f32 [T,D,D,3] in [0,1]: the D×D square at (y0, x0), mirrored
/// when flip.
void crop_to_float(const uint8_t* src, int64_t t, int64_t ds, const Crop& c, int64_t d, float* dst);

}  // namespace detail

class Loader {
 public:
  /// Opens the source (all shards are validated up front) and starts the workers at `start`.
  explicit Loader(const LoaderOptions& opts, SamplerPosition start = {});
  ~Loader();  // stops and joins the workers; never throws
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  /// The next batch in sampler order, or nullopt after num_epochs. A clip that cannot be read
  /// is left out of its batch and listed in Batch::skipped (first_time set once per clip), as
  /// perceiver-prep skips it. Rethrows a worker's other errors (the batch after it is next in line).
  std::optional<Batch> next();
  /// Distinct clips skipped as unusable by the batches next() returned so far.
  int64_t unusable_clips() const { return int64_t(unusable_.size()); }
  /// Position of the batch the next call to next() returns: store it in a checkpoint.
  SamplerPosition position() const { return next_; }
  /// Drops prefetched batches and continues from p.
  void seek(SamplerPosition p);

  const Sampler& sampler() const { return *sampler_; }
  const ClipSource& source() const { return *source_; }
  int64_t size() const { return source_->size(); }

 private:
  Batch produce(int64_t ticket) const;
  void start_workers();

  LoaderOptions o_;
  std::unique_ptr<ClipSource> source_;
  std::unique_ptr<Sampler> sampler_;
  SamplerPosition start_, next_;
  int64_t remaining_ = -1;  // batches left before num_epochs ends (-1: endless)
  std::set<int64_t> unusable_;
  struct Pool;
  std::unique_ptr<Pool> pool_;
};

}  // namespace perceiver
