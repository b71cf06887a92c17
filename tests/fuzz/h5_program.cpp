#include "h5_program.h"

#include <hdf5.h>

#include <algorithm>
#include <cstring>

namespace fuzz::h5 {
namespace {

// Dimensions a byte >= 240 stands for: sizes the readers must bound without allocating them.
constexpr uint64_t kSpecialDims[] = {0, 4000, uint64_t(1) << 16, uint64_t(1) << 20, uint64_t(1) << 24,
                                     uint64_t(1) << 32, uint64_t(1) << 40, 3, 1, 2};
constexpr size_t kSpecials = sizeof kSpecialDims / sizeof kSpecialDims[0];
constexpr uint64_t kMaxElements = uint64_t(1) << 50;  // a claim, never allocated
constexpr size_t kMaxWrittenBytes = size_t(1) << 20;

// Reads the program; past the end every byte is zero.
class Reader {
 public:
  Reader(const uint8_t* d, size_t n) : d_(d), n_(n) {}
  bool done() const { return i_ >= n_; }
  uint8_t byte() { return i_ < n_ ? d_[i_++] : 0; }
  std::string chars(size_t n) {
    std::string s;
    for (size_t k = 0; k < n && i_ < n_; ++k) s += char(d_[i_++]);
    return s;
  }
  std::string name() {
    const uint8_t b = byte();
    if (b < names().size()) return names()[b];
    return b == 255 ? chars(byte()) : names()[b % names().size()];
  }
  std::string value() {
    const size_t n = byte() | size_t(byte()) << 8;
    return chars(n);
  }

