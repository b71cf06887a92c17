// A structure-aware encoding of HDF5 files for fuzzing our readers. An input is a short program
// of operations (make a group, an attribute, a dataset or a link, of any type, dataspace, layout
// and value), replayed through the HDF5 API into an in-memory file. Every input therefore makes
// a well-formed HDF5 file and the fuzzer explores what our readers do with well-formed but
// hostile content (arrays where scalars belong, wrong types, huge claimed sizes, external
// storage, links, odd layouts), not the HDF5 library's parser of raw bytes: libhdf5 1.10 has
// known crashes on corrupt files that this project cannot fix.
//
// Program bytes, repeated until the input ends (missing bytes read as zero):
//   op      1 byte  (Op, modulo their count)
//   name    1 byte: index into names(), or 255 then a length byte and the characters
//   kGroup      name
//   kAttr       name of the object, name of the attribute, type, space, value
//   kDataset    name, type, layout, space, value
//   kSoftLink   name, name of the target
//   kExternal   name (a link into a file that does not exist)
//   type    1 byte (Type); kFixedString is followed by its length byte
//   space   1 byte kind (scalar, null, simple); simple: rank byte (1..5), then per dimension a
//           byte: < 224 is the size, 224..239 is followed by the size in 2 bytes little-endian,
//           240.. picks from {0, 4000, 2^16, 2^20, 2^24, 2^32, 2^40, ...}
//   layout  1 byte (Layout; chunked layouts make the first dimension unlimited, so it may be 0)
//   value   2 bytes little-endian length, then the bytes; element bytes are repeated to fill
//           the dataspace; strings are split at '\0'
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/params.h"

namespace fuzz::h5 {

enum Op : uint8_t { kGroup, kAttr, kDataset, kSoftLink, kExternal, kOpCount };
enum Type : uint8_t {
  kI8, kU8, kI16, kU16, kI32, kU32, kI64, kU64, kF32, kF64,
  kVlenString, kFixedString, kCompound, kArray, kEnum, kTypeCount
};
enum Layout : uint8_t { kContiguous, kChunked, kChecksummed, kDeflated, kCompact, kUnwritten, kLayoutCount };

/// A dataspace: scalar, null, or simple with these dimensions.
struct Space {
  enum Kind : uint8_t { kScalar, kNull, kSimple } kind = kScalar;
  std::vector<uint64_t> dims;
  static Space scalar() { return {}; }
  static Space simple(std::vector<uint64_t> d) { return {kSimple, std::move(d)}; }
};

/// The names our readers look for (datasets as full paths, attributes as keys).
const std::vector<std::string>& names();

/// The parameters of the model the fuzz target loads checkpoints into (HF-style names).
struct TensorSpec {
  std::string name;
  std::vector<uint64_t> dims;
};
const std::vector<TensorSpec>& model_tensors();
/// Those parameters as a registry.
perceiver::ParamRegistry model_registry();

/// Writes programs, for the seed corpus.
class Program {
 public:
  Program& group(const std::string& name);
  Program& attr(const std::string& object, const std::string& key, Type type, const Space& space,
                const std::string& value);
  Program& attr_int(const std::string& object, const std::string& key, int64_t v);
  Program& attr_double(const std::string& object, const std::string& key, double v);
  Program& attr_string(const std::string& object, const std::string& key, const std::string& v);
  Program& attr_strings(const std::string& object, const std::string& key, const std::vector<std::string>& v);
  Program& dataset(const std::string& name, Type type, const Space& space, Layout layout, const std::string& value);
  Program& soft_link(const std::string& name, const std::string& target);
  const std::string& bytes() const { return out_; }

 private:
  void name(const std::string& n);
  void type(Type t);
  void space(const Space& s);
  void value(const std::string& v);
  std::string out_;
};

/// Replays a program into an HDF5 file and returns the file's bytes (empty if HDF5 could not
/// make a file at all). Operations HDF5 refuses are skipped.
std::vector<uint8_t> build(const uint8_t* data, size_t size);

}  // namespace fuzz::h5
