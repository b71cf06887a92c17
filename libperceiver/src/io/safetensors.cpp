#include "io/safetensors.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "perceiver/error.h"

namespace perceiver {

// safetensors data is little-endian; we copy it as-is into native scalars.
static_assert(std::endian::native == std::endian::little, "safetensors IO assumes a little-endian host");

namespace {

using Json = nlohmann::json;

struct DtypeInfo {
  StDtype dtype;
  const char* name;
  int size;
};

constexpr DtypeInfo kDtypes[] = {
    {StDtype::kBool, "BOOL", 1},      {StDtype::kU8, "U8", 1},          {StDtype::kI8, "I8", 1},
    {StDtype::kF8E5M2, "F8_E5M2", 1}, {StDtype::kF8E4M3, "F8_E4M3", 1}, {StDtype::kI16, "I16", 2},
    {StDtype::kU16, "U16", 2},        {StDtype::kF16, "F16", 2},        {StDtype::kBF16, "BF16", 2},
    {StDtype::kI32, "I32", 4},        {StDtype::kU32, "U32", 4},        {StDtype::kF32, "F32", 4},
    {StDtype::kF64, "F64", 8},        {StDtype::kI64, "I64", 8},        {StDtype::kU64, "U64", 8},
};

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

// Product of dims times the element size, or nullopt-like UINT64_MAX on overflow (a hostile
// header can claim [2^40, 2^40]).
uint64_t checked_bytes(const std::vector<int64_t>& shape, int elem_size) {
  uint64_t n = uint64_t(elem_size);
  for (int64_t d : shape) {
    if (d != 0 && n > std::numeric_limits<uint64_t>::max() / uint64_t(d)) return std::numeric_limits<uint64_t>::max();
    n *= uint64_t(d);
  }
  return n;
}

// Parses the JSON, noting the first duplicated top-level key: nlohmann keeps the last value
// silently, which would hide a tensor.
Json parse_json(std::string_view text, const std::string& path) {
  std::set<std::string> seen;
  std::string duplicate;
  Json::parser_callback_t note_keys = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (depth == 1 && event == Json::parse_event_t::key && duplicate.empty() &&
        !seen.insert(parsed.get<std::string>()).second)
      duplicate = parsed.get<std::string>();
    return true;
  };
  Json j;
  try {
    j = Json::parse(text.begin(), text.end(), note_keys);
  } catch (const Json::exception& e) {
    PCV_FAIL(path, ": safetensors header is not valid JSON (", e.what(), ")");
  }
  PCV_CHECK(j.is_object(), path, ": safetensors header is not a JSON object");
  PCV_CHECK(duplicate.empty(), path, ": safetensors header names tensor '", duplicate, "' twice");
  return j;
}

std::vector<int64_t> parse_shape(const Json& v, const std::string& where) {
  PCV_CHECK(v.is_array(), where, ": \"shape\" must be an array of non-negative integers");
  std::vector<int64_t> shape;
  for (const Json& d : v) {
    PCV_CHECK(d.is_number_unsigned() && d.get<uint64_t>() <= uint64_t(std::numeric_limits<int64_t>::max()), where,
              ": \"shape\" must be an array of non-negative integers, got ", v.dump());
    shape.push_back(d.get<int64_t>());
  }
  return shape;
}

StTensorInfo parse_tensor(const std::string& name, const Json& v, const std::string& path) {
  const std::string where = path + ": tensor '" + name + "'";
  PCV_CHECK(v.is_object(), where, ": entry must be an object with dtype, shape and data_offsets");
  for (const char* key : {"dtype", "shape", "data_offsets"})
    PCV_CHECK(v.contains(key), where, ": missing \"", key, "\"");
  PCV_CHECK(v["dtype"].is_string(), where, ": \"dtype\" must be a string");
  StTensorInfo t;
  t.name = name;
  t.dtype = st_dtype_from_name(v["dtype"].get<std::string>(), where);
  t.shape = parse_shape(v["shape"], where);
  const Json& off = v["data_offsets"];
  PCV_CHECK(off.is_array() && off.size() == 2 && off[0].is_number_unsigned() && off[1].is_number_unsigned(), where,
            ": \"data_offsets\" must be [begin, end] with non-negative integers, got ", off.dump());
  t.begin = off[0].get<uint64_t>();
  t.end = off[1].get<uint64_t>();
  return t;
}

std::map<std::string, std::string> parse_metadata(const Json& v, const std::string& path) {
  PCV_CHECK(v.is_object(), path, ": \"__metadata__\" must be an object of strings");
  std::map<std::string, std::string> out;
  for (const auto& [k, s] : v.items()) {
    PCV_CHECK(s.is_string(), path, ": \"__metadata__\" value of '", k, "' must be a string, got ", s.dump());
    out[k] = s.get<std::string>();
  }
  return out;
}

// The reference implementation's rule: sorted by offset, each tensor starts where the previous
// ended, holds exactly dtype × shape bytes, and the last one ends at the end of the file.
void check_layout(const std::vector<StTensorInfo>& tensors, uint64_t data_size, const std::string& path) {
  uint64_t cursor = 0;
  const StTensorInfo* prev = nullptr;
  for (const StTensorInfo& t : tensors) {
    const std::string where = path + ": tensor '" + t.name + "'";
    const std::string offs = "data_offsets [" + std::to_string(t.begin) + "," + std::to_string(t.end) + "]";
    PCV_CHECK(t.begin <= t.end, where, ": ", offs, " end before they begin");
    PCV_CHECK(t.end <= data_size, where, ": ", offs, " are out of range: the data section has ", data_size,
              " bytes (truncated file?)");
    const uint64_t need = checked_bytes(t.shape, st_dtype_size(t.dtype));
    PCV_CHECK(t.end - t.begin == need, where, ": ", offs, " hold ", t.end - t.begin, " bytes but dtype ",
              st_dtype_name(t.dtype), " with shape ", shape_str(t.shape), " needs ",
              need == std::numeric_limits<uint64_t>::max() ? std::string("more than 2^64") : std::to_string(need));
    PCV_CHECK(t.begin >= cursor, where, ": ", offs, " overlap tensor '", prev ? prev->name : "", "'");
    PCV_CHECK(t.begin == cursor, where, ": ", offs, " leave a gap of ", t.begin - cursor, " bytes before it");
    cursor = t.end;
    prev = &t;
  }
  PCV_CHECK(cursor == data_size, path, ": the data section has ", data_size, " bytes but the tensors cover ", cursor,
            " (trailing bytes)");
}

// A JSON string literal as serde_json writes it (same escapes); invalid UTF-8 is our error.
std::string json_quoted(const Json& value, const std::string& what) {
  try {
    return value.dump();
  } catch (const Json::exception& e) {
    PCV_FAIL("safetensors: ", what, " is not valid UTF-8 (", e.what(), ")");
  }
}

uint64_t read_u64_le(const unsigned char* p) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | p[i];
  return n;
}

