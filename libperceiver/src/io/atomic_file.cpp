#include "io/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <random>
#include <string>
#include <system_error>

#include "perceiver/error.h"

namespace perceiver {
namespace {

namespace fs = std::filesystem;

// strerror is not thread-safe; the generic category's message is.
std::string errno_text(int err) { return std::error_code(err, std::generic_category()).message(); }

// O_NOFOLLOW and O_EXCL: a symlink planted at the temporary name is an error, never followed.
int create_exclusive(const fs::path& p) {
  return ::open(p.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
}

fs::path create_unique_sibling(const fs::path& path) {
  std::random_device rd;
  for (int attempt = 0; attempt < 64; ++attempt) {
    char suffix[24];
    std::snprintf(suffix, sizeof suffix, ".tmp-%08x", unsigned(rd()));
    fs::path tmp = path;
    tmp += suffix;
    const int fd = create_exclusive(tmp);
    if (fd >= 0) {
      ::close(fd);
      return tmp;
    }
    PCV_CHECK(errno == EEXIST, "cannot create a temporary file beside '", path.string(), "': ", errno_text(errno));
  }
  PCV_FAIL("cannot find a free temporary name beside '", path.string(), "'");
}

void write_all(const fs::path& p, std::span<const uint8_t> bytes) {
  const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0666);
  PCV_CHECK(fd >= 0, "cannot create '", p.string(), "': ", errno_text(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : ENOSPC;
      ::close(fd);
      PCV_FAIL("cannot write '", p.string(), "' (", done, " of ", bytes.size(), " bytes written): ", errno_text(err));
    }
    done += size_t(n);
  }
  PCV_CHECK(::close(fd) == 0, "cannot write '", p.string(), "': ", errno_text(errno));
}

// Makes the rename durable. Best effort: the file is complete either way, and some file systems
// refuse fsync on directories.
void fsync_dir(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  (void)::fsync(fd);
  ::close(fd);
}

}  // namespace

void fsync_file(const fs::path& p) {
  const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  PCV_CHECK(fd >= 0, "cannot open '", p.string(), "' to sync it: ", errno_text(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  PCV_CHECK(rc == 0, "fsync failed on '", p.string(), "': ", errno_text(err));
}

void publish_file(const fs::path& path, TempName temp, const std::function<void(const fs::path& tmp)>& write) {
  const fs::path dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
  fs::path tmp;
  if (temp == TempName::kUnique) {
    tmp = create_unique_sibling(path);
  } else {
    tmp = path;
    tmp += ".tmp";
    std::error_code ec;
    fs::remove(tmp, ec);  // a leftover of a killed writer (a symlink is removed, not followed)
  }
  try {
    write(tmp);
    fsync_file(tmp);
    std::error_code ec;
    fs::rename(tmp, path, ec);
    PCV_CHECK(!ec, "cannot rename '", tmp.string(), "' to '", path.string(), "': ", ec.message());
  } catch (...) {
    std::error_code ec;
    fs::remove(tmp, ec);
    throw;
  }
  fsync_dir(dir);
}

void publish_bytes(const fs::path& path, TempName temp, std::span<const uint8_t> bytes) {
  publish_file(path, temp, [&](const fs::path& tmp) { write_all(tmp, bytes); });
}

std::string output_folder_problem(const fs::path& dir) {
  std::error_code ec;
  for (fs::path p = dir; !p.empty(); p = p.parent_path()) {
    if (fs::exists(p, ec)) {
      if (fs::is_directory(p, ec)) return "";
      return "'" + dir.string() + "'" + (p == dir ? std::string() : ": '" + p.string() + "'") +
             " is a file, not a folder";
    }
    if (p == p.parent_path()) break;  // the root
  }
  return "";
}

}  // namespace perceiver
