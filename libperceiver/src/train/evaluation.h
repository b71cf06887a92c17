// Evaluation on the validation shards: metrics (top-k, loss, PSNR of full reconstructions) and
// what people want to look at (MP4/WAV/PNG of a few clips).
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
/// step-0 output points, top-1/top-5, and full (chunked) reconstructions of the first clips for
/// PSNR, written as MP4/WAV/PNG for the first eval_media_clips. Writes
/// LOGDIR/eval/step-<step>/report.json and LOGDIR/eval.json.
EvalReport evaluate(PerceiverNet<float>& net, const TrainConfig& cfg, const LoaderOptions& val, int64_t step,
                    const std::filesystem::path& logdir);

/// Peak signal-to-noise ratio in dB of `pred` against `target` for signals whose range is
/// `peak` (1 for video in [0,1]; for audio the convention of the paper: peak 1 as well).
double psnr(const float* pred, const float* target, int64_t n, double peak = 1.0);

/// For each row of logits [B, L]: is the label among the top k? Returns the count of hits.
int64_t topk_hits(const float* logits, const int64_t* labels, int64_t batch, int64_t num_labels, int64_t k);

/// Writes, for one clip: <stem>.mp4 with the original (left) and the reconstruction (right) side
/// by side at `fps`, with the reconstructed audio track; <stem>.wav (the reconstructed audio);
/// <stem>_frames.png (a grid: originals in the top row, reconstructions below, up to 8 frames).
/// video/recon: f32 [T,H,W,3] in [0,1] (clamped); audio: f32 [S] mono at `sample_rate`.
void write_reconstruction_media(const std::filesystem::path& stem, const float* video, const float* recon_video,
                                const float* recon_audio, int64_t frames, int64_t height, int64_t width,
                                int64_t audio_samples, double fps, int sample_rate);

}  // namespace perceiver
