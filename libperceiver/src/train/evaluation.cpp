// Evaluation metrics (PSNR, top-k) and the media written for a few validation clips.
// Shape legend: T frames, H/W frame height/width, S audio samples.
#include "train/evaluation.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include <fstream>

#include <nlohmann/json.hpp>

#include "data/audio_file.h"
#include "data/audio_resample.h"
#include "data/loader.h"
#include "data/media_writer.h"
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

// Sample rates the AAC encoder accepts (MPEG-4 sampling frequency table); others are resampled.
constexpr std::array<int, 13> kAacRates = {96000, 88200, 64000, 48000, 44100, 32000, 24000,
                                           22050, 16000, 12000, 11025, 8000,  7350};
constexpr int kFallbackAudioRate = 48000;
constexpr int64_t kMaxGridFrames = 8;

uint8_t to_u8(float x) {
  if (!(x > 0.0f)) return 0;  // also NaN
  if (x >= 1.0f) return 255;
  return static_cast<uint8_t>(std::lround(x * 255.0f));
}

// Copies frame t of a [T,H,W,3] float video into an RGB uint8 image [out_h, out_w, 3] at
// column x0 (rows beyond H stay as they are).
void blit_frame(const float* video, int64_t t, int64_t h, int64_t w, uint8_t* out, int64_t out_w, int64_t x0,
                int64_t y0) {
  const float* src = video + t * h * w * 3;
  for (int64_t y = 0; y < h; ++y) {
    uint8_t* row = out + ((y0 + y) * out_w + x0) * 3;
    for (int64_t i = 0; i < w * 3; ++i) row[i] = to_u8(src[y * w * 3 + i]);
  }
}

// Side-by-side MP4: original left, reconstruction right. yuv420p needs even sizes: 2W always is,
// an odd H gets one black row at the bottom.
void write_side_by_side_mp4(const fs::path& out, const float* video, const float* recon, int64_t frames,
                            int64_t h, int64_t w, int fps, const std::vector<float>& audio, int audio_rate) {
  MediaWriterOptions o;
  o.width = int(2 * w);
  o.height = int(h + (h & 1));
  o.fps = fps;
  o.audio_channels = audio.empty() ? 0 : 1;
  o.sample_rate = audio_rate;
  MediaWriter writer = MediaWriter::create(out, o);
  std::vector<uint8_t> rgb(size_t(o.width) * o.height * 3, 0);  // [H', 2W, 3]
  for (int64_t t = 0; t < frames; ++t) {
    blit_frame(video, t, h, w, rgb.data(), o.width, 0, 0);
    blit_frame(recon, t, h, w, rgb.data(), o.width, w, 0);
    writer.write_frame(rgb.data());
  }
  if (!audio.empty()) writer.write_audio(audio.data(), int64_t(audio.size()));
  writer.finish();
}

// PNG grid: up to 8 frames spread evenly over the clip; originals on top, reconstructions below.
void write_frame_grid(const fs::path& out, const float* video, const float* recon, int64_t frames, int64_t h,
                      int64_t w) {
  const int64_t n = std::min(frames, kMaxGridFrames);
  const int64_t gw = n * w, gh = 2 * h;
  std::vector<uint8_t> rgb(size_t(gw * gh * 3), 0);  // [2H, nW, 3]
  for (int64_t i = 0; i < n; ++i) {
    const int64_t t = n == 1 ? 0 : (i * (frames - 1) + (n - 1) / 2) / (n - 1);
    blit_frame(video, t, h, w, rgb.data(), gw, i * w, 0);
    blit_frame(recon, t, h, w, rgb.data(), gw, i * w, h);
  }
  write_png(out, rgb.data(), int(gw), int(gh));
}

// The audio track for the MP4: as is when AAC takes the rate, else resampled to 48 kHz.
std::vector<float> aac_audio(const float* audio, int64_t n, int rate, int* out_rate) {
  *out_rate = rate;
  if (n == 0) return {};
  if (std::find(kAacRates.begin(), kAacRates.end(), rate) != kAacRates.end()) return {audio, audio + n};
  *out_rate = kFallbackAudioRate;
  return detail::resample_mono(audio, n, rate, kFallbackAudioRate);
}

fs::path with_suffix(const fs::path& stem, const char* suffix) {
  fs::path p = stem;
  p += suffix;
  return p;
}

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

// fps is rounded to whole frames per second (the writer's time base); a clip without audio
// (audio_samples == 0) gets no audio track and no WAV.
void write_reconstruction_media(const fs::path& stem, const float* video, const float* recon_video,
                                const float* recon_audio, int64_t frames, int64_t height, int64_t width,
                                int64_t audio_samples, double fps, int sample_rate) {
  PCV_CHECK(frames > 0 && height > 0 && width > 0, "write_reconstruction_media: bad video shape [", frames, ",",
            height, ",", width, ",3] for '", stem.string(), "'");
  PCV_CHECK(audio_samples >= 0 && (audio_samples == 0 || (recon_audio && sample_rate > 0)),
            "write_reconstruction_media: bad audio (", audio_samples, " samples at ", sample_rate, " Hz) for '",
            stem.string(), "'");
  const int fps_int = int(std::lround(fps));
  PCV_CHECK(fps_int >= 1, "write_reconstruction_media: fps ", fps, " for '", stem.string(), "'");
  if (stem.has_parent_path()) fs::create_directories(stem.parent_path());

  int audio_rate = 0;
  const std::vector<float> track = aac_audio(recon_audio, audio_samples, sample_rate, &audio_rate);
  write_side_by_side_mp4(with_suffix(stem, ".mp4"), video, recon_video, frames, height, width, fps_int, track,
                         audio_rate);
  if (audio_samples > 0) write_wav(with_suffix(stem, ".wav"), recon_audio, audio_samples, 1, sample_rate);
  write_frame_grid(with_suffix(stem, "_frames.png"), video, recon_video, frames, height, width);
}

EvalReport evaluate(PerceiverNet<float>& net, const TrainConfig& tc, const LoaderOptions& val, int64_t step,
                    const std::filesystem::path& logdir) {
  const ModelConfig& c = net.config();
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
    for (int64_t b = 0; b < B && r.recon_clips < tc.eval_recon_clips; ++b) {
      const int64_t v = c.pixels() * 3, s = c.audio_samples();
      net.encode(batch->video.data() + b * v, batch->audio.data() + b * s, batch->label.data() + b, 1,
                 draw_masks(c, 1, uint64_t(tc.seed), 0, 0, true));
      std::vector<float> rv, ra, rl;
      decode_everything(net, tc.eval_chunks, rv, ra, rl);
      vpsnr += psnr(rv.data(), batch->video.data() + b * v, v);
      apsnr += psnr(ra.data(), batch->audio.data() + b * s, s);
      if (r.recon_clips < tc.eval_media_clips)
        write_reconstruction_media(out_dir / ("clip-" + std::to_string(r.recon_clips)), batch->video.data() + b * v,
                                   rv.data(), ra.data(), c.num_frames, c.frame_height, c.frame_width, s, lo.fps,
                                   int(std::lround(double(c.audio_samples_per_frame) * lo.fps)));
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
