// Where the trainer's shards come from (--dataset_dir): a folder of prepared HDF5 shards, or a
// Kinetics-layout folder of videos that is prepared once, under a file lock, into
// <dataset_dir>/prepared-<T>x<D> so that ranks starting together prepare it only once.
// Preparing decodes videos: the media component does it (data/media_hooks.h); without it a
// folder that still needs preparing is refused with one line.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace perceiver {

/// The prepared shard directory for `split`: either dataset_dir itself holds shards
/// (<dataset_dir>/<split>/shard-*.h5), or it is a Kinetics-layout folder that is prepared once
/// into <dataset_dir>/prepared-<T>x<D> (a lock file makes concurrent ranks wait).
std::filesystem::path prepared_shards(const std::string& dataset_dir, const std::string& split, int64_t num_frames,
                                      int64_t image_dim, int64_t num_workers);

/// True when prepared_shards would have to prepare `split` (a Kinetics layout without finished
/// shards of T×D frames): a run checks it before any work where no media are registered.
bool needs_preparation(const std::string& dataset_dir, const std::string& split, int64_t num_frames,
                       int64_t image_dim);

/// Throws the one-line "no media support" error (data/media_hooks.h) when `split` of
/// dataset_dir needs preparing and no media component is registered; `key` names the setting
/// (e.g. "config key 'dataset_dir'").
void check_preparable(const std::string& key, const std::string& dataset_dir, const std::string& split,
                      int64_t num_frames, int64_t image_dim);

}  // namespace perceiver
