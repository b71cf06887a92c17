// perceiver-train's job: data, model, optimizer, logging, checkpoints that survive interruption,
// evaluation. The app only parses flags and installs signal handlers.
#pragma once

#include <atomic>

#include "dist/communicator.h"
#include "train/train_config.h"

namespace perceiver {


/// Exit codes of a training run.
enum TrainExit : int {
  kTrainOk = 0,
  kTrainError = 1,           // bad input, IO, ... (the message says which)
  kTrainSlow = 3,            // average throughput below --expected_average_throughput
  kTrainDiverged = 4,        // too many consecutive non-finite steps
  kTrainPeerFault = dist::kPeerFaultExit,  // another rank died or hung (MPI; the message names it)
};

/// Throws the one-line "no media support" error (data/media_hooks.h) when `cfg` asks for what
/// only the media component does and none is registered: data_source videos, evaluation media
/// (do_eval with eval_media_clips > 0), or a Kinetics-layout dataset_dir still to be prepared.
/// run_training calls it before any work.
void check_media_requests(const TrainConfig& cfg);

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
