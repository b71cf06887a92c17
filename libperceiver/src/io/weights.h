// Model weights by HF parameter name: loading into a ParamStore from safetensors or our HDF5
// checkpoint, saving both, and the value-preserving conversions behind perceiver-convert.
//
// HDF5 checkpoint layout (format_version 2; version 1 had no checksums and still loads):
//   /params/<HF name>            f32 (f64 for F64 sources and double stores), torch layout
//                                (Linear weight [out, in]); the name is one path component
//                                with dots, e.g. /params/perceiver.embeddings.latents
//     attr source_dtype          the safetensors dtype the values are exact in (F32, F16, BF16,
//                                F64); F16/BF16 values are stored upcast to f32
//   /source/safetensors_header   conversions only: the source file's header, verbatim, so the
//                                reverse conversion reproduces the file byte for byte
//   root attrs                   format = "perceiver-checkpoint", format_version, caller's extras
// Every /params dataset carries HDF5's Fletcher32 checksum. Writers publish through a unique
// temporary name, fsync'ed and renamed (io/atomic_file.h), so a crash never leaves half a file
// and two writers of one target never mix their bytes.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/params.h"

namespace perceiver {

inline constexpr const char* kCheckpointFormat = "perceiver-checkpoint";
/// Of both HDF5 files with /params: these and training checkpoints (train/checkpoint.h).
/// Version 2 stores every tensor with a Fletcher32 checksum; readers require it from 2 on.
inline constexpr int64_t kCheckpointFormatVersion = 2;

enum class WeightFormat { kSafetensors, kHdf5 };

/// By extension: .safetensors, .h5/.hdf5; nullopt otherwise.
std::optional<WeightFormat> weight_format_by_extension(const std::string& path);
/// By extension, else by content (HDF5 signature); defaults to safetensors.
WeightFormat detect_weight_format(const std::string& path);

/// A tensor found in a weights file.
struct WeightTensorInfo {
  std::string name;
  std::vector<int64_t> shape;
};

struct ShapeMismatch {
  std::string name;
  std::vector<int64_t> expected;  // the model's
  std::vector<int64_t> found;     // the file's
};

/// How a file's tensors match a registry, by name.
struct WeightReport {
  std::string path;
  std::vector<std::string> missing;     // the model has it, the file does not (registry order)
  std::vector<std::string> unexpected;  // the file has it, the model does not (file order)
  std::vector<ShapeMismatch> mis_shaped;
  int64_t loaded = 0;  // tensors copied into the store

  bool ok() const { return missing.empty() && unexpected.empty() && mis_shaped.empty(); }
  /// One self-contained line per problem, naming the tensor.
  std::vector<std::string> problems() const;
};

/// Names and shapes of the tensors in a safetensors file or an HDF5 checkpoint's /params.
std::vector<WeightTensorInfo> list_weight_tensors(const std::string& path);
/// Compares by name; `path` is recorded in the report.
WeightReport check_weights(const ParamRegistry& registry, const std::vector<WeightTensorInfo>& found,
                           const std::string& path);

/// Loads every parameter the file and the registry share with the same shape. strict: throws
/// perceiver::Error listing every missing, unexpected and mis-shaped tensor before touching the
/// store. Non-strict: loads what matches and returns the report. F16/BF16/F32 → float exactly.
template <class T>
WeightReport load_weights(ParamStore<T>& store, const std::string& path, bool strict = true);

/// Writes every parameter as F32 (F64 for double stores) with the canonical header.
template <class T>
void save_safetensors(ParamStore<T>& store, const std::string& path,
                      const std::map<std::string, std::string>& metadata = {{"format", "pt"}});
/// Writes the HDF5 checkpoint layout above; `attrs` become root attributes.
template <class T>
void save_weights_h5(ParamStore<T>& store, const std::string& path,
                     const std::map<std::string, std::string>& attrs = {});

struct ConvertSummary {
  int64_t tensors = 0;
  int64_t parameters = 0;
  int64_t data_bytes = 0;                 // tensor bytes on the safetensors side
  std::map<std::string, int64_t> dtypes;  // safetensors dtype → tensor count
  bool header_preserved = false;          // HDF5 → safetensors reused the source header
  int64_t rounded = 0;                    // values that did not fit their source dtype exactly
  /// "F32", or "F16:30, F32:2" when tensors differ.
  std::string dtype_str() const;
};

/// safetensors → HDF5 checkpoint, every value exact (F16/BF16 upcast; F64 kept as f64).
ConvertSummary convert_safetensors_to_h5(const std::string& from, const std::string& to,
                                         const std::map<std::string, std::string>& attrs = {});
/// HDF5 checkpoint → safetensors in each tensor's source_dtype (F32 if absent). When the file
/// carries the source header and it still describes the tensors, it is reused verbatim and the
/// output equals the original file byte for byte.
ConvertSummary convert_h5_to_safetensors(const std::string& from, const std::string& to);

}  // namespace perceiver
