#include "io/weights.h"

#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <span>
#include <sstream>

#include "io/hdf5_file.h"
#include "io/safetensors.h"
#include "perceiver/error.h"

namespace perceiver {
namespace {

namespace fs = std::filesystem;

const std::string kParams = "/params";
const std::string kSourceHeader = "/source/safetensors_header";
const char* const kSourceDtype = "source_dtype";

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? "," : "") + std::to_string(s[i]);
  return out + "]";
}

std::vector<int64_t> dims_of(const Shape& s) {
  std::vector<int64_t> d;
  for (int i = 0; i < s.rank(); ++i) d.push_back(s[i]);
  return d;
}

// The dataset of one parameter. A '/' would silently create groups, and "." / ".." are not
// names, so such tensor names (possible in an untrusted safetensors file) are refused.
std::string param_path(const std::string& name) {
  PCV_CHECK(!name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos, "tensor name '", name,
            "' cannot be an HDF5 dataset name");
  return kParams + "/" + name;
}

// Opens a checkpoint and refuses formats newer than ours (llm.c's magic/version idea). Files
// without a version (e.g. h5py parity fixtures with /params) are read as plain /params files.
H5File open_checkpoint(const std::string& path) {
  H5File f = H5File::open(path);
  if (f.has_attr("/", "format_version")) {
    const int64_t v = f.attr_int("/", "format_version");
    PCV_CHECK(v <= kCheckpointFormatVersion, path, ": checkpoint format version ", v,
              " is newer than this build reads (", kCheckpointFormatVersion,
              ")\nHINT: update libperceiver, or convert the file with the perceiver-convert that wrote it");
  }
  PCV_CHECK(f.has(kParams), path, ": no /params group (not a perceiver checkpoint?)");
  return f;
}

void write_checkpoint_attrs(H5File& f, const std::map<std::string, std::string>& attrs) {
  for (const auto& [k, v] : attrs) f.set_attr("/", k, v);
  f.set_attr("/", "format", std::string(kCheckpointFormat));
  f.set_attr("/", "format_version", kCheckpointFormatVersion);
}

StDtype source_dtype(const H5File& f, const std::string& dataset) {
  if (!f.has_attr(dataset, kSourceDtype)) return StDtype::kF32;
  const StDtype d = st_dtype_from_name(f.attr_string(dataset, kSourceDtype), f.path() + ": " + dataset);
  PCV_CHECK(st_dtype_is_float(d), f.path(), ": ", dataset, " has non-float source_dtype ", st_dtype_name(d));
  return d;
}

std::vector<uint8_t> as_bytes(const void* p, size_t n) {
  std::vector<uint8_t> b(n);
  if (n) std::memcpy(b.data(), p, n);
  return b;
}

// Encodes f32 values in a 16-bit dtype, counting values that did not survive exactly.
std::vector<uint8_t> encode_16(const std::vector<float>& v, StDtype d, int64_t& rounded) {
  const bool half = d == StDtype::kF16;
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    h[i] = half ? f32_to_f16(v[i]) : f32_to_bf16(v[i]);
    const float back = half ? f16_to_f32(h[i]) : bf16_to_f32(h[i]);
    rounded += std::bit_cast<uint32_t>(back) != std::bit_cast<uint32_t>(v[i]);
  }
  return as_bytes(h.data(), h.size() * 2);
}

// One /params dataset in its source dtype's bytes.
std::vector<uint8_t> encode_dataset(const H5File& f, const std::string& ds, StDtype d, int64_t& rounded) {
  if (d == StDtype::kF64) {
    const std::vector<double> v = f.read<double>(ds);
    return as_bytes(v.data(), v.size() * sizeof(double));
  }
  const std::vector<float> v = f.read<float>(ds);
  if (d == StDtype::kF32) return as_bytes(v.data(), v.size() * sizeof(float));
  return encode_16(v, d, rounded);
}

