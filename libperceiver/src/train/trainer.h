// perceiver-train's job: data, model, optimizer, logging, checkpoints that survive interruption,
// evaluation. The app only parses flags and installs signal handlers.
#pragma once

#include <atomic>
#include <filesystem>
#include <string>

#include "model/perceiver_net.h"
#include "perceiver/config.h"
#include "train/train_config.h"

namespace perceiver {

namespace dist {
class Communicator;
}

/// Exit codes of a training run.
enum TrainExit : int {
  kTrainOk = 0,
  kTrainError = 1,           // bad input, IO, ... (the message says which)
  kTrainSlow = 3,            // average throughput below --expected_average_throughput
  kTrainDiverged = 4,        // too many consecutive non-finite steps
  kTrainPeerFault = 5,       // another rank died or hung (MPI; the message names it)
};

/// The model config named by --model: a path, or a preset looked up next to the config file,
/// in ./configs and in the installed data directory.
ModelConfig resolve_model_config(const std::string& model, const std::string& config_file_path);

/// The prepared shard directory for `split` given --dataset_dir: either dataset_dir itself
/// holds shards (<dataset_dir>/<split>/shard-*.h5), or it is a Kinetics-layout folder that is
/// prepared once into <dataset_dir>/prepared-<T>x<D> (a lock file makes concurrent ranks wait).
std::filesystem::path prepared_shards(const std::string& dataset_dir, const std::string& split, int64_t num_frames,
                                      int64_t image_dim, int64_t num_workers);

/// Validation metrics (the label input masked: the model classifies).
struct EvalReport {
  int64_t clips = 0;
  double top1 = 0, top5 = 0, loss = 0, video_psnr = 0, audio_psnr = 0;  // PSNR in dB
  int64_t recon_clips = 0;
};

/// Evaluates on the shards in `val_dir`: loss on the step-0 output points, top-1/top-5, and full
/// (chunked) reconstructions of the first clips for PSNR, written as MP4/WAV/PNG for the first
/// eval_media_clips. Writes LOGDIR/eval/step-<step>/report.json and LOGDIR/eval.json.
EvalReport evaluate(PerceiverNet<float>& net, const TrainConfig& cfg, const std::filesystem::path& val_dir, int64_t step,
                    const std::filesystem::path& logdir);

/// Runs the job. `stop` is polled after every step (SIGTERM/SIGINT set it): the run finishes
/// the step, writes a checkpoint and returns kTrainOk. Throws perceiver::Error for bad input.
/// A single process (world 1, no MPI).
int run_training(const TrainConfig& cfg, const std::atomic<bool>& stop);

/// Data-parallel over `comm` (DESIGN.md #9): each rank trains on its shard of every global
/// batch of batch_size × world_size clips with masks keyed by the clip's place in the global
/// batch, so N ranks × b equal 1 rank × N·b up to float summation order; gradients are averaged
/// before the optimizer; rank 0 alone logs and writes LOGDIR (rank0.json, metrics, TensorBoard,
/// checkpoints, evaluation); every rank resumes from the same checkpoint, whatever world size
/// wrote it (the sampler position is converted through the count of clips seen). A stop
/// request on any rank stops all ranks after the same step (rank 0 saves). Threads per rank
/// default to cores / ranks on the node, bound to the rank's own cores.
int run_training(const TrainConfig& cfg, const std::atomic<bool>& stop, dist::Communicator& comm);

}  // namespace perceiver