void write_u64_le(std::ostream& out, uint64_t n) {
  char b[8];
  for (int i = 0; i < 8; ++i) b[i] = char((n >> (8 * i)) & 0xff);
  out.write(b, 8);
}

// Copies `count` little-endian elements of type S and converts each with f.
template <class S, class T, class F>
void convert_elems(const uint8_t* src, T* out, int64_t count, F f) {
  for (int64_t i = 0; i < count; ++i) {
    S s;
    std::memcpy(&s, src + i * sizeof(S), sizeof(S));
    out[i] = T(f(s));
  }
}

template <class T>
void read_as(const StTensorInfo& t, const uint8_t* src, T* out, int64_t count, const std::string& path) {
  PCV_CHECK(count == t.numel(), path, ": tensor '", t.name, "' has ", t.numel(), " elements, the caller expects ",
            count);
  auto same = [](auto v) { return v; };
  switch (t.dtype) {
    case StDtype::kF32:
      convert_elems<float>(src, out, count, same);
      return;
    case StDtype::kF64:
      convert_elems<double>(src, out, count, same);
      return;
    case StDtype::kF16:
      convert_elems<uint16_t>(src, out, count, f16_to_f32);
      return;
    case StDtype::kBF16:
      convert_elems<uint16_t>(src, out, count, bf16_to_f32);
      return;
    default:
      PCV_FAIL(path, ": tensor '", t.name, "' has dtype ", st_dtype_name(t.dtype),
               ", which is not floating point (F32, F16, BF16 or F64)");
  }
}

}  // namespace

const char* st_dtype_name(StDtype dtype) { return kDtypes[int(dtype)].name; }
int st_dtype_size(StDtype dtype) { return kDtypes[int(dtype)].size; }
bool st_dtype_is_float(StDtype d) {
  return d == StDtype::kF16 || d == StDtype::kBF16 || d == StDtype::kF32 || d == StDtype::kF64;
}

StDtype st_dtype_from_name(std::string_view name, const std::string& where) {
  for (const DtypeInfo& d : kDtypes)
    if (name == d.name) return d.dtype;
  PCV_FAIL(where, ": unknown safetensors dtype '", name, "'");
}

int64_t StTensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