// The source header kept by convert_safetensors_to_h5, if it parses.
std::optional<StHeader> stored_header(const std::string& header, const std::string& path) {
  if (header.empty()) return std::nullopt;
  try {
    return parse_safetensors_header(header, std::nullopt, path + ": " + kSourceHeader);
  } catch (const Error&) {
    return std::nullopt;  // damaged: fall back to the canonical header
  }
}

// The stored header still describes exactly these tensors (names, dtypes, shapes, size).
bool header_matches(const StHeader& h, const std::vector<StOutTensor>& tensors, uint64_t total) {
  if (h.tensors.size() != tensors.size() || h.data_size != total) return false;
  std::map<std::string, const StTensorInfo*> by_name;
  for (const StTensorInfo& t : h.tensors) by_name[t.name] = &t;
  for (const StOutTensor& t : tensors) {
    auto it = by_name.find(t.name);
    if (it == by_name.end() || it->second->dtype != t.dtype || it->second->shape != t.shape) return false;
  }
  return true;
}

template <class T>
void load_from_safetensors(ParamStore<T>& store, const SafetensorsFile& st, const WeightReport& report) {
  std::set<std::string> bad;
  for (const ShapeMismatch& m : report.mis_shaped) bad.insert(m.name);
  for (const StTensorInfo& t : st.tensors()) {
    if (!store.registry().contains(t.name) || bad.count(t.name)) continue;
    TensorView<T> p = store.param(t.name);
    if constexpr (std::is_same_v<T, float>)
      st.read_float(t, p.data, p.numel());
    else
      st.read_double(t, p.data, p.numel());
  }
}

template <class T>
void load_from_h5(ParamStore<T>& store, const H5File& f, const std::vector<WeightTensorInfo>& found,
                  const WeightReport& report) {
  std::set<std::string> bad;
  for (const ShapeMismatch& m : report.mis_shaped) bad.insert(m.name);
  for (const WeightTensorInfo& t : found) {
    if (!store.registry().contains(t.name) || bad.count(t.name)) continue;
    TensorView<T> p = store.param(t.name);
    f.read_into<T>(param_path(t.name), p.data, p.numel());
  }
}

// From format version 2 on every tensor carries a checksum (which HDF5 verifies on each read);
// a tensor without one was rewritten by something else.
std::vector<WeightTensorInfo> list_h5(const H5File& f) {
  const int64_t version = f.has_attr("/", "format_version") ? f.attr_int("/", "format_version") : 0;
  std::vector<WeightTensorInfo> out;
  for (const std::string& name : f.list(kParams)) {
    PCV_CHECK(version < 2 || f.has_checksum(param_path(name)), f.path(), ": tensor '", param_path(name),
              "' has no checksum (format version ", version, " stores one with every tensor)");
    out.push_back({name, f.shape(param_path(name))});
  }
  return out;
}

std::vector<WeightTensorInfo> list_st(const SafetensorsFile& st) {
  std::vector<WeightTensorInfo> out;
  for (const StTensorInfo& t : st.tensors()) out.push_back({t.name, t.shape});
  return out;
}

void throw_report(const WeightReport& r) {
  std::ostringstream os;
  const auto lines = r.problems();
  os << r.path << ": the weights do not match the model (" << lines.size() << " problems):";
  for (const auto& l : lines) os << "\n  " << l;
  PCV_FAIL(os.str());
}

}  // namespace

std::optional<WeightFormat> weight_format_by_extension(const std::string& path) {
  const std::string ext = fs::path(path).extension().string();
  if (ext == ".safetensors") return WeightFormat::kSafetensors;
  if (ext == ".h5" || ext == ".hdf5") return WeightFormat::kHdf5;
  return std::nullopt;
}

WeightFormat detect_weight_format(const std::string& path) {
  if (auto f = weight_format_by_extension(path)) return *f;
  // The HDF5 superblock signature at offset 0 (files with a user block are not sniffed).
  static constexpr char kSignature[8] = {'\x89', 'H', 'D', 'F', '\r', '\n', '\x1a', '\n'};
  char head[8] = {};
  std::ifstream(path, std::ios::binary).read(head, 8);
  return std::memcmp(head, kSignature, 8) == 0 ? WeightFormat::kHdf5 : WeightFormat::kSafetensors;
}

