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
// the same way on any rank count.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "data/kinetics_index.h"
#include "data/video_reader.h"

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

/// One batch in the model's layout.
struct Batch {
  int64_t size = 0;                 // B (this rank's clips; may be below batch_size at the end)
  int64_t num_frames = 0, image_dim = 0, audio_samples = 0;
  std::vector<float> video;         // [B,T,D,D,3] RGB in [0, 1]
  std::vector<float> audio;         // [B,S] mono
  std::vector<int64_t> label;       // [B] class index, -1 without labels
  std::vector<int64_t> clip;        // [B] index of each clip in the data set
  SamplerPosition position;         // of this batch
  bool last_in_epoch = false;
};

enum class LoaderSource { kShards, kVideos };

struct LoaderOptions {
  LoaderSource source = LoaderSource::kShards;
  std::filesystem::path shard_dir;      // kShards: OUT/<split> as written by perceiver-prep
  std::filesystem::path dataset_dir;    // kVideos: a Kinetics-layout data set
  KineticsSplit split = KineticsSplit::kTrain;
  SamplerOptions sampler;
  int num_frames = 16, image_dim = 224;
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
  ReaderOptions reader;
};

/// A data set of clips the loader reads from (shards or videos).
class ClipSource {
 public:
  virtual ~ClipSource() = default;
  virtual int64_t size() const = 0;
  virtual int64_t label(int64_t i) const = 0;
  virtual const std::vector<std::string>& class_names() const = 0;
  /// Writes clip i as video f32 [T,D,D,3] in [0,1] and audio f32 [S], augmented from `rng_key`.
  virtual void read(int64_t i, uint64_t rng_key, float* video, float* audio) const = 0;
  virtual int64_t audio_samples() const = 0;
};

class Loader {
 public:
  /// Opens the source (all shards are validated up front) and starts the workers at `start`.
  explicit Loader(const LoaderOptions& opts, SamplerPosition start = {});
  ~Loader();  // stops and joins the workers; never throws
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  /// The next batch in sampler order, or nullopt after num_epochs. Rethrows a worker's error
  /// (the batch after it is next in line).
  std::optional<Batch> next();
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
  struct Pool;
  std::unique_ptr<Pool> pool_;
};

}  // namespace perceiver
