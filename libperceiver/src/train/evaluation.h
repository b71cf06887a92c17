// Evaluation on the validation shards: metrics (top-k, loss, PSNR of full reconstructions) and
// what people want to look at (MP4/WAV/PNG of a few clips, written by the media component:
// media/reconstruction_media.h through data/media_hooks.h).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "data/loader.h"
#include "model/perceiver_net.h"
#include "train/train_config.h"

namespace perceiver {

/// Validation metrics (the label input masked: the model classifies).
struct EvalReport {
  int64_t clips = 0;
  double top1 = 0, top5 = 0, loss = 0, video_psnr = 0, audio_psnr = 0;  // PSNR in dB
  int64_t recon_clips = 0;
};

/// Evaluates on the validation clips of `val` (its source and shard_dir, or dataset_dir and
/// split, name them; sizes and sampling are set here from the model and `cfg`): loss on the
/// step-0 output points, top-1/top-5, and full (chunked) reconstructions of eval_recon_clips
/// clips spread over the set for PSNR (take_for_reconstruction), written as MP4/WAV/PNG for the
/// first eval_media_clips of them (evaluation_media_clips(cfg) > 0
/// without a registered media component throws the one-line "no media support" error before
/// any work). Writes LOGDIR/eval/step-<step>/report.json and LOGDIR/eval.json.
EvalReport evaluate(PerceiverNet<float>& net, const TrainConfig& cfg, const LoaderOptions& val, int64_t step,
                    const std::filesystem::path& logdir);

/// Whether the evaluation reconstructs validation clip i (in loader order), `taken` clips having
/// been reconstructed before it: `want` of `total` clips, evenly spaced (i >= taken * total / want).
/// Validation clips come sorted by class, so the first clips alone would measure one class.
bool take_for_reconstruction(int64_t i, int64_t taken, int64_t want, int64_t total);

/// Clips whose media an evaluation with `cfg` writes: min(eval_recon_clips, eval_media_clips).
int64_t evaluation_media_clips(const TrainConfig& cfg);

/// Peak signal-to-noise ratio in dB of `pred` against `target` for signals whose range is
/// `peak` (1 for video in [0,1]; for audio the convention of the paper: peak 1 as well).
double psnr(const float* pred, const float* target, int64_t n, double peak = 1.0);

/// For each row of logits [B, L]: is the label among the top k? Returns the count of hits.
int64_t topk_hits(const float* logits, const int64_t* labels, int64_t batch, int64_t num_labels, int64_t k);

}  // namespace perceiver
