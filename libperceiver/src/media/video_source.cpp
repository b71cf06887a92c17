// Decodes each clip's window when the loader asks for it: the same window position, crop and
// flip draws as the shard source (detail::draw_crop), so a prepared set and its videos give
// the same batches (tests/data/test_video_loader.cpp).
#include "media/video_source.h"

#include <algorithm>

#include "core/rng.h"
#include "media/prep.h"
#include "perceiver/error.h"

namespace perceiver {
namespace {

using detail::Crop;
using detail::crop_to_float;
using detail::draw_crop;

class VideoSource final : public ClipSource {
 public:
  VideoSource(const LoaderOptions& o, const ReaderOptions& reader)
      : o_(o), reader_(reader), idx_(index_kinetics(o.dataset_dir, o.split)) {
    PCV_CHECK(!idx_.clips.empty(), o.dataset_dir.string(), ": no clips found for the ", split_name(o.split), " split");
    decode_dim_ = o.decode_dim > 0 ? o.decode_dim : o.image_dim;
    PCV_CHECK(decode_dim_ >= o.image_dim, "decode_dim ", decode_dim_, " is smaller than image_dim ", o.image_dim);
  }
  int64_t size() const override { return int64_t(idx_.clips.size()); }
  int64_t label(int64_t i) const override { return idx_.clips[size_t(i)].label_index; }
  const std::vector<std::string>& class_names() const override { return idx_.classes; }
  int64_t audio_samples() const override { return window_audio_samples(o_.num_frames, o_.fps, o_.sample_rate); }

  std::optional<UnusableClip> read(int64_t i, uint64_t key, float* video, float* audio) const override {
    const KineticsClip& k = idx_.clips[size_t(i)];
    const Crop c = draw_crop(key, o_.sampler.seed, o_.augment, 0, decode_dim_ - o_.image_dim);
    // The window's place in time is a separate draw so that it does not shift the crop's.
    const double where = o_.augment ? RngStream(o_.sampler.seed, RngPurpose::kAugment, key, 1).uniform() : 0.5;
    WindowSpec w;
    w.num_frames = o_.num_frames, w.fps = o_.fps, w.image_dim = decode_dim_, w.sample_rate = o_.sample_rate;
    Clip clip;
    try {
      clip = read_clip_window(k.path, k.youtube_id, w, reader_, where);
    } catch (const std::exception& e) {  // bad media never stops a run (as in perceiver-prep)
      return UnusableClip{i, k.path.string(), {k.youtube_id, k.time_start, k.time_end, e.what()}, false};
    }
    crop_to_float(clip.video.data(), o_.num_frames, decode_dim_, c, o_.image_dim, video);
    std::copy(clip.audio.begin(), clip.audio.end(), audio);
    return std::nullopt;
  }

  std::vector<SkippedClip> missing() const override {
    std::vector<SkippedClip> out;
    for (const UnusableRow& r : idx_.missing) out.push_back({r.youtube_id, r.time_start, r.time_end, r.reason});
    return out;
  }

 private:
  LoaderOptions o_;
  ReaderOptions reader_;
  KineticsIndex idx_;
  int decode_dim_ = 0;
};

}  // namespace

std::unique_ptr<ClipSource> open_video_source(const LoaderOptions& o, const ReaderOptions& reader) {
  return std::make_unique<VideoSource>(o, reader);
}

}  // namespace perceiver
