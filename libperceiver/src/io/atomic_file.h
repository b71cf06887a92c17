// Publishing a file atomically: it is written under a temporary name in the target's folder,
// fsync'ed, renamed over the target and the folder is synced, so a reader (or a crash at any
// point) sees the old file or the whole new one, never a part of it. Write errors (disk full,
// `ulimit -f`) are plain POSIX errors reported with strerror and the file's name; the temporary
// is removed and the target left as it was.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string>

namespace perceiver {

enum class TempName {
  /// "<target>.tmp": for a folder with one writer (a run's checkpoints, prep's shards), whose
  /// next write of the same target replaces a leftover of a killed process.
  kFixed,
  /// "<target>.tmp-<random>", created exclusively: concurrent writers of the same target and a
  /// symlink planted at a predictable name cannot make us write anywhere else.
  kUnique,
};

/// Writes `path` through a temporary file that `write(tmp)` fills (creating it is the callback's
/// job for kFixed; for kUnique the empty file exists already and may be truncated). Throws
/// perceiver::Error naming `path` on failure.
void publish_file(const std::filesystem::path& path, TempName temp,
                  const std::function<void(const std::filesystem::path& tmp)>& write);

/// publish_file with the whole content in memory.
void publish_bytes(const std::filesystem::path& path, TempName temp, std::span<const uint8_t> bytes);

/// Makes a file's data durable (fsync). Throws naming the file.
void fsync_file(const std::filesystem::path& path);

/// Why an output folder cannot be made: "'DIR' is a file, not a folder", or "'DIR': 'FILE' is a
/// file, not a folder" where an ancestor is; empty where nothing is in the way. The tools check
/// their output folders with it before any work (creating one fails only later, naming a subpath).
std::string output_folder_problem(const std::filesystem::path& dir);

}  // namespace perceiver