std::vector<std::string> WeightReport::problems() const {
  std::vector<std::string> out;
  for (const auto& n : missing) out.push_back("missing tensor '" + n + "' (not in " + path + ")");
  for (const auto& n : unexpected) out.push_back("unexpected tensor '" + n + "' (the model has no such parameter)");
  for (const auto& m : mis_shaped)
    out.push_back("mis-shaped tensor '" + m.name + "': " + shape_str(m.found) + " in the file, the model expects " +
                  shape_str(m.expected));
  return out;
}

std::vector<WeightTensorInfo> list_weight_tensors(const std::string& path) {
  if (detect_weight_format(path) == WeightFormat::kHdf5) return list_h5(open_checkpoint(path));
  return list_st(SafetensorsFile::open(path));
}

WeightReport check_weights(const ParamRegistry& registry, const std::vector<WeightTensorInfo>& found,
                           const std::string& path) {
  WeightReport r;
  r.path = path;
  std::set<std::string, std::less<>> seen;
  for (const WeightTensorInfo& t : found) {
    seen.insert(t.name);
    if (!registry.contains(t.name)) {
      r.unexpected.push_back(t.name);
      continue;
    }
    const std::vector<int64_t> want = dims_of(registry.at(t.name).spec.shape);
    if (want != t.shape) r.mis_shaped.push_back({t.name, want, t.shape});
  }
  for (const auto& e : registry.entries())
    if (!seen.count(e.spec.name)) r.missing.push_back(e.spec.name);
  return r;
}

template <class T>
WeightReport load_weights(ParamStore<T>& store, const std::string& path, bool strict) {
  WeightReport r;
  if (detect_weight_format(path) == WeightFormat::kHdf5) {
    const H5File f = open_checkpoint(path);
    const auto found = list_h5(f);
    r = check_weights(store.registry(), found, path);
    if (strict && !r.ok()) throw_report(r);
    load_from_h5(store, f, found, r);
  } else {
    const SafetensorsFile st = SafetensorsFile::open(path);
    r = check_weights(store.registry(), list_st(st), path);
    if (strict && !r.ok()) throw_report(r);
    load_from_safetensors(store, st, r);
  }
  r.loaded = int64_t(store.registry().entries().size() - r.missing.size() - r.mis_shaped.size());
  return r;
}

template <class T>
void save_safetensors(ParamStore<T>& store, const std::string& path,
                      const std::map<std::string, std::string>& metadata) {
  constexpr StDtype dtype = std::is_same_v<T, double> ? StDtype::kF64 : StDtype::kF32;
  std::vector<StOutTensor> tensors;
  for (const auto& e : store.registry().entries()) {
    const TensorView<T> p = store.param(e.spec.name);
    tensors.push_back({e.spec.name,
                       dtype,
                       dims_of(e.spec.shape),
                       {reinterpret_cast<const uint8_t*>(p.data), size_t(p.numel()) * sizeof(T)}});
  }
  publish_file(path, TempName::kUnique, [&](const fs::path& tmp) { write_safetensors(tmp, tensors, &metadata); });
}

template <class T>
void save_weights_h5(ParamStore<T>& store, const std::string& path, const std::map<std::string, std::string>& attrs) {
  const std::string dtype = std::is_same_v<T, double> ? "F64" : "F32";
  H5File f = H5File::create_in_memory(path);
  for (const auto& e : store.registry().entries()) {
    const std::string ds = param_path(e.spec.name);
    f.write<T>(ds, store.param(e.spec.name).data, dims_of(e.spec.shape));
    f.set_attr(ds, kSourceDtype, dtype);
  }
  write_checkpoint_attrs(f, attrs);
  f.commit(TempName::kUnique);
}

