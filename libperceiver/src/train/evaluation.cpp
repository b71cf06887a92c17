// Evaluation metrics (PSNR, top-k) on the validation clips; the media of a few clips are
// written by the media component (data/media_hooks.h, media/reconstruction_media.h).
// Shape legend: T frames, H/W frame height/width, S audio samples.
#include "train/evaluation.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/loader.h"
#include "data/media_hooks.h"
#include "model/loss.h"
#include "model/sampling.h"
#include "model/step.h"
#include "perceiver/error.h"

namespace perceiver {
namespace {

namespace fs = std::filesystem;

// PSNR of identical signals is +inf; reports and JSON want a finite number, so every PSNR is
// capped here (100 dB is an MSE of 1e-10 at peak 1, far below float32 rounding of [0,1] data).
constexpr double kMaxPsnrDb = 100.0;

}  // namespace

// Returns at most kMaxPsnrDb (100 dB), also for identical inputs where the true value is +inf.
// NaN in either input gives NaN, so a broken reconstruction is not hidden.
double psnr(const float* pred, const float* target, int64_t n, double peak) {
  PCV_CHECK(n > 0, "psnr of an empty signal");
  PCV_CHECK(peak > 0, "psnr: peak must be > 0, got ", peak);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = double(pred[i]) - double(target[i]);
    sum += d * d;
  }
  const double mse = sum / double(n);
  if (std::isnan(mse)) return mse;
  if (mse == 0.0) return kMaxPsnrDb;
  return std::min(kMaxPsnrDb, 10.0 * std::log10(peak * peak / mse));
}

// Ties favour the label: it is a hit when fewer than k logits are strictly greater than its
// own. A NaN logit for the label is a miss; NaN elsewhere never outranks it.
int64_t topk_hits(const float* logits, const int64_t* labels, int64_t batch, int64_t num_labels, int64_t k) {
  PCV_CHECK(k >= 1, "topk_hits: k must be >= 1, got ", k);
  int64_t hits = 0;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t label = labels[b];
    PCV_CHECK(label >= 0 && label < num_labels, "topk_hits: label ", label, " of row ", b, " is outside [0, ",
              num_labels, ")");
    const float* row = logits + b * num_labels;
    const float own = row[label];
    if (std::isnan(own)) continue;
    int64_t greater = 0;
    for (int64_t j = 0; j < num_labels; ++j) greater += row[j] > own;
    hits += greater < k;
  }
  return hits;
}

bool take_for_reconstruction(int64_t i, int64_t taken, int64_t want, int64_t total) {
  return taken < want && i * want >= taken * total;
}

int64_t evaluation_media_clips(const TrainConfig& tc) {
  return std::min(tc.eval_recon_clips, tc.eval_media_clips);
}

EvalReport evaluate(PerceiverNet<float>& net, const TrainConfig& tc, const LoaderOptions& val, int64_t step,
                    const std::filesystem::path& logdir) {
  const ModelConfig& c = net.config();
  // Media outputs need the media component: refused before any work without it.
  const MediaHooks* media =
      evaluation_media_clips(tc) > 0 ? &require_media("evaluation media (eval_media_clips: " +
                                                      std::to_string(tc.eval_media_clips) + ", MP4/WAV/PNG)",
                                                      "set eval_media_clips: 0 for metrics only")
                                     : nullptr;
  LoaderOptions lo = val;
  lo.sampler = {uint64_t(tc.seed), false, false, tc.test_batch_size, 0, 1};
  lo.num_frames = int(c.num_frames);
  lo.image_dim = int(c.frame_height);
  lo.audio_samples = c.audio_samples();
  lo.num_workers = int(std::max<int64_t>(1, tc.num_workers));
  lo.num_epochs = 1;
  Loader loader(lo);
  const LossConfig lc = parse_loss_config(tc.recon_loss, tc.loss_weights);
  const std::filesystem::path out_dir = logdir / "eval" / ("step-" + std::to_string(step));
  fs::create_directories(out_dir);
  EvalReport r;
  double loss_sum = 0, vpsnr = 0, apsnr = 0;
  int64_t hits1 = 0, hits5 = 0;
  const int64_t total = loader.size(), want = std::min<int64_t>(tc.eval_recon_clips, total);
  while (auto batch = loader.next()) {
    const int64_t B = batch->size;
    PCV_ASSERT(batch->audio_samples == c.audio_samples(), "loader audio ", batch->audio_samples, " samples");
    if (B == 0) continue;
    std::vector<float> logits;
    const OutputPoints pts = draw_output_points(c, uint64_t(tc.seed), 0);
    auto mask = draw_masks(c, B, uint64_t(tc.seed), 0, 0, /*label_always_masked=*/true);
    const LossValues t = run_step(net, batch->video.data(), batch->audio.data(), batch->label.data(), B, pts, mask, lc,
                                 false, &logits);
    loss_sum += t.total * double(B);
    hits1 += topk_hits(logits.data(), batch->label.data(), B, c.num_labels, 1);
    hits5 += topk_hits(logits.data(), batch->label.data(), B, c.num_labels, std::min<int64_t>(5, c.num_labels));
    for (int64_t b = 0; b < B; ++b) {
      if (!take_for_reconstruction(r.clips + b, r.recon_clips, want, total)) continue;
      const int64_t v = c.pixels() * 3, s = c.audio_samples();
      net.encode(batch->video.data() + b * v, batch->audio.data() + b * s, batch->label.data() + b, 1,
                 draw_masks(c, 1, uint64_t(tc.seed), 0, 0, true), Pass::kForwardOnly);
      std::vector<float> rv, ra, rl;
      decode_everything(net, tc.eval_chunks, rv, ra, rl);
      vpsnr += psnr(rv.data(), batch->video.data() + b * v, v);
      apsnr += psnr(ra.data(), batch->audio.data() + b * s, s);
      if (r.recon_clips < tc.eval_media_clips)
        media->write_reconstruction({out_dir / ("clip-" + std::to_string(r.recon_clips)), batch->video.data() + b * v,
                                     rv.data(), ra.data(), c.num_frames, c.frame_height, c.frame_width, s, lo.fps,
                                     int(std::lround(double(c.audio_samples_per_frame) * lo.fps))});
      ++r.recon_clips;
    }
    r.clips += B;
  }
  PCV_CHECK(r.clips > 0, "evaluation: no validation clips in ",
            (val.source == LoaderSource::kShards ? val.shard_dir : val.dataset_dir).string());
  r.top1 = double(hits1) / double(r.clips);
  r.top5 = double(hits5) / double(r.clips);
  r.loss = loss_sum / double(r.clips);
  if (r.recon_clips) r.video_psnr = vpsnr / double(r.recon_clips), r.audio_psnr = apsnr / double(r.recon_clips);
  nlohmann::json j{{"step", step},          {"clips", r.clips},   {"top1", r.top1},       {"top5", r.top5},
                   {"loss", r.loss},        {"video_psnr_db", r.video_psnr}, {"audio_psnr_db", r.audio_psnr},
                   {"recon_clips", r.recon_clips}, {"media_dir", out_dir.string()}};
  std::ofstream(out_dir / "report.json") << j.dump(2) << "\n";
  std::ofstream(logdir / "eval.json") << j.dump(2) << "\n";
  return r;
}

}  // namespace perceiver
