// A small owner of HDF5 files for checkpoints, prepared data sets and parity fixtures.
// Every hid_t has a move-only owner with its matching closer (STYLE.md §5); every failing call
// throws perceiver::Error naming the call, the file and the dataset.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <hdf5.h>

#include "perceiver/tensor.h"

namespace perceiver {

/// Move-only hid_t with a closer (H5Fclose, H5Dclose, H5Sclose, H5Gclose, H5Aclose, H5Tclose).
class H5Handle {
 public:
  H5Handle() = default;
  H5Handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  H5Handle(H5Handle&& o) noexcept : id_(o.id_), close_(o.close_) { o.id_ = H5I_INVALID_HID; }
  H5Handle& operator=(H5Handle&& o) noexcept {
    std::swap(id_, o.id_);
    std::swap(close_, o.close_);
    return *this;
  }
  H5Handle(const H5Handle&) = delete;
  H5Handle& operator=(const H5Handle&) = delete;
  ~H5Handle() {
    if (id_ >= 0 && close_) close_(id_);
  }
  hid_t get() const { return id_; }

 private:
  hid_t id_ = H5I_INVALID_HID;
  herr_t (*close_)(hid_t) = nullptr;
};

class H5File {
 public:
  /// Creates (truncates) a file for writing.
  static H5File create(const std::string& path);
  /// Opens an existing file; throws naming the path if it is missing or not HDF5.
  static H5File open(const std::string& path, bool writable = false);

  const std::string& path() const { return path_; }
  bool has(const std::string& name) const;
  /// Dimensions of a dataset.
  std::vector<int64_t> shape(const std::string& name) const;
  /// Names of the direct members of a group ("/" for the root), sorted.
  std::vector<std::string> list(const std::string& group) const;

  /// Writes a dataset (creating intermediate groups). dims empty means a scalar.
  template <class T>
  void write(const std::string& name, const T* data, const std::vector<int64_t>& dims);
  void write_string(const std::string& name, const std::string& value);
  void write_strings(const std::string& name, const std::vector<std::string>& values);

  /// Reads a whole dataset, converting from its stored numeric type (e.g. f64 → f32).
  template <class T>
  std::vector<T> read(const std::string& name) const;
  /// Reads into a caller's buffer of exactly the dataset's size.
  template <class T>
  void read_into(const std::string& name, T* out, int64_t count) const;
  std::string read_string(const std::string& name) const;
  std::vector<std::string> read_strings(const std::string& name) const;

  /// Attributes on an object ("/" for the file).
  void set_attr(const std::string& object, const std::string& key, const std::string& value);
  void set_attr(const std::string& object, const std::string& key, int64_t value);
  void set_attr(const std::string& object, const std::string& key, double value);
  bool has_attr(const std::string& object, const std::string& key) const;
  std::string attr_string(const std::string& object, const std::string& key) const;
  int64_t attr_int(const std::string& object, const std::string& key) const;
  double attr_double(const std::string& object, const std::string& key) const;

  /// Flushes buffers to the file (before an atomic rename).
  void flush();

 private:
  H5File(H5Handle file, std::string path) : file_(std::move(file)), path_(std::move(path)) {}
  H5Handle file_;
  std::string path_;
};

}  // namespace perceiver
