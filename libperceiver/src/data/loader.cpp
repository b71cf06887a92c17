#include "data/loader.h"

#include <algorithm>
#include <list>
#include <numeric>
#include <regex>

#include "core/rng.h"
#include "data/audio_length.h"
#include "data/media_hooks.h"
#include "data/ordered_pool.h"
#include "data/shards.h"
#include "perceiver/error.h"
#include "perceiver/threads.h"

namespace perceiver {
namespace fs = std::filesystem;

// ---- sampler ----

Sampler::Sampler(int64_t num_items, const SamplerOptions& o) : n_(num_items), o_(o) {
  PCV_CHECK(o.batch_size >= 1, "batch size ", o.batch_size, " must be at least 1");
  PCV_CHECK(o.world_size >= 1 && o.rank >= 0 && o.rank < o.world_size, "rank ", o.rank, " outside world size ",
            o.world_size);
  const int64_t global = o.batch_size * o.world_size;
  batches_ = o.drop_last ? n_ / global : (n_ + global - 1) / global;
  PCV_CHECK(batches_ > 0, "data set of ", n_, " clips holds no ", o.drop_last ? "full " : "", "batch of ", global,
            " (batch size ", o.batch_size, " x ", o.world_size, " ranks)");
}

std::vector<int64_t> Sampler::epoch_order(int64_t epoch) const {
  if (!o_.shuffle) {
    std::vector<int64_t> v(static_cast<size_t>(n_));
    std::iota(v.begin(), v.end(), 0);
    return v;
  }
  return RngStream(o_.seed, RngPurpose::kShuffle, uint64_t(epoch)).permutation(n_);
}

std::vector<int64_t> Sampler::batch(const SamplerPosition& p) const {
  PCV_CHECK(p.epoch >= 0 && p.batch >= 0 && p.batch < batches_, "sampler position (epoch ", p.epoch, ", batch ",
            p.batch, ") outside the ", batches_, " batches of an epoch");
  std::shared_ptr<const std::vector<int64_t>> order;
  {
    std::lock_guard lock(m_);
    if (cached_epoch_ != p.epoch) {
      cached_order_ = std::make_shared<const std::vector<int64_t>>(epoch_order(p.epoch));
      cached_epoch_ = p.epoch;
    }
    order = cached_order_;
  }
  // Global batch p.batch covers order[g0, g0 + m); rank r takes [g0 + r·m/W, g0 + (r+1)·m/W).
  const int64_t global = o_.batch_size * o_.world_size, g0 = p.batch * global;
  const int64_t m = std::min(global, n_ - g0), w = o_.world_size;
  const int64_t lo = g0 + o_.rank * m / w, hi = g0 + (o_.rank + 1) * m / w;
  return {order->begin() + lo, order->begin() + hi};
}

SamplerPosition Sampler::after(const SamplerPosition& p) const {
  return p.batch + 1 < batches_ ? SamplerPosition{p.epoch, p.batch + 1} : SamplerPosition{p.epoch + 1, 0};
}

// ---- clip geometry ----

namespace detail {

Crop draw_crop(uint64_t key, uint64_t seed, bool augment, int64_t slack_t, int64_t slack_xy) {
  if (!augment) return {slack_t / 2, slack_xy / 2, slack_xy / 2, false};
  RngStream rng(seed, RngPurpose::kAugment, key);
  Crop c;
  c.t0 = int64_t(rng.below(uint64_t(slack_t + 1)));
  c.y0 = int64_t(rng.below(uint64_t(slack_xy + 1)));
  c.x0 = int64_t(rng.below(uint64_t(slack_xy + 1)));
  c.flip = rng.bernoulli(0.5);
  return c;
}

void crop_to_float(const uint8_t* src, int64_t t, int64_t ds, const Crop& c, int64_t d, float* dst) {
  for (int64_t f = 0; f < t; ++f)
    for (int64_t y = 0; y < d; ++y) {
      const uint8_t* row = src + ((f * ds + c.y0 + y) * ds + c.x0) * 3;
      float* out = dst + (f * d + y) * d * 3;
      for (int64_t x = 0; x < d; ++x) {
        const uint8_t* px = row + (c.flip ? d - 1 - x : x) * 3;
        for (int k = 0; k < 3; ++k) out[x * 3 + k] = float(px[k]) * (1.0f / 255.0f);
      }
    }
}

}  // namespace detail

namespace {

using detail::Crop;
using detail::crop_to_float;
using detail::draw_crop;

// ---- shards ----

class ShardSource final : public ClipSource {
 public:
  ShardSource(const LoaderOptions& o) : o_(o) {
    static const std::regex kShard(R"(shard-\d+\.h5)");
    std::vector<fs::path> files;
    PCV_CHECK(fs::is_directory(o.shard_dir), "shard folder '", o.shard_dir.string(), "' does not exist. HINT: run "
              "perceiver-prep --dataset_dir DIR --output_dir OUT and pass OUT/<split>");
    for (const auto& e : fs::directory_iterator(o.shard_dir))
      if (std::regex_match(e.path().filename().string(), kShard)) files.push_back(e.path());
    std::sort(files.begin(), files.end());
    PCV_CHECK(!files.empty(), "no shard-*.h5 files in '", o.shard_dir.string(), "'");
    for (const auto& f : files) add_shard(f);
    PCV_CHECK(!labels_.empty(), "the shards in '", o.shard_dir.string(), "' hold no clips");
    PCV_CHECK(o.num_frames <= meta_.num_frames && o.image_dim <= meta_.image_dim, "the shards in '",
              o.shard_dir.string(), "' hold ", meta_.num_frames, " frames of ", meta_.image_dim, "², and this run reads ",
              o.num_frames, " of ", o.image_dim, "². HINT: prepare them with perceiver-prep --num_frames ", o.num_frames,
              " --image_dim ", o.image_dim, ", or give the Kinetics-layout folder (prepared for the run on first use)");
  }