StHeader parse_safetensors_header(std::string_view json, std::optional<uint64_t> data_size, const std::string& path) {
  PCV_CHECK(!json.empty() && json.front() == '{', path,
            ": safetensors header does not start with '{' (not a safetensors file?)");
  const Json j = parse_json(json, path);
  StHeader h;
  for (const auto& [key, value] : j.items()) {
    if (key == "__metadata__") {
      if (value.is_null()) continue;  // the reference reader takes null as "no metadata"
      h.metadata = parse_metadata(value, path);
      h.has_metadata = true;
    } else {
      h.tensors.push_back(parse_tensor(key, value, path));
    }
  }
  std::sort(h.tensors.begin(), h.tensors.end(), [](const StTensorInfo& a, const StTensorInfo& b) {
    return std::tie(a.begin, a.end) < std::tie(b.begin, b.end);
  });
  h.data_size = data_size ? *data_size : (h.tensors.empty() ? 0 : h.tensors.back().end);
  check_layout(h.tensors, h.data_size, path);
  return h;
}

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(path, ec);
  PCV_CHECK(!ec, "cannot open safetensors file '", path, "': ", ec.message());
  std::ifstream in(path, std::ios::binary);
  PCV_CHECK(in, "cannot open safetensors file '", path, "'");
  PCV_CHECK(size >= 8, path, ": ", size, " bytes is too short for a safetensors file (no 8-byte header length)");
  unsigned char len_bytes[8];
  in.read(reinterpret_cast<char*>(len_bytes), 8);
  const uint64_t n = read_u64_le(len_bytes);
  PCV_CHECK(n <= kSafetensorsMaxHeader, path, ": header length ", n, " exceeds the limit of ", kSafetensorsMaxHeader,
            " bytes (corrupt, or not a safetensors file?)");
  PCV_CHECK(n <= size - 8, path, ": header length ", n, " exceeds the file size of ", size, " bytes (truncated?)");

  SafetensorsFile f;
  f.path_ = path;
  f.header_json_.resize(n);
  in.read(f.header_json_.data(), std::streamsize(n));
  PCV_CHECK(in, path, ": read error in the header");
  // Validate before allocating: the data section's size comes from the file, not the header.
  f.header_ = parse_safetensors_header(f.header_json_, size - 8 - n, path);
  f.data_.resize(size - 8 - n);
  in.read(reinterpret_cast<char*>(f.data_.data()), std::streamsize(f.data_.size()));
  PCV_CHECK(in || f.data_.empty(), path, ": read error in the tensor data (file changed while reading?)");
  return f;
}

const StTensorInfo* SafetensorsFile::find(std::string_view name) const {
  for (const StTensorInfo& t : header_.tensors)
    if (t.name == name) return &t;
  return nullptr;
}

std::span<const uint8_t> SafetensorsFile::raw(const StTensorInfo& t) const {
  PCV_ASSERT(t.end <= data_.size(), "tensor '", t.name, "' outside ", path_);
  return {data_.data() + t.begin, size_t(t.end - t.begin)};
}

void SafetensorsFile::read_float(const StTensorInfo& t, float* out, int64_t count) const {
  read_as(t, raw(t).data(), out, count, path_);
}

void SafetensorsFile::read_double(const StTensorInfo& t, double* out, int64_t count) const {
  read_as(t, raw(t).data(), out, count, path_);
}

std::string canonical_safetensors_header(std::vector<StOutTensor>& tensors,
                                         const std::map<std::string, std::string>* metadata) {
  // Python's save_file: larger dtypes first (alignment), then by name.
  std::sort(tensors.begin(), tensors.end(), [](const StOutTensor& a, const StOutTensor& b) {
    return a.dtype != b.dtype ? a.dtype > b.dtype : a.name < b.name;
  });
  std::string j = "{";
  if (metadata) j += "\"__metadata__\":" + json_quoted(Json(*metadata), "metadata");  // keys sorted
  uint64_t offset = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const StOutTensor& t = tensors[i];
    PCV_CHECK(i == 0 || t.name != tensors[i - 1].name, "safetensors: tensor '", t.name, "' given twice");
    PCV_CHECK(t.name != "__metadata__", "safetensors: '__metadata__' cannot name a tensor");
    const uint64_t need = checked_bytes(t.shape, st_dtype_size(t.dtype));
    PCV_CHECK(t.bytes.size() == need, "safetensors: tensor '", t.name, "' has ", t.bytes.size(), " bytes, its dtype ",
              st_dtype_name(t.dtype), " and shape ", shape_str(t.shape), " need ", need);
    if (j.size() > 1) j += ',';
    j += json_quoted(Json(t.name), "tensor name '" + t.name + "'") + ":{\"dtype\":\"" + st_dtype_name(t.dtype) +
         "\",\"shape\":" + shape_str(t.shape) + ",\"data_offsets\":[" + std::to_string(offset) + "," +
         std::to_string(offset + need) + "]}";
    offset += need;
  }
  j += '}';
  j.append((8 - j.size() % 8) % 8, ' ');
  return j;
}