std::string ConvertSummary::dtype_str() const {
  if (dtypes.size() == 1) return dtypes.begin()->first;
  std::string s;
  for (const auto& [d, n] : dtypes) s += (s.empty() ? "" : ", ") + d + ":" + std::to_string(n);
  return s;
}

ConvertSummary convert_safetensors_to_h5(const std::string& from, const std::string& to,
                                         const std::map<std::string, std::string>& attrs) {
  const SafetensorsFile st = SafetensorsFile::open(from);
  ConvertSummary s;
  {
    H5File f = H5File::create_in_memory(to);
    for (const StTensorInfo& t : st.tensors()) {
      PCV_CHECK(st_dtype_is_float(t.dtype), from, ": tensor '", t.name, "' has dtype ", st_dtype_name(t.dtype),
                "; only F32, F16, BF16 and F64 convert");
      const std::string ds = param_path(t.name);
      if (t.dtype == StDtype::kF64) {
        std::vector<double> v(t.numel());
        st.read_double(t, v.data(), t.numel());
        f.write<double>(ds, v.data(), t.shape);
      } else {
        std::vector<float> v(t.numel());
        st.read_float(t, v.data(), t.numel());
        f.write<float>(ds, v.data(), t.shape);
      }
      f.set_attr(ds, kSourceDtype, std::string(st_dtype_name(t.dtype)));
      s.tensors += 1;
      s.parameters += t.numel();
      s.data_bytes += int64_t(t.end - t.begin);
      s.dtypes[st_dtype_name(t.dtype)] += 1;
    }
    f.write_string(kSourceHeader, st.header_json());
    write_checkpoint_attrs(f, attrs);
    f.commit(TempName::kUnique);
  }
  return s;
}

ConvertSummary convert_h5_to_safetensors(const std::string& from, const std::string& to) {
  const H5File f = open_checkpoint(from);
  const std::vector<WeightTensorInfo> found = list_h5(f);
  ConvertSummary s;
  std::vector<std::vector<uint8_t>> bytes;  // owns what the StOutTensor spans point at
  bytes.reserve(found.size());
  std::vector<StOutTensor> tensors;
  for (const WeightTensorInfo& t : found) {
    const std::string ds = param_path(t.name);
    const StDtype d = source_dtype(f, ds);
    bytes.push_back(encode_dataset(f, ds, d, s.rounded));
    tensors.push_back({t.name, d, t.shape, bytes.back()});
    s.tensors += 1;
    s.parameters += int64_t(bytes.back().size()) / st_dtype_size(d);
    s.data_bytes += int64_t(bytes.back().size());
    s.dtypes[st_dtype_name(d)] += 1;
  }
  const auto source = stored_header(f.has(kSourceHeader) ? f.read_string(kSourceHeader) : "", from);
  s.header_preserved = source && header_matches(*source, tensors, uint64_t(s.data_bytes));
  const std::map<std::string, std::string> meta =
      source ? source->metadata : std::map<std::string, std::string>{{"format", "pt"}};
  publish_file(to, TempName::kUnique, [&](const fs::path& tmp) {
    if (s.header_preserved)
      write_safetensors_with_header(tmp, f.read_string(kSourceHeader), tensors);
    else
      write_safetensors(tmp, tensors, source && !source->has_metadata ? nullptr : &meta);
  });
  return s;
}

template WeightReport load_weights<float>(ParamStore<float>&, const std::string&, bool);
template WeightReport load_weights<double>(ParamStore<double>&, const std::string&, bool);
template void save_safetensors<float>(ParamStore<float>&, const std::string&,
                                      const std::map<std::string, std::string>&);
template void save_safetensors<double>(ParamStore<double>&, const std::string&,
                                       const std::map<std::string, std::string>&);
template void save_weights_h5<float>(ParamStore<float>&, const std::string&, const std::map<std::string, std::string>&);
template void save_weights_h5<double>(ParamStore<double>&, const std::string&,
                                      const std::map<std::string, std::string>&);

}  // namespace perceiver
