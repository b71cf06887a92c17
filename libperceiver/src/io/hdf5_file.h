// A small owner of HDF5 files for checkpoints, prepared data sets and parity fixtures.
// Every hid_t has a move-only owner with its matching closer (STYLE.md §5); every failing call
// throws perceiver::Error naming the call, the file and the dataset.
//
// Files are untrusted input. Every read checks the stored dataspace and type class before HDF5
// copies anything (an attribute read as one integer must hold exactly one integer), element
// counts are bounded by the bytes actually stored, and open() refuses files whose data would
// come from elsewhere: external links, external raw storage and virtual datasets.
//
// Writers build files in memory (create_in_memory) and publish them with commit(): HDF5 never
// writes to disk itself, so a full disk is a plain write error and never leaves HDF5 holding a
// half-closed file (which crashes at exit).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <hdf5.h>

#include "io/atomic_file.h"
#include "perceiver/error.h"
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
  /// Closes now and returns the closer's result, which the destructor cannot report.
  herr_t close() {
    const herr_t r = id_ >= 0 && close_ ? close_(id_) : 0;
    id_ = H5I_INVALID_HID;
    return r;
  }

 private:
  hid_t id_ = H5I_INVALID_HID;
  herr_t (*close_)(hid_t) = nullptr;
};

/// The innermost messages of HDF5's error stack for this thread ("data error detected by
/// Fletcher32 checksum"), joined by "; " and cleared; empty if none.
std::string h5_error_detail();
/// " (HDF5: <h5_error_detail()>)", or "" when HDF5 recorded no reason.
std::string h5_reason_suffix();
/// Turns off HDF5's printing of error stacks for the calling thread (errors become exceptions).
void h5_silence_errors();
/// A variable-length UTF-8 string type.
H5Handle h5_vlen_string_type();

class H5File {
 public:
  /// Creates (truncates) a file on disk for writing (fixtures, dumps).
  static H5File create(const std::string& path);
  /// A new file held in memory; commit() publishes it at `path`. With `track_times` false the
  /// objects carry no timestamps, so equal content gives equal bytes. `chunk_index_k` sizes the
  /// B-tree nodes that index chunks (2k entries): 1 suits files of one chunk per dataset
  /// (tensors; HDF5's default of 32 would add ~3 kB per dataset), 32 datasets of many chunks.
  static H5File create_in_memory(const std::string& path, bool track_times = true, unsigned chunk_index_k = 1);
  /// Opens an existing file; throws naming the path if it is missing, not HDF5, or refers to
  /// data outside itself (external links, external storage, virtual datasets).
  static H5File open(const std::string& path, bool writable = false);

  /// Writes an in-memory file to its path atomically (io/atomic_file.h) and closes it.
  void commit(TempName temp = TempName::kFixed);

  const std::string& path() const { return path_; }
  /// The raw handle, for calls this class does not wrap (e.g. chunk reads of shards).
  hid_t id() const { return file_.get(); }
  bool has(const std::string& name) const;
  /// Dimensions of a dataset.
  std::vector<int64_t> shape(const std::string& name) const;
  /// Names of the direct members of a group ("/" for the root), sorted.
  std::vector<std::string> list(const std::string& group) const;
  /// Opens a dataset; throws naming the file and dataset if it is missing or not a dataset.
  H5Handle dataset(const std::string& name) const;
  /// True if the dataset's data carries HDF5's Fletcher32 checksum (verified on every read).
  bool has_checksum(const std::string& name) const;

  /// Writes a dataset (creating intermediate groups). dims empty means a scalar. Non-empty
  /// arrays are stored with a Fletcher32 checksum, which every reader (h5py too) verifies.
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
  /// A 1-D dataset of variable-length strings.
  std::vector<std::string> read_strings(const std::string& name) const;

  /// Attributes on an object ("/" for the file).
  void set_attr(const std::string& object, const std::string& key, const std::string& value);
  void set_attr(const std::string& object, const std::string& key, int64_t value);
  void set_attr(const std::string& object, const std::string& key, double value);
  /// A 1-D attribute of variable-length strings (at least one: HDF5 has no empty attribute).
  void set_attr(const std::string& object, const std::string& key, const std::vector<std::string>& values);
  bool has_attr(const std::string& object, const std::string& key) const;
  /// Scalar attributes: exactly one stored element of the right type class (integer; integer
  /// or float; string), else an error naming the file, object and attribute and what it holds.
  std::string attr_string(const std::string& object, const std::string& key) const;
  int64_t attr_int(const std::string& object, const std::string& key) const;
  double attr_double(const std::string& object, const std::string& key) const;
  /// A 1-D attribute of 1..max_count variable-length strings.
  std::vector<std::string> attr_strings(const std::string& object, const std::string& key, int64_t max_count) const;

  /// Flushes buffers to the file.
  void flush();

 private:
  H5File(H5Handle file, std::string path, bool in_memory, bool track_times)
      : file_(std::move(file)), path_(std::move(path)), in_memory_(in_memory), track_times_(track_times) {}
  H5Handle open_attr(const std::string& object, const std::string& key) const;
  H5Handle file_;
  std::string path_;
  bool in_memory_ = false;
  bool track_times_ = true;
};

}  // namespace perceiver

/// Evaluates an HDF5 call; a negative result throws perceiver::Error with the given words
/// (streamed like PCV_CHECK's) followed by HDF5's own reason. Evaluates to the result otherwise.
#define PCV_H5(call, ...)                                               \
  [&] {                                                                 \
    auto pcv_h5_r_ = (call);                                            \
    if (pcv_h5_r_ < 0) PCV_FAIL(__VA_ARGS__, ::perceiver::h5_reason_suffix()); \
    return pcv_h5_r_;                                                   \
  }()
