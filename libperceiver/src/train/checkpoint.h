// Training checkpoints (DESIGN.md #8): one HDF5 file per save, LOGDIR/checkpoints/ckpt-<step>.h5,
// readable from Python with h5py:
//   /params/<HF name>             f32, the model's parameters
//   /optimizer/<state>/<HF name>  f32, the optimizer's state tensors (names from Optimizer::state_tensors)
//   attributes on "/": format "libperceiver-checkpoint", format_version, step, epoch,
//     sampler_epoch, sampler_batch (the loader's next position), seed, optimizer, optimizer_steps,
//     world_size, sampler_global_batch (clips per sampler batch), config_yaml (the effective training config),
//     model_yaml (the effective model config, every key; absent in older files), class_names (the
//     training set's classes by label index, strings; absent in older files), created (ISO time)
// Format version 2 stores every tensor with HDF5's Fletcher32 checksum (verified by every
// reader, h5py too); version 1 files (no checksums) still load. Every load refuses a tensor
// that fails its checksum or holds NaN or infinity, naming it, and attributes outside their
// ranges; saving refuses a state that is not finite, so a checkpoint is always usable.
// Built in memory and published atomically (io/atomic_file.h): a reader sees a whole file or
// none, and a full disk leaves the previous checkpoints as they were.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/params.h"
#include "io/weights.h"  // kCheckpointFormatVersion: one /params layout for both kinds of file
#include "optim/optimizer.h"
#include "perceiver/config.h"

namespace perceiver {

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
  std::string model_yaml;      // its model config (model_config_yaml); empty: not stored (older files)
  std::vector<std::string> class_names;  // the training set's classes by label index; empty: not stored
};

/// Writes atomically; returns the final path. Throws naming the file on failure, and naming the
/// tensor if a parameter or optimizer state holds NaN or infinity (nothing is written then).
std::filesystem::path save_checkpoint(const std::filesystem::path& path, ParamStore<float>& params,
                                      Optimizer* optimizer, const TrainingState& state);

/// Restores parameters, optimizer state and TrainingState. Throws naming the file and the
/// tensor or attribute at fault (missing, mis-shaped, failed checksum, not finite, out of range,
/// wrong version with a HINT); on any error the model and optimizer are left untouched.
TrainingState load_checkpoint(const std::filesystem::path& path, ParamStore<float>& params, Optimizer* optimizer);

/// LOGDIR/checkpoints/ckpt-<step>.h5 (step zero-padded to 8 digits so names sort by step).
std::filesystem::path checkpoint_path(const std::filesystem::path& logdir, int64_t step);

/// The checkpoints in LOGDIR/checkpoints, newest (highest step) first.
std::vector<std::filesystem::path> list_checkpoints(const std::filesystem::path& logdir);

/// The TrainingState of a checkpoint (attributes only, range-checked; no tensors).
TrainingState read_checkpoint_state(const std::filesystem::path& path);

/// The model config the checkpoint at `path` stores (its model_yaml), or nullopt for a file
/// written before checkpoints stored it. Throws naming the file and attribute if it is invalid.
std::optional<ModelConfig> stored_model_config(const std::filesystem::path& path);

/// The newest checkpoint that opens, has every required attribute in range, and whose tensors
/// pass their checksums and are finite; invalid ones are skipped with one warning line each on
/// `warnings`. Model-independent: load_checkpoint still checks names and shapes.
std::optional<std::filesystem::path> newest_valid_checkpoint(const std::filesystem::path& logdir,
                                                             std::vector<std::string>* warnings);

/// Called after `written` was saved: deletes the checkpoints with a lower step than it, except
/// the newest keep - 1 of them (keep <= 0: keep all). Checkpoints with a higher step (an
/// earlier run's, or an unreadable one that --resume auto skipped) are never counted or
/// deleted, so the file just written, the newest valid state, always survives.
void prune_checkpoints(const std::filesystem::path& logdir, int64_t keep, const std::filesystem::path& written);

/// For a run that starts afresh (--resume never) in `logdir`: with no checkpoints there it does
/// nothing; otherwise it throws naming them and the choices, unless `overwrite`, when it deletes
/// them (if `remove`, i.e. on the rank that owns LOGDIR) and returns their paths.
std::vector<std::filesystem::path> start_afresh(const std::filesystem::path& logdir, bool overwrite, bool remove);

}  // namespace perceiver