  int64_t size() const override { return int64_t(labels_.size()); }
  int64_t label(int64_t i) const override { return labels_[size_t(i)]; }
  const std::vector<std::string>& class_names() const override { return meta_.class_names; }
  int64_t audio_samples() const override { return o_.num_frames * meta_.audio_samples() / meta_.num_frames; }

  std::optional<UnusableClip> read(int64_t i, uint64_t key, float* video, float* audio) const override {
    const size_t s = size_t(std::upper_bound(first_.begin(), first_.end(), i) - first_.begin()) - 1;
    const auto reader = open(s);
    const int64_t t = o_.num_frames, ds = meta_.image_dim;
    const Crop c = draw_crop(key, o_.sampler.seed, o_.augment, meta_.num_frames - t, ds - o_.image_dim);
    std::vector<uint8_t> frames(size_t(t * ds * ds * 3));
    std::vector<float> a(static_cast<size_t>(audio_samples()));
    reader->read_clip(i - first_[s], c.t0, t, frames.data(), a.data());
    crop_to_float(frames.data(), t, ds, c, o_.image_dim, video);
    std::copy(a.begin(), a.end(), audio);
    return std::nullopt;
  }

 private:
  void add_shard(const fs::path& f) {
    auto r = std::make_shared<ShardReader>(ShardReader::open(f));
    const ShardMeta& m = r->index().meta;
    if (paths_.empty()) meta_ = m;
    PCV_CHECK(m.num_frames == meta_.num_frames && m.image_dim == meta_.image_dim && m.fps == meta_.fps &&
                  m.sample_rate == meta_.sample_rate && m.class_names == meta_.class_names,
              f.string(), ": shard made with other options than '", paths_.empty() ? "" : paths_[0].string(),
              "'. HINT: re-run perceiver-prep into an empty folder");
    first_.push_back(int64_t(labels_.size()));
    for (int32_t l : r->index().label) labels_.push_back(l);
    paths_.push_back(f);
    remember(paths_.size() - 1, std::move(r));
  }

  // Shards stay open in a small LRU cache: the fd limit rules out keeping thousands open.
  std::shared_ptr<const ShardReader> open(size_t s) const {
    std::lock_guard lock(m_);
    for (auto it = cache_.begin(); it != cache_.end(); ++it)
      if (it->first == s) {
        cache_.splice(cache_.begin(), cache_, it);
        return it->second;
      }
    auto r = std::make_shared<ShardReader>(ShardReader::open(paths_[s]));
    remember(s, r);
    return r;
  }
  void remember(size_t s, std::shared_ptr<const ShardReader> r) const {
    cache_.emplace_front(s, std::move(r));
    if (cache_.size() > kCacheSize) cache_.pop_back();
  }