 private:
  const uint8_t* d_;
  size_t n_, i_ = 0;
};

// Owned HDF5 ids of one operation, closed at its end.
struct Ids {
  std::vector<std::pair<hid_t, herr_t (*)(hid_t)>> owned;
  hid_t keep(hid_t id, herr_t (*close)(hid_t)) {
    if (id >= 0) owned.emplace_back(id, close);
    return id;
  }
  ~Ids() {
    for (auto it = owned.rbegin(); it != owned.rend(); ++it) it->second(it->first);
  }
};

hid_t make_type(Reader& r, Ids& ids) {
  const Type t = Type(r.byte() % kTypeCount);
  static const hid_t* const numeric[] = {&H5T_NATIVE_INT8_g,  &H5T_NATIVE_UINT8_g,  &H5T_NATIVE_INT16_g,
                                         &H5T_NATIVE_UINT16_g, &H5T_NATIVE_INT32_g, &H5T_NATIVE_UINT32_g,
                                         &H5T_NATIVE_INT64_g, &H5T_NATIVE_UINT64_g, &H5T_NATIVE_FLOAT_g,
                                         &H5T_NATIVE_DOUBLE_g};
  if (t <= kF64) return ids.keep(H5Tcopy(*numeric[t]), H5Tclose);
  switch (t) {
    case kVlenString: {
      const hid_t s = ids.keep(H5Tcopy(H5T_C_S1), H5Tclose);
      H5Tset_size(s, H5T_VARIABLE);
      H5Tset_cset(s, H5T_CSET_UTF8);
      return s;
    }
    case kFixedString: {
      const hid_t s = ids.keep(H5Tcopy(H5T_C_S1), H5Tclose);
      H5Tset_size(s, std::max<size_t>(1, r.byte()));
      return s;
    }
    case kCompound: {
      const hid_t c = ids.keep(H5Tcreate(H5T_COMPOUND, 16), H5Tclose);
      H5Tinsert(c, "a", 0, H5T_NATIVE_INT64);
      H5Tinsert(c, "b", 8, H5T_NATIVE_DOUBLE);
      return c;
    }
    case kArray: {
      const hsize_t three = 3;
      return ids.keep(H5Tarray_create2(H5T_NATIVE_INT32, 1, &three), H5Tclose);
    }
    default: {
      const hid_t e = ids.keep(H5Tenum_create(H5T_NATIVE_INT8), H5Tclose);
      int8_t x = 0, y = 1;
      H5Tenum_insert(e, "x", &x);
      H5Tenum_insert(e, "y", &y);
      return e;
    }
  }
}

// A dataspace; -1 if its element count would be absurd. Chunked layouts get an unlimited first
// dimension so that they may be empty.
hid_t make_space(Reader& r, Ids& ids, bool unlimited, std::vector<hsize_t>& dims) {
  const uint8_t kind = r.byte() % 3;
  if (kind == Space::kScalar) return ids.keep(H5Screate(H5S_SCALAR), H5Sclose);
  if (kind == Space::kNull) return ids.keep(H5Screate(H5S_NULL), H5Sclose);
  const int rank = 1 + r.byte() % 5;
  uint64_t n = 1;
  for (int i = 0; i < rank; ++i) {
    const uint8_t b = r.byte();
    const uint64_t d = b < 224 ? b : b < 240 ? uint64_t(r.byte()) | uint64_t(r.byte()) << 8 : kSpecialDims[(b - 240) % kSpecials];
    dims.push_back(d);
    if (d && n > kMaxElements / d) return -1;
    n *= std::max<uint64_t>(d, 1);
  }
  std::vector<hsize_t> max = dims;
  if (unlimited) max[0] = H5S_UNLIMITED;
  return ids.keep(H5Screate_simple(rank, dims.data(), max.data()), H5Sclose);
}

// Chunks cover the trailing dimensions (a shard's [1,1,D,D,3] frames, [1,S] audio).
hid_t make_layout(Layout layout, const std::vector<hsize_t>& dims, Ids& ids) {
  const hid_t dcpl = ids.keep(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  if (layout == kContiguous) return dcpl;
  if (layout == kCompact) {
    H5Pset_layout(dcpl, H5D_COMPACT);
    return dcpl;
  }
  if (dims.empty()) return -1;
  std::vector<hsize_t> chunk(dims.size(), 1);
  const size_t lead = dims.size() > 3 ? dims.size() - 3 : 1;
  uint64_t elems = 1;
  for (size_t i = lead; i < dims.size(); ++i) {
    chunk[i] = std::max<hsize_t>(1, dims[i]);
    elems *= chunk[i];
  }
  if (elems > (uint64_t(1) << 28)) std::fill(chunk.begin(), chunk.end(), 1);
  H5Pset_chunk(dcpl, int(chunk.size()), chunk.data());
  if (layout == kChecksummed) H5Pset_fletcher32(dcpl);
  if (layout == kDeflated) H5Pset_deflate(dcpl, 1);
  return dcpl;
}

// The element bytes (or string pointers) for n elements of `type`, from the value's bytes; empty
// if that would be too large to write.
struct Data {
  std::vector<uint8_t> bytes;
  std::vector<std::string> strings;
  std::vector<const char*> pointers;
  const void* get() const { return pointers.empty() ? static_cast<const void*>(bytes.data()) : pointers.data(); }
};

bool make_data(hid_t type, hssize_t n, const std::string& value, Data& out) {
  if (n <= 0) return false;
  if (H5Tis_variable_str(type) > 0) {
    if (size_t(n) > kMaxWrittenBytes / sizeof(char*)) return false;
    for (size_t start = 0;;) {  // the strings are separated by '\0'
      const size_t end = value.find('\0', start);
      out.strings.push_back(value.substr(start, end == std::string::npos ? std::string::npos : end - start));
      if (end == std::string::npos) break;
      start = end + 1;
    }
    for (hssize_t i = 0; i < n; ++i) out.pointers.push_back(out.strings[size_t(i) % out.strings.size()].c_str());
    return true;
  }
  const size_t size = H5Tget_size(type);
  if (size == 0 || size_t(n) > kMaxWrittenBytes / size) return false;
  out.bytes.assign(size_t(n) * size, 0);
  for (size_t i = 0; !value.empty() && i < out.bytes.size(); ++i) out.bytes[i] = uint8_t(value[i % value.size()]);
  return true;
}

hid_t link_props(Ids& ids) {
  const hid_t lcpl = ids.keep(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl, 1);
  return lcpl;
}

void run_op(hid_t file, Reader& r) {
  Ids ids;
  switch (Op(r.byte() % kOpCount)) {
    case kGroup:
      ids.keep(H5Gcreate2(file, r.name().c_str(), link_props(ids), H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
      return;
    case kAttr: {
      const std::string object = r.name(), key = r.name();
      const hid_t type = make_type(r, ids);
      std::vector<hsize_t> dims;
      const hid_t space = make_space(r, ids, false, dims);
      const std::string value = r.value();
      const hid_t obj = ids.keep(H5Oopen(file, object.c_str(), H5P_DEFAULT), H5Oclose);
      if (type < 0 || space < 0 || obj < 0) return;
      if (H5Aexists(obj, key.c_str()) > 0) H5Adelete(obj, key.c_str());
      const hid_t a = ids.keep(H5Acreate2(obj, key.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
      Data data;
      if (a >= 0 && make_data(type, H5Sget_simple_extent_npoints(space), value, data)) H5Awrite(a, type, data.get());
      return;
    }
    case kDataset: {
      const std::string name = r.name();
      const hid_t type = make_type(r, ids);
      const Layout layout = Layout(r.byte() % kLayoutCount);
      const bool chunked = layout != kContiguous && layout != kCompact;
      std::vector<hsize_t> dims;
      const hid_t space = make_space(r, ids, chunked, dims);
      const std::string value = r.value();
      const hid_t dcpl = make_layout(layout == kUnwritten ? kChunked : layout, dims, ids);
      if (type < 0 || space < 0 || dcpl < 0) return;
      const hid_t ds =
          ids.keep(H5Dcreate2(file, name.c_str(), type, space, link_props(ids), dcpl, H5P_DEFAULT), H5Dclose);
      Data data;
      if (ds >= 0 && layout != kUnwritten && make_data(type, H5Sget_simple_extent_npoints(space), value, data))
        H5Dwrite(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.get());
      return;
    }
    case kSoftLink: {
      const std::string name = r.name(), target = r.name();
      H5Lcreate_soft(target.c_str(), file, name.c_str(), link_props(ids), H5P_DEFAULT);
      return;
    }
    default:
      H5Lcreate_external("does-not-exist.h5", "/x", file, r.name().c_str(), link_props(ids), H5P_DEFAULT);
      return;
  }
}

}  // namespace

const std::vector<TensorSpec>& model_tensors() {
  static const std::vector<TensorSpec> t = {{"perceiver.embeddings.latents", {4, 3}}, {"perceiver.w", {2}}};
  return t;
}

perceiver::ParamRegistry model_registry() {
  perceiver::ParamRegistry r;
  for (const TensorSpec& t : model_tensors())
    r.add(perceiver::ParamSpec{t.name, perceiver::Shape(std::vector<int64_t>(t.dims.begin(), t.dims.end())),
                               perceiver::ParamRole::kEmbedding});
  return r;
}

const std::vector<std::string>& names() {
  static const std::vector<std::string> n = [] {
    std::vector<std::string> v = {"/", "/params", "/optimizer", "/optimizer/exp_avg", "/optimizer/exp_avg_sq",
                                  "/optimizer/momentum_buffer", "/source", "/source/safetensors_header",
                                  // checkpoint attributes
                                  "format", "format_version", "step", "epoch", "sampler_epoch", "sampler_batch",
                                  "seed", "optimizer", "optimizer_steps", "world_size", "sampler_global_batch",
                                  "config_yaml", "created", "source_dtype",
                                  // shards
                                  "split", "fps", "sample_rate", "num_frames", "image_dim", "audio_samples",
                                  "num_clips", "num_classes", "class_names", "plan", "video", "audio", "label",
                                  "youtube_id", "time_start", "time_end", "window_start", "padded_frames",
                                  "padded_samples", "skipped_youtube_id", "skipped_time_start", "skipped_time_end",
                                  "skipped_reason"};
    for (const TensorSpec& t : model_tensors()) {
      v.push_back("/params/" + t.name);
      for (const char* state : {"exp_avg", "exp_avg_sq", "momentum_buffer"})
        v.push_back(std::string("/optimizer/") + state + "/" + t.name);
    }
    return v;
  }();
  return n;
}

std::vector<uint8_t> build(const uint8_t* data, size_t size) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  static int serial = 0;
  const std::string name = "fuzz-" + std::to_string(++serial) + ".h5";
  const hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  H5Pset_fapl_core(fapl, 1 << 16, false);
  const hid_t file = H5Fcreate(name.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
  H5Pclose(fapl);
  if (file < 0) return {};
  Reader r(data, size);
  for (int ops = 0; !r.done() && ops < 64; ++ops) run_op(file, r);
  std::vector<uint8_t> image;
  if (H5Fflush(file, H5F_SCOPE_GLOBAL) >= 0) {
    const ssize_t n = H5Fget_file_image(file, nullptr, 0);
    if (n > 0) {
      image.resize(size_t(n));
      if (H5Fget_file_image(file, image.data(), image.size()) < 0) image.clear();
    }
  }
  H5Fclose(file);
  return image;
}

// ---- writing programs ----

void Program::name(const std::string& n) {
  const auto& all = names();
  const auto it = std::find(all.begin(), all.end(), n);
  if (it != all.end() && it - all.begin() < 255) {
    out_ += char(it - all.begin());
    return;
  }
  out_ += char(255);
  out_ += char(std::min<size_t>(n.size(), 255));
  out_ += n.substr(0, 255);
}

void Program::type(Type t) {
  out_ += char(t);
  if (t == kFixedString) out_ += char(64);
}

void Program::space(const Space& s) {
  out_ += char(s.kind);
  if (s.kind != Space::kSimple) return;
  out_ += char(s.dims.size() - 1);
  for (uint64_t d : s.dims) {
    const auto* special = std::find(std::begin(kSpecialDims), std::end(kSpecialDims), d);
    if (d < 224) {
      out_ += char(d);
    } else if (d < 65536) {
      out_ += char(224);
      out_ += char(d & 0xff);
      out_ += char(d >> 8);
    } else {
      out_ += char(240 + (special - std::begin(kSpecialDims)));  // a seed uses only the sizes listed
    }
  }
}

void Program::value(const std::string& v) {
  out_ += char(v.size() & 0xff);
  out_ += char(v.size() >> 8);
  out_ += v;
}

Program& Program::group(const std::string& n) {
  out_ += char(kGroup);
  name(n);
  return *this;
}

Program& Program::attr(const std::string& object, const std::string& key, Type t, const Space& s,
                       const std::string& v) {
  out_ += char(kAttr);
  name(object);
  name(key);
  type(t);
  space(s);
  value(v);
  return *this;
}

Program& Program::attr_int(const std::string& object, const std::string& key, int64_t v) {
  return attr(object, key, kI64, Space::scalar(), std::string(reinterpret_cast<const char*>(&v), sizeof v));
}

Program& Program::attr_double(const std::string& object, const std::string& key, double v) {
  return attr(object, key, kF64, Space::scalar(), std::string(reinterpret_cast<const char*>(&v), sizeof v));
}

Program& Program::attr_string(const std::string& object, const std::string& key, const std::string& v) {
  return attr(object, key, kVlenString, Space::scalar(), v);
}

Program& Program::attr_strings(const std::string& object, const std::string& key, const std::vector<std::string>& v) {
  std::string joined;
  for (size_t i = 0; i < v.size(); ++i) joined += (i ? std::string(1, '\0') : "") + v[i];
  return attr(object, key, kVlenString, Space::simple({v.size()}), joined);
}

Program& Program::dataset(const std::string& n, Type t, const Space& s, Layout layout, const std::string& v) {
  out_ += char(kDataset);
  name(n);
  type(t);
  out_ += char(layout);
  space(s);
  value(v);
  return *this;
}

Program& Program::soft_link(const std::string& n, const std::string& target) {
  out_ += char(kSoftLink);
  name(n);
  name(target);
  return *this;
}

}  // namespace fuzz::h5
