#include "data/prepared_dataset.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstdio>

#include "data/prep.h"
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

}  // namespace

fs::path prepared_shards(const std::string& dataset_dir, const std::string& split, int64_t T, int64_t D,
                         int64_t num_workers) {
  const fs::path dir(dataset_dir);
  PCV_CHECK(fs::is_directory(dir), "config key 'dataset_dir': '", dataset_dir, "' is not a directory");
  const KineticsSplit s = parse_split(split);
  if (has_shards(shard_dir(dir, s))) return shard_dir(dir, s);
  PCV_CHECK(fs::exists(dir / "annotations"), "config key 'dataset_dir': '", dataset_dir,
            "' holds neither prepared shards (", (shard_dir(dir, s) / shard_file_name(0)).string(),
            ") nor a Kinetics layout (annotations/*.csv). HINT: perceiver-prep synth --out DIR makes a synthetic one");
  const fs::path out = dir / ("prepared-" + std::to_string(T) + "x" + std::to_string(D));
  // prep writes its skip report last: with it and the shards present the split is complete.
  if (has_shards(shard_dir(out, s)) && fs::exists(out / ("skipped_" + split + ".tsv"))) return shard_dir(out, s);
  fs::create_directories(out);
  FileLock lock(out / ".prepare.lock");  // several ranks may start together: one prepares
  PrepOptions po;
  po.dataset_dir = dir;
  po.output_dir = out;
  po.split = s;
  po.num_frames = int(T);
  po.image_dim = int(D);
  po.num_workers = int(num_workers);
  po.on_progress = console_progress(stdout, "preparing " + split + " shards");
  const PrepSummary sum = prepare_kinetics(po);  // resumable: finished shards are kept
  std::printf("prepared %s: %ld clips in %ld shards (%ld skipped, %ld missing; report %s)\n", split.c_str(),
              long(sum.written), long(sum.shards), long(sum.skipped), long(sum.missing), sum.report.c_str());
  return shard_dir(out, s);
}

}  // namespace perceiver