  static constexpr size_t kCacheSize = 32;
  LoaderOptions o_;
  ShardMeta meta_;
  std::vector<fs::path> paths_;
  std::vector<int64_t> first_;   // [shards] index of each shard's first clip
  std::vector<int64_t> labels_;  // [clips]
  mutable std::mutex m_;
  mutable std::list<std::pair<size_t, std::shared_ptr<const ShardReader>>> cache_;
};

}  // namespace

// ---- loader ----

struct Loader::Pool {
  OrderedPool<Batch> pool;
  Pool(int workers, int64_t window, int64_t count, std::function<Batch(int64_t)> f)
      : pool(workers, window, count, std::move(f), threads::bind_loader_thread) {}
};

Loader::Loader(const LoaderOptions& o, SamplerPosition start) : o_(o), start_(start), next_(start) {
  PCV_CHECK(o.num_workers >= 1, "num_workers must be at least 1");
  PCV_CHECK(o.num_frames >= 1 && o.image_dim >= 1, "num_frames and image_dim must be positive");
  if (o.source == LoaderSource::kShards)
    source_ = std::make_unique<ShardSource>(o);
  else
    source_ = require_media("data source 'videos' (decoding the clips of '" + o.dataset_dir.string() +
                            "' as they are read)", "or read prepared shards (LoaderSource::kShards)")
                  .video_source(o);
  sampler_ = std::make_unique<Sampler>(source_->size(), o.sampler);
  start_workers();
}

Loader::~Loader() = default;

void Loader::start_workers() {
  pool_.reset();  // joins the old workers first
  const int64_t bpe = sampler_->batches_per_epoch();
  const int64_t start_global = start_.epoch * bpe + start_.batch;
  const int64_t count = o_.num_epochs > 0 ? std::max<int64_t>(0, o_.num_epochs * bpe - start_global) : -1;
  pool_ = std::make_unique<Pool>(o_.num_workers, std::max(o_.prefetch_batches, 1), count,
                                 [this](int64_t k) { return produce(k); });
  remaining_ = count;
}

void Loader::seek(SamplerPosition p) {
  PCV_CHECK(p.batch >= 0 && p.batch < sampler_->batches_per_epoch() && p.epoch >= 0, "cannot seek to epoch ",
            p.epoch, " batch ", p.batch, " (", sampler_->batches_per_epoch(), " batches per epoch)");
  start_ = next_ = p;
  start_workers();
}

// Each clip is read and adapted on its own, so its input depends on the clip (and its key)
// only: not on its rank, its place in the batch or the batch size.
Batch Loader::produce(int64_t ticket) const {
  const int64_t bpe = sampler_->batches_per_epoch();
  const int64_t g = start_.epoch * bpe + start_.batch + ticket;
  Batch b;
  b.position = {g / bpe, g % bpe};
  b.last_in_epoch = b.position.batch == bpe - 1;
  const std::vector<int64_t> clips = sampler_->batch(b.position);
  const int64_t source_samples = source_->audio_samples();
  b.num_frames = o_.num_frames, b.image_dim = o_.image_dim;
  b.audio_samples = o_.audio_samples > 0 ? o_.audio_samples : source_samples;
  const int64_t vs = b.num_frames * b.image_dim * b.image_dim * 3;
  b.video.resize(clips.size() * size_t(vs));
  b.audio.resize(clips.size() * size_t(b.audio_samples));
  std::vector<float> audio(static_cast<size_t>(source_samples));
  for (const int64_t i : clips) {
    const uint64_t key = (uint64_t(b.position.epoch) << 32) | uint64_t(i);
    if (auto bad = source_->read(i, key, b.video.data() + b.size * vs, audio.data())) {
      b.skipped.push_back(std::move(*bad));
      continue;
    }
    float* out = b.audio.data() + b.size * b.audio_samples;
    if (b.audio_samples == source_samples) {
      std::copy(audio.begin(), audio.end(), out);
    } else {
      const std::vector<float> fitted = detail::resample_to_length(audio.data(), source_samples, b.audio_samples);
      std::copy(fitted.begin(), fitted.end(), out);
    }
    b.clip.push_back(i);
    b.label.push_back(source_->label(i));
    ++b.size;
  }
  b.video.resize(size_t(b.size * vs));
  b.audio.resize(size_t(b.size * b.audio_samples));
  return b;
}

std::optional<Batch> Loader::next() {
  if (remaining_ == 0) return std::nullopt;
  if (remaining_ > 0) --remaining_;
  // The position moves past a failed batch too, so a caller may log the error and go on.
  const SamplerPosition here = next_;
  next_ = sampler_->after(here);
  Batch b = pool_->pool.next();
  for (UnusableClip& u : b.skipped) u.first_time = unusable_.insert(u.clip).second;
  return b;
}

}  // namespace perceiver
