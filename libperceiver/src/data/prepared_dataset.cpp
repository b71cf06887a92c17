#include "data/prepared_dataset.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include "data/kinetics_index.h"
#include "data/media_hooks.h"
#include "data/shards.h"
#include "perceiver/error.h"

namespace perceiver {
namespace fs = std::filesystem;
namespace {

// An exclusive lock on a file for the lifetime of the object (flock; released on close/exit).
class FileLock {
 public:
  explicit FileLock(const fs::path& path) : fd_(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644)) {
    PCV_CHECK(fd_ >= 0, "cannot create lock file '", path.string(), "'");
    PCV_CHECK(::flock(fd_, LOCK_EX) == 0, "cannot lock '", path.string(), "'");
  }
  ~FileLock() { ::close(fd_); }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_;
};

bool has_shards(const fs::path& dir) { return fs::exists(dir / shard_file_name(0)); }

fs::path prepared_dir(const fs::path& dir, int64_t T, int64_t D) {
  return dir / ("prepared-" + std::to_string(T) + "x" + std::to_string(D));
}

// prep writes its skip report last: with it and the shards present the split is complete.
bool prepared_complete(const fs::path& out, KineticsSplit s, const std::string& split) {
  return has_shards(shard_dir(out, s)) && fs::exists(out / ("skipped_" + split + ".tsv"));
}

}  // namespace

bool needs_preparation(const std::string& dataset_dir, const std::string& split, int64_t T, int64_t D) {
  const fs::path dir(dataset_dir);
  const KineticsSplit s = parse_split(split);
  if (!fs::is_directory(dir) || has_shards(shard_dir(dir, s)) || !fs::exists(dir / "annotations")) return false;
  return !prepared_complete(prepared_dir(dir, T, D), s, split);
}

void check_preparable(const std::string& key, const std::string& dataset_dir, const std::string& split,
                      int64_t T, int64_t D) {
  if (media_hooks() || !needs_preparation(dataset_dir, split, T, D)) return;
  require_media(key + ": '" + dataset_dir + "' is a Kinetics-layout folder whose " + split + " split is not prepared (" +
                    (prepared_dir(dataset_dir, T, D) / split_name(parse_split(split))).string() +
                    " holds no finished shards) and preparing it decodes videos",
                "or prepare it with perceiver-prep on a build with media and pass the prepared folder");
}

fs::path prepared_shards(const std::string& dataset_dir, const std::string& split, int64_t T, int64_t D,
                         int64_t num_workers) {
  const fs::path dir(dataset_dir);
  PCV_CHECK(fs::is_directory(dir), "config key 'dataset_dir': '", dataset_dir, "' is not a directory");
  const KineticsSplit s = parse_split(split);
  if (has_shards(shard_dir(dir, s))) return shard_dir(dir, s);
  PCV_CHECK(fs::exists(dir / "annotations"), "config key 'dataset_dir': '", dataset_dir,
            "' holds neither prepared shards (", (shard_dir(dir, s) / shard_file_name(0)).string(),
            ") nor a Kinetics layout (annotations/*.csv). HINT: perceiver-prep synth --out DIR makes a synthetic one");
  const fs::path out = prepared_dir(dir, T, D);
  if (prepared_complete(out, s, split)) return shard_dir(out, s);
  check_preparable("config key 'dataset_dir'", dataset_dir, split, T, D);
  fs::create_directories(out);
  FileLock lock(out / ".prepare.lock");  // several ranks may start together: one prepares
  // Resumable: finished shards are kept, so a rank that waited on the lock finds them done.
  media_hooks()->prepare(PrepareRequest{dir, out, split, T, D, num_workers});
  return shard_dir(out, s);
}

}  // namespace perceiver
