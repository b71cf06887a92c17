// Training checkpoints (DESIGN.md #8): one HDF5 file per save, LOGDIR/checkpoints/ckpt-<step>.h5,
// readable from Python with h5py:
//   /params/<HF name>             f32, the model's parameters
//   /optimizer/<state>/<HF name>  f32, the optimizer's state tensors (names from Optimizer::state_tensors)
//   attributes on "/": format "libperceiver-checkpoint", format_version, step, epoch,
//     sampler_epoch, sampler_batch (the loader's next position), seed, optimizer, optimizer_steps,
//     world_size, sampler_global_batch (clips per sampler batch), config_yaml (the effective training config), created (ISO time)
// Written to <file>.tmp, flushed and renamed, so a reader sees a whole file or none.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/params.h"
#include "optim/optimizer.h"

namespace perceiver {

inline constexpr int64_t kCheckpointFormatVersion = 1;

/// Everything besides tensors that a resumed run needs to continue exactly.
struct TrainingState {
  int64_t step = 0;            // optimizer steps done
  int64_t epoch = 0;           // for logs
  int64_t sampler_epoch = 0;   // the loader position of the next batch
  int64_t sampler_batch = 0;
  int64_t sampler_global_batch = 0;  // clips per sampler batch (batch_size × world_size) of the writer
  uint64_t seed = 0;
  int64_t world_size = 1;
  std::string optimizer;       // name, checked on resume
  std::string config_yaml;     // the effective config of the run that wrote it
};

/// Writes atomically; returns the final path. Throws naming the file on failure (nothing left
/// behind but possibly the .tmp, which is removed).
std::filesystem::path save_checkpoint(const std::filesystem::path& path, ParamStore<float>& params,
                                      Optimizer* optimizer, const TrainingState& state);

/// Restores parameters, optimizer state and TrainingState. Throws naming the file and the
/// tensor or attribute at fault (missing, mis-shaped, wrong version with a HINT).
TrainingState load_checkpoint(const std::filesystem::path& path, ParamStore<float>& params, Optimizer* optimizer);

/// LOGDIR/checkpoints/ckpt-<step>.h5 (step zero-padded to 8 digits so names sort by step).
std::filesystem::path checkpoint_path(const std::filesystem::path& logdir, int64_t step);

/// The checkpoints in LOGDIR/checkpoints, newest (highest step) first.
std::vector<std::filesystem::path> list_checkpoints(const std::filesystem::path& logdir);

/// The newest checkpoint that opens and has every required attribute; invalid ones are skipped
/// with one warning line each on `warnings`. Does not load tensors.
std::optional<std::filesystem::path> newest_valid_checkpoint(const std::filesystem::path& logdir,
                                                             std::vector<std::string>* warnings);

/// Deletes all but the newest `keep` checkpoints (keep <= 0: keep all).
void prune_checkpoints(const std::filesystem::path& logdir, int64_t keep);

}  // namespace perceiver