namespace {

void write_file(const std::string& path, const std::string& header, const std::vector<const StOutTensor*>& in_order) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  PCV_CHECK(out, "cannot create safetensors file '", path, "'");
  write_u64_le(out, header.size());
  out.write(header.data(), std::streamsize(header.size()));
  for (const StOutTensor* t : in_order)
    out.write(reinterpret_cast<const char*>(t->bytes.data()), std::streamsize(t->bytes.size()));
  out.flush();
  PCV_CHECK(out, "error writing safetensors file '", path, "' (disk full?)");
}

}  // namespace

void write_safetensors(const std::string& path, std::vector<StOutTensor> tensors,
                       const std::map<std::string, std::string>* metadata) {
  const std::string header = canonical_safetensors_header(tensors, metadata);
  std::vector<const StOutTensor*> order;
  for (const StOutTensor& t : tensors) order.push_back(&t);
  write_file(path, header, order);
}

void write_safetensors_with_header(const std::string& path, const std::string& header_json,
                                   const std::vector<StOutTensor>& tensors) {
  uint64_t total = 0;
  std::map<std::string_view, const StOutTensor*> by_name;
  for (const StOutTensor& t : tensors) {
    total += t.bytes.size();
    PCV_CHECK(by_name.emplace(t.name, &t).second, path, ": tensor '", t.name, "' given twice");
  }
  const StHeader h = parse_safetensors_header(header_json, total, path + " (stored header)");
  PCV_CHECK(h.tensors.size() == tensors.size(), path, ": the stored header lists ", h.tensors.size(), " tensors, ",
            tensors.size(), " were given");
  std::vector<const StOutTensor*> order;
  for (const StTensorInfo& info : h.tensors) {
    auto it = by_name.find(info.name);
    PCV_CHECK(it != by_name.end(), path, ": tensor '", info.name, "' of the stored header was not given");
    const StOutTensor& t = *it->second;
    PCV_CHECK(t.dtype == info.dtype && t.shape == info.shape, path, ": tensor '", t.name, "' is ",
              st_dtype_name(t.dtype), shape_str(t.shape), ", the stored header says ", st_dtype_name(info.dtype),
              shape_str(info.shape));
    order.push_back(&t);
  }
  write_file(path, header_json, order);
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (man << 13));       // inf, NaN + payload
  if (exp != 0) return std::bit_cast<float>(sign | ((exp + 112) << 23) | (man << 13));  // rebias 15 → 127
  // Zero or subnormal: man · 2^-24 is exact in float (a normal float for man ≠ 0).
  const float mag = std::ldexp(float(man), -24);
  return sign ? -mag : mag;
}

float bf16_to_f32(uint16_t h) { return std::bit_cast<float>(uint32_t(h) << 16); }

uint16_t f32_to_f16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = uint16_t((x >> 16) & 0x8000u);
  uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) {  // NaN: keep the payload's top bits; stay a NaN if they are all zero
    const uint16_t man = uint16_t((ax >> 13) & 0x3ffu);
    return sign | 0x7c00u | (man ? man : 0x200u);
  }
  if (ax >= 0x477ff000u) return sign | 0x7c00u;  // ≥ 65520 rounds to infinity (or is infinity)
  if (ax >= 0x38800000u) {                       // ≥ 2^-14: a normal half
    ax += 0xfffu + ((ax >> 13) & 1u);            // round to nearest even on the 13 dropped bits
    return sign | uint16_t((ax - 0x38000000u) >> 13);
  }
  // Subnormal half: round |f| · 2^24 (exact in float) to an integer, ties to even (the default
  // rounding mode); 1024 becomes the smallest normal, which the bit pattern expresses too.
  const float scaled = std::ldexp(std::bit_cast<float>(ax), 24);
  return sign | uint16_t(std::nearbyint(scaled));
}

uint16_t f32_to_bf16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) {  // NaN: truncate, but never into infinity
    const uint16_t h = uint16_t(x >> 16);
    return (h & 0x7fu) ? h : uint16_t(h | 0x40u);
  }
  return uint16_t((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);  // round to nearest even
}

}  // namespace perceiver
