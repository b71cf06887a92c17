// Reading and writing safetensors files (https://github.com/huggingface/safetensors).
// Layout: an 8-byte little-endian u64 N, N bytes of UTF-8 JSON
//   {"__metadata__": {str: str}, "<name>": {"dtype", "shape", "data_offsets": [begin, end]}, ...}
// padded with spaces, then the tensor bytes (little-endian, row-major), offsets relative to the
// end of the header. Files are untrusted input: the reader enforces the rules of the reference
// Rust implementation (header ≤ 100 MB, offsets contiguous and covering the data exactly, byte
// counts matching dtype × shape) and every error names the file and, where there is one, the
// tensor. The writer reproduces the reference serializer byte for byte.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace perceiver {

/// Element types safetensors defines. Only the floating ones convert to float/double.
/// Declared in the reference implementation's order: its writer sorts by this order, descending.
enum class StDtype { kBool, kU8, kI8, kF8E5M2, kF8E4M3, kI16, kU16, kF16, kBF16, kI32, kU32, kF32, kF64, kI64, kU64 };

const char* st_dtype_name(StDtype dtype);
int st_dtype_size(StDtype dtype);
bool st_dtype_is_float(StDtype dtype);  // F16, BF16, F32, F64
/// Parses "F32", "BF16", ...; throws naming `where` for an unknown name.
StDtype st_dtype_from_name(std::string_view name, const std::string& where);

/// One tensor of a header. Offsets are bytes into the data section.
struct StTensorInfo {
  std::string name;
  StDtype dtype = StDtype::kF32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;
  int64_t numel() const;
};

/// A parsed, validated header: tensors in data-offset order and the metadata map.
struct StHeader {
  std::vector<StTensorInfo> tensors;
  std::map<std::string, std::string> metadata;
  bool has_metadata = false;  // "__metadata__" present (possibly empty)
  uint64_t data_size = 0;     // bytes the tensors cover
};

/// The reference implementation's limit on N.
inline constexpr uint64_t kSafetensorsMaxHeader = 100'000'000;

/// Parses and validates header JSON. `data_size` is the size of the data section, which the
/// tensors must cover exactly; nullopt (a header kept apart from its file) checks only that the
/// tensors are contiguous from 0 and takes the size from them. `path` names the file in errors.
StHeader parse_safetensors_header(std::string_view json, std::optional<uint64_t> data_size, const std::string& path);

/// A whole safetensors file read into memory (a plain read: the data section is validated
/// against the header before it is allocated, and is immune to the file changing under us).
class SafetensorsFile {
 public:
  /// Reads and validates; throws perceiver::Error naming the file (and tensor) on any problem.
  static SafetensorsFile open(const std::string& path);

  const std::string& path() const { return path_; }
  const StHeader& header() const { return header_; }
  const std::vector<StTensorInfo>& tensors() const { return header_.tensors; }
  /// The header exactly as stored (N bytes, padding included).
  const std::string& header_json() const { return header_json_; }
  /// nullptr if absent.
  const StTensorInfo* find(std::string_view name) const;
  /// The stored little-endian bytes of one tensor.
  std::span<const uint8_t> raw(const StTensorInfo& t) const;
  /// Converts one floating tensor to float or double (bit-exact for F16/BF16/F32 → float and
  /// for every dtype → double; F64 → float rounds). `count` must equal numel().
  void read_float(const StTensorInfo& t, float* out, int64_t count) const;
  void read_double(const StTensorInfo& t, double* out, int64_t count) const;

 private:
  SafetensorsFile() = default;
  std::string path_;
  std::string header_json_;
  StHeader header_;
  std::vector<uint8_t> data_;
};

/// A tensor to write: its bytes are already in `dtype`, little-endian, row-major.
struct StOutTensor {
  std::string name;
  StDtype dtype = StDtype::kF32;
  std::vector<int64_t> shape;
  std::span<const uint8_t> bytes;
};

/// The header the reference writer (Python `safetensors.torch.save_file`) produces: tensors
/// sorted by dtype (descending) then name, contiguous offsets, "__metadata__" first when
/// given, compact JSON padded with spaces to a multiple of 8. Returns the padded header.
std::string canonical_safetensors_header(std::vector<StOutTensor>& tensors,
                                         const std::map<std::string, std::string>* metadata);

/// Writes `tensors` with the canonical header to `path` (not atomically; see weights.h).
void write_safetensors(const std::string& path, std::vector<StOutTensor> tensors,
                       const std::map<std::string, std::string>* metadata);

/// Writes a given (already padded) header and each tensor's bytes at the offsets the header
/// assigns it. Used to re-emit a source file's header verbatim; `tensors` must match it.
void write_safetensors_with_header(const std::string& path, const std::string& header_json,
                                   const std::vector<StOutTensor>& tensors);

// Bit-exact conversions. Upcasts are exact for every bit pattern (NaN payloads included);
// downcasts round to nearest even and keep NaN payloads that fit, so
// f32_to_f16(f16_to_f32(h)) == h for all 65536 h (same for bf16).
float f16_to_f32(uint16_t h);
float bf16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);
uint16_t f32_to_bf16(float f);

}  // namespace perceiver
