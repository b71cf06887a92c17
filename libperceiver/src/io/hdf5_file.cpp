#include "io/hdf5_file.h"

#include <algorithm>
#include <limits>

#include "perceiver/error.h"

namespace perceiver {
namespace {

template <class T>
hid_t mem_type();
template <> hid_t mem_type<float>() { return H5T_NATIVE_FLOAT; }
template <> hid_t mem_type<double>() { return H5T_NATIVE_DOUBLE; }
template <> hid_t mem_type<int64_t>() { return H5T_NATIVE_INT64; }
template <> hid_t mem_type<int32_t>() { return H5T_NATIVE_INT32; }
template <> hid_t mem_type<uint8_t>() { return H5T_NATIVE_UINT8; }
template <> hid_t mem_type<uint16_t>() { return H5T_NATIVE_UINT16; }

// Chunks of at most 1 GiB (HDF5's limit is 4 GiB); one chunk for any tensor a model has.
constexpr uint64_t kMaxChunkBytes = uint64_t(1) << 30;
// Longest fixed-length string attribute read (config_yaml is a few kB).
constexpr size_t kMaxFixedString = size_t(16) << 20;
// Deflate expands at most ~1032:1; a filtered dataset may hold that much more than it stores.
constexpr uint64_t kMaxFilterRatio = 1100;

// What an attribute or dataset holds, for checks and for messages that say what was found.
struct Stored {
  H5T_class_t cls = H5T_NO_CLASS;
  bool vlen_string = false;
  H5S_class_t space = H5S_NO_CLASS;
  int rank = 0;
  int64_t count = 0;
};

Stored stored(hid_t type, hid_t space) {
  Stored s;
  s.cls = H5Tget_class(type);
  s.vlen_string = s.cls == H5T_STRING && H5Tis_variable_str(type) > 0;
  s.space = H5Sget_simple_extent_type(space);
  s.rank = std::max(0, H5Sget_simple_extent_ndims(space));
  s.count = s.space == H5S_NULL ? 0 : int64_t(std::max<hssize_t>(0, H5Sget_simple_extent_npoints(space)));
  return s;
}

const char* class_name(H5T_class_t c, bool plural) {
  switch (c) {
    case H5T_INTEGER: return plural ? "integers" : "integer";
    case H5T_FLOAT: return plural ? "floats" : "float";
    case H5T_STRING: return plural ? "strings" : "string";
    case H5T_COMPOUND: return plural ? "compound values" : "compound value";
    case H5T_ARRAY: return plural ? "array-typed values" : "array-typed value";
    case H5T_ENUM: return plural ? "enum values" : "enum value";
    case H5T_REFERENCE: return plural ? "references" : "reference";
    case H5T_VLEN: return plural ? "variable-length sequences" : "variable-length sequence";
    case H5T_BITFIELD: return plural ? "bitfields" : "bitfield";
    case H5T_OPAQUE: return plural ? "opaque values" : "opaque value";
    default: return plural ? "values of an unknown type" : "value of an unknown type";
  }
}

std::string describe(const Stored& s) {
  if (s.space == H5S_NULL) return "no value (an empty dataspace)";
  if (s.space == H5S_SCALAR) return std::string("one ") + class_name(s.cls, false);
  std::string what = std::to_string(s.count) + " " + class_name(s.cls, s.count != 1);
  return s.rank > 1 ? what + " in " + std::to_string(s.rank) + " dimensions" : what;
}

bool numeric(H5T_class_t c) { return c == H5T_INTEGER || c == H5T_FLOAT; }

// Element counts come from the file's headers, which may claim far more than the file holds:
// bound them by the bytes stored before anything is allocated.
void check_stored_bytes(hid_t ds, int64_t count, uint64_t elem_bytes, const std::string& where) {
  if (count == 0) return;
  H5Handle dcpl(H5Dget_create_plist(ds), H5Pclose);
  const uint64_t ratio = dcpl.get() >= 0 && H5Pget_nfilters(dcpl.get()) > 0 ? kMaxFilterRatio : 1;
  const uint64_t stored_bytes = H5Dget_storage_size(ds);
  const uint64_t claimed = uint64_t(count) > std::numeric_limits<uint64_t>::max() / elem_bytes
                               ? std::numeric_limits<uint64_t>::max()
                               : uint64_t(count) * elem_bytes;
  PCV_CHECK(stored_bytes > 0 && claimed / ratio <= stored_bytes, where, " claims ", count, " elements but the file stores ",
            stored_bytes, " bytes of it (corrupt file?)");
}

H5Handle open_object(hid_t file, const std::string& name, const std::string& path) {
  hid_t id = H5Oopen(file, name.c_str(), H5P_DEFAULT);
  PCV_CHECK(id >= 0, path, ": no object '", name, "'");
  return {id, H5Oclose};
}

H5Handle link_creation_props() {
  H5Handle h(PCV_H5(H5Pcreate(H5P_LINK_CREATE), "cannot create a link property list"), H5Pclose);
  PCV_H5(H5Pset_create_intermediate_group(h.get(), 1), "cannot set intermediate group creation");
  return h;
}

// Contiguous for scalars and empty arrays (they cannot be chunked); otherwise chunked with a
// Fletcher32 checksum, one chunk per tensor up to kMaxChunkBytes.
H5Handle dataset_props(const std::vector<hsize_t>& dims, size_t elem_bytes, bool track_times) {
  H5Handle dcpl(PCV_H5(H5Pcreate(H5P_DATASET_CREATE), "cannot create a dataset property list"), H5Pclose);
  if (!track_times) PCV_H5(H5Pset_obj_track_times(dcpl.get(), false), "cannot turn off time tracking");
  if (dims.empty() || std::find(dims.begin(), dims.end(), hsize_t(0)) != dims.end()) return dcpl;
  std::vector<hsize_t> chunk = dims;
  auto bytes = [&] {
    uint64_t b = elem_bytes;
    for (hsize_t c : chunk) b *= c;
    return b;
  };
  for (size_t i = 0; bytes() > kMaxChunkBytes && i < chunk.size();)
    if (chunk[i] > 1) chunk[i] = (chunk[i] + 1) / 2;
    else ++i;
  PCV_H5(H5Pset_chunk(dcpl.get(), int(chunk.size()), chunk.data()), "cannot set the chunk size");
  PCV_H5(H5Pset_fletcher32(dcpl.get()), "cannot add the Fletcher32 checksum");
  return dcpl;
}

// Refuses data that lives outside the file: the first such object stops the walk.
herr_t find_foreign(hid_t group, const char* name, const H5L_info_t* info, void* out) {
  std::string& found = *static_cast<std::string*>(out);
  const std::string where = std::string("'/") + name + "'";
  if (info->type == H5L_TYPE_SOFT) return 0;  // a name inside this file
  if (info->type != H5L_TYPE_HARD) {
    found = (info->type == H5L_TYPE_EXTERNAL ? "an external link " : "a user-defined link ") + where;
    return 1;
  }
  H5O_info_t oi{};
  if (H5Oget_info_by_name2(group, name, &oi, H5O_INFO_BASIC, H5P_DEFAULT) < 0) {
    found = "an unreadable object " + where;
    return 1;
  }
  if (oi.type != H5O_TYPE_DATASET) return 0;
  H5Handle ds(H5Dopen2(group, name, H5P_DEFAULT), H5Dclose);
  H5Handle dcpl(ds.get() >= 0 ? H5Dget_create_plist(ds.get()) : H5I_INVALID_HID, H5Pclose);
  if (dcpl.get() < 0) found = "an unreadable dataset " + where;
  else if (H5Pget_layout(dcpl.get()) == H5D_VIRTUAL) found = "a virtual dataset " + where;
  else if (H5Pget_external_count(dcpl.get()) != 0) found = "a dataset with external storage " + where;
  return found.empty() ? 0 : 1;
}

void refuse_foreign_data(hid_t file, const std::string& path) {
  std::string found;
  const herr_t r = H5Lvisit(file, H5_INDEX_NAME, H5_ITER_NATIVE, find_foreign, &found);
  PCV_CHECK(r >= 0, path, ": cannot list the objects of the file (corrupt?)", h5_reason_suffix());
  PCV_CHECK(found.empty(), path, ": refusing ", found,
            ": its data would be read from another file (external links, external storage and virtual "
            "datasets are not allowed)");
}

}  // namespace

std::string h5_error_detail() {
  std::vector<std::string> descs;
  auto collect = [](unsigned, const H5E_error2_t* e, void* out) -> herr_t {
    if (e->desc && *e->desc) static_cast<std::vector<std::string>*>(out)->push_back(e->desc);
    return 0;
  };
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, collect, &descs);
  H5Eclear2(H5E_DEFAULT);
  return descs.empty() ? "" : descs.front();
}

std::string h5_reason_suffix() {
  const std::string d = h5_error_detail();
  return d.empty() ? "" : " (HDF5: " + d + ")";
}

void h5_silence_errors() {
  // Thread-safe HDF5 keeps one error stack, with its printing switch, per thread.
  thread_local bool silenced = false;
  if (!silenced) H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  silenced = true;
}

H5Handle h5_vlen_string_type() {
  H5Handle h(PCV_H5(H5Tcopy(H5T_C_S1), "cannot copy the string type"), H5Tclose);
  PCV_H5(H5Tset_size(h.get(), H5T_VARIABLE), "cannot make a variable-length string type");
  PCV_H5(H5Tset_cset(h.get(), H5T_CSET_UTF8), "cannot set UTF-8 strings");
  return h;
}

H5File H5File::create(const std::string& path) {
  h5_silence_errors();
  hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  PCV_CHECK(f >= 0, "cannot create HDF5 file '", path, "'", h5_reason_suffix());
  return H5File(H5Handle(f, H5Fclose), path, false, true);
}

H5File H5File::create_in_memory(const std::string& path, bool track_times, unsigned chunk_index_k) {
  h5_silence_errors();
  H5Handle fapl(PCV_H5(H5Pcreate(H5P_FILE_ACCESS), "cannot create a file access property list"), H5Pclose);
  // HDF5's core driver without a backing store: the file is a memory buffer grown in 1 MiB
  // steps (glibc grows large blocks with mremap, without copying).
  PCV_H5(H5Pset_fapl_core(fapl.get(), size_t(1) << 20, false), "cannot select the in-memory driver");
  H5Handle fcpl(PCV_H5(H5Pcreate(H5P_FILE_CREATE), "cannot create a file creation property list"), H5Pclose);
  if (!track_times) PCV_H5(H5Pset_obj_track_times(fcpl.get(), false), "cannot turn off time tracking");
  PCV_H5(H5Pset_istore_k(fcpl.get(), chunk_index_k), "cannot set the chunk index node size");
  hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, fcpl.get(), fapl.get());
  PCV_CHECK(f >= 0, "cannot create in-memory HDF5 file '", path, "'", h5_reason_suffix());
  return H5File(H5Handle(f, H5Fclose), path, true, track_times);
}

H5File H5File::open(const std::string& path, bool writable) {
  h5_silence_errors();
  PCV_CHECK(H5Fis_hdf5(path.c_str()) > 0, "'", path, "' is missing or not an HDF5 file");
  hid_t f = H5Fopen(path.c_str(), writable ? H5F_ACC_RDWR : H5F_ACC_RDONLY, H5P_DEFAULT);
  PCV_CHECK(f >= 0, "cannot open HDF5 file '", path, "' (truncated or corrupt?)", h5_reason_suffix());
  H5File file(H5Handle(f, H5Fclose), path, false, true);
  refuse_foreign_data(f, path);
  return file;
}

void H5File::commit(TempName temp) {
  PCV_ASSERT(in_memory_ && file_.get() >= 0, "commit() of '", path_, "', which is not an open in-memory file");
  PCV_H5(H5Fflush(file_.get(), H5F_SCOPE_GLOBAL), path_, ": cannot flush the in-memory file");
  const ssize_t size = PCV_H5(H5Fget_file_image(file_.get(), nullptr, 0), path_, ": cannot size the file image");
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  PCV_H5(H5Fget_file_image(file_.get(), bytes.data(), bytes.size()), path_, ": cannot copy the file image");
  PCV_CHECK(file_.close() >= 0, path_, ": cannot close the in-memory file", h5_reason_suffix());
  publish_bytes(path_, temp, bytes);
}

bool H5File::has(const std::string& name) const {
  // Check each path component: H5Lexists fails on a missing intermediate group.
  std::string partial;
  size_t pos = 0;
  while (pos != std::string::npos) {
    size_t next = name.find('/', pos + 1);
    partial = name.substr(0, next);
    if (!partial.empty() && partial != "/" && H5Lexists(file_.get(), partial.c_str(), H5P_DEFAULT) <= 0) return false;
    pos = next;
  }
  return true;
}

H5Handle H5File::dataset(const std::string& name) const {
  hid_t id = H5Dopen2(file_.get(), name.c_str(), H5P_DEFAULT);
  PCV_CHECK(id >= 0, path_, ": no dataset '", name, "'", h5_reason_suffix());
  return {id, H5Dclose};
}

std::vector<int64_t> H5File::shape(const std::string& name) const {
  H5Handle ds = dataset(name);
  H5Handle space(PCV_H5(H5Dget_space(ds.get()), path_, ": dataset '", name, "' has no dataspace"), H5Sclose);
  const int rank = PCV_H5(H5Sget_simple_extent_ndims(space.get()), path_, ": dataset '", name, "' has no shape");
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  PCV_H5(H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr), path_, ": dataset '", name, "' has no shape");
  std::vector<int64_t> out;
  for (hsize_t d : dims) {
    PCV_CHECK(d <= hsize_t(std::numeric_limits<int64_t>::max()), path_, ": dataset '", name, "' has a dimension of ", d);
    out.push_back(int64_t(d));
  }
  return out;
}

bool H5File::has_checksum(const std::string& name) const {
  H5Handle ds = dataset(name);
  H5Handle dcpl(PCV_H5(H5Dget_create_plist(ds.get()), path_, ": dataset '", name, "' has no properties"), H5Pclose);
  return H5Pget_filter_by_id2(dcpl.get(), H5Z_FILTER_FLETCHER32, nullptr, nullptr, nullptr, 0, nullptr, nullptr) >= 0;
}

std::vector<std::string> H5File::list(const std::string& group) const {
  std::vector<std::string> names;
  auto collect = [](hid_t, const char* n, const H5L_info_t*, void* out) -> herr_t {
    static_cast<std::vector<std::string>*>(out)->push_back(n);
    return 0;
  };
  PCV_H5(H5Literate_by_name(file_.get(), group.c_str(), H5_INDEX_NAME, H5_ITER_INC, nullptr, collect, &names,
                             H5P_DEFAULT),
         path_, ": cannot list group '", group, "'");
  std::sort(names.begin(), names.end());
  return names;
}

template <class T>
void H5File::write(const std::string& name, const T* data, const std::vector<int64_t>& dims) {
  for (int64_t d : dims) PCV_CHECK(d >= 0, path_, ": negative dimension for dataset '", name, "'");
  std::vector<hsize_t> hd(dims.begin(), dims.end());
  H5Handle space(dims.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(int(hd.size()), hd.data(), nullptr), H5Sclose);
  PCV_CHECK(space.get() >= 0, path_, ": cannot create dataspace for '", name, "'", h5_reason_suffix());
  H5Handle lcpl = link_creation_props();
  H5Handle dcpl = dataset_props(hd, sizeof(T), track_times_);
  H5Handle ds(H5Dcreate2(file_.get(), name.c_str(), mem_type<T>(), space.get(), lcpl.get(), dcpl.get(), H5P_DEFAULT),
              H5Dclose);
  PCV_CHECK(ds.get() >= 0, path_, ": cannot create dataset '", name, "' (exists already?)", h5_reason_suffix());
  PCV_H5(H5Dwrite(ds.get(), mem_type<T>(), H5S_ALL, H5S_ALL, H5P_DEFAULT, data), path_, ": cannot write dataset '",
         name, "'");
}

void H5File::write_string(const std::string& name, const std::string& value) {
  H5Handle type = h5_vlen_string_type();
  H5Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  H5Handle lcpl = link_creation_props();
  H5Handle ds(H5Dcreate2(file_.get(), name.c_str(), type.get(), space.get(), lcpl.get(), H5P_DEFAULT, H5P_DEFAULT),
              H5Dclose);
  PCV_CHECK(ds.get() >= 0, path_, ": cannot create dataset '", name, "'", h5_reason_suffix());
  const char* p = value.c_str();
  PCV_H5(H5Dwrite(ds.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, &p), path_, ": cannot write dataset '", name, "'");
}

void H5File::write_strings(const std::string& name, const std::vector<std::string>& values) {
  H5Handle type = h5_vlen_string_type();
  hsize_t n = values.size();
  H5Handle space(H5Screate_simple(1, &n, nullptr), H5Sclose);
  H5Handle lcpl = link_creation_props();
  H5Handle ds(H5Dcreate2(file_.get(), name.c_str(), type.get(), space.get(), lcpl.get(), H5P_DEFAULT, H5P_DEFAULT),
              H5Dclose);
  PCV_CHECK(ds.get() >= 0, path_, ": cannot create dataset '", name, "'", h5_reason_suffix());
  std::vector<const char*> ptrs;
  for (const auto& v : values) ptrs.push_back(v.c_str());
  if (n)
    PCV_H5(H5Dwrite(ds.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, ptrs.data()), path_,
           ": cannot write dataset '", name, "'");
}

template <class T>
void H5File::read_into(const std::string& name, T* out, int64_t count) const {
  H5Handle ds = dataset(name);
  H5Handle type(PCV_H5(H5Dget_type(ds.get()), path_, ": dataset '", name, "' has no type"), H5Tclose);
  H5Handle space(PCV_H5(H5Dget_space(ds.get()), path_, ": dataset '", name, "' has no dataspace"), H5Sclose);
  const Stored s = stored(type.get(), space.get());
  const std::string where = path_ + ": dataset '" + name + "'";
  PCV_CHECK(numeric(s.cls) && s.space != H5S_NULL, where, " must hold numbers, found ", describe(s));
  PCV_CHECK(s.count == count, where, " has ", s.count, " elements, expected ", count);
  check_stored_bytes(ds.get(), count, std::max<size_t>(1, H5Tget_size(type.get())), where);
  if (count)
    PCV_H5(H5Dread(ds.get(), mem_type<T>(), H5S_ALL, H5S_ALL, H5P_DEFAULT, out), where,
           ": cannot read it (damaged data or failed checksum)");
}

template <class T>
std::vector<T> H5File::read(const std::string& name) const {
  H5Handle ds = dataset(name);
  H5Handle type(PCV_H5(H5Dget_type(ds.get()), path_, ": dataset '", name, "' has no type"), H5Tclose);
  H5Handle space(PCV_H5(H5Dget_space(ds.get()), path_, ": dataset '", name, "' has no dataspace"), H5Sclose);
  const Stored s = stored(type.get(), space.get());
  // Bounded before allocating; read_into repeats the checks on the same dataset.
  check_stored_bytes(ds.get(), s.count, std::max<size_t>(1, H5Tget_size(type.get())), path_ + ": dataset '" + name + "'");
  std::vector<T> v(static_cast<size_t>(s.count));
  read_into(name, v.data(), s.count);
  return v;
}

std::vector<std::string> H5File::read_strings(const std::string& name) const {
  H5Handle ds = dataset(name);
  H5Handle stored_type(PCV_H5(H5Dget_type(ds.get()), path_, ": dataset '", name, "' has no type"), H5Tclose);
  H5Handle space(PCV_H5(H5Dget_space(ds.get()), path_, ": dataset '", name, "' has no dataspace"), H5Sclose);
  const Stored s = stored(stored_type.get(), space.get());
  const std::string where = path_ + ": dataset '" + name + "'";
  PCV_CHECK(s.vlen_string && s.space != H5S_NULL && s.rank <= 1, where,
            " must hold variable-length strings in at most one dimension, found ", describe(s));
  check_stored_bytes(ds.get(), s.count, 1, where);
  H5Handle type(PCV_H5(H5Tcopy(stored_type.get()), where, ": cannot copy its type"), H5Tclose);
  std::vector<char*> ptrs(static_cast<size_t>(s.count), nullptr);
  if (s.count)
    PCV_H5(H5Dread(ds.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, ptrs.data()), where, ": cannot read it");
  std::vector<std::string> out;
  for (char* p : ptrs) out.emplace_back(p ? p : "");
  if (s.count) H5Dvlen_reclaim(type.get(), space.get(), H5P_DEFAULT, ptrs.data());
  return out;
}

std::string H5File::read_string(const std::string& name) const {
  auto v = read_strings(name);
  PCV_CHECK(v.size() == 1, path_, ": dataset '", name, "' is not a single string");
  return v[0];
}

namespace {

// A scalar attribute, or (count > 0) a 1-D one of count elements.
H5Handle open_or_create_attr(hid_t obj, const std::string& key, hid_t type, const std::string& path,
                             hsize_t count = 0) {
  if (H5Aexists(obj, key.c_str()) > 0) H5Adelete(obj, key.c_str());
  H5Handle space(count ? H5Screate_simple(1, &count, nullptr) : H5Screate(H5S_SCALAR), H5Sclose);
  hid_t a = H5Acreate2(obj, key.c_str(), type, space.get(), H5P_DEFAULT, H5P_DEFAULT);
  PCV_CHECK(a >= 0, path, ": cannot create attribute '", key, "'", h5_reason_suffix());
  return {a, H5Aclose};
}

}  // namespace

void H5File::set_attr(const std::string& object, const std::string& key, const std::string& value) {
  H5Handle obj = open_object(file_.get(), object, path_);
  H5Handle type = h5_vlen_string_type();
  H5Handle a = open_or_create_attr(obj.get(), key, type.get(), path_);
  const char* p = value.c_str();
  PCV_H5(H5Awrite(a.get(), type.get(), &p), path_, ": cannot write attribute '", key, "'");
}

void H5File::set_attr(const std::string& object, const std::string& key, int64_t value) {
  H5Handle obj = open_object(file_.get(), object, path_);
  H5Handle a = open_or_create_attr(obj.get(), key, H5T_NATIVE_INT64, path_);
  PCV_H5(H5Awrite(a.get(), H5T_NATIVE_INT64, &value), path_, ": cannot write attribute '", key, "'");
}

void H5File::set_attr(const std::string& object, const std::string& key, double value) {
  H5Handle obj = open_object(file_.get(), object, path_);
  H5Handle a = open_or_create_attr(obj.get(), key, H5T_NATIVE_DOUBLE, path_);
  PCV_H5(H5Awrite(a.get(), H5T_NATIVE_DOUBLE, &value), path_, ": cannot write attribute '", key, "'");
}

void H5File::set_attr(const std::string& object, const std::string& key, const std::vector<std::string>& values) {
  PCV_CHECK(!values.empty(), path_, ": attribute '", key, "' needs at least one string");
  H5Handle obj = open_object(file_.get(), object, path_);
  H5Handle type = h5_vlen_string_type();
  H5Handle a = open_or_create_attr(obj.get(), key, type.get(), path_, hsize_t(values.size()));
  std::vector<const char*> ptrs;
  for (const std::string& v : values) ptrs.push_back(v.c_str());
  PCV_H5(H5Awrite(a.get(), type.get(), ptrs.data()), path_, ": cannot write attribute '", key, "'");
}

bool H5File::has_attr(const std::string& object, const std::string& key) const {
  if (object != "/" && !has(object)) return false;
  H5Handle obj = open_object(file_.get(), object, path_);
  return H5Aexists(obj.get(), key.c_str()) > 0;
}

H5Handle H5File::open_attr(const std::string& object, const std::string& key) const {
  H5Handle obj = open_object(file_.get(), object, path_);
  hid_t a = H5Aopen(obj.get(), key.c_str(), H5P_DEFAULT);
  PCV_CHECK(a >= 0, path_, ": no attribute '", key, "' on '", object, "'");
  return {a, H5Aclose};
}

namespace {

// Type and dataspace of an opened attribute, with the words that name it in messages.
struct AttrInfo {
  H5Handle type, space;
  Stored s;
  std::string where;
};

AttrInfo inspect_attr(hid_t a, const std::string& path, const std::string& object, const std::string& key) {
  AttrInfo i{H5Handle(H5Aget_type(a), H5Tclose), H5Handle(H5Aget_space(a), H5Sclose), {},
             path + ": attribute '" + key + "' on '" + object + "'"};
  PCV_CHECK(i.type.get() >= 0 && i.space.get() >= 0, i.where, " has no readable type or dataspace",
            h5_reason_suffix());
  i.s = stored(i.type.get(), i.space.get());
  return i;
}

// Exactly one stored element of an accepted class: anything else would be read whole into a
// single variable.
void expect_one(const AttrInfo& i, std::initializer_list<H5T_class_t> classes, const char* wanted) {
  const bool class_ok = std::find(classes.begin(), classes.end(), i.s.cls) != classes.end();
  PCV_CHECK(class_ok && i.s.space != H5S_NULL && i.s.count == 1, i.where, " must be ", wanted, ", found ",
            describe(i.s));
}

}  // namespace

std::string H5File::attr_string(const std::string& object, const std::string& key) const {
  H5Handle a = open_attr(object, key);
  const AttrInfo i = inspect_attr(a.get(), path_, object, key);
  expect_one(i, {H5T_STRING}, "one string");
  H5Handle type(PCV_H5(H5Tcopy(i.type.get()), i.where, ": cannot copy its type"), H5Tclose);
  if (i.s.vlen_string) {
    char* p = nullptr;
    PCV_H5(H5Aread(a.get(), type.get(), &p), i.where, ": cannot read it");
    std::string s = p ? p : "";
    H5free_memory(p);
    return s;
  }
  const size_t size = H5Tget_size(i.type.get());
  PCV_CHECK(size > 0 && size <= kMaxFixedString, i.where, " is a fixed-length string of ", size,
            " bytes (at most ", kMaxFixedString, ")");
  std::string s(size, '\0');
  PCV_H5(H5Aread(a.get(), type.get(), s.data()), i.where, ": cannot read it");
  return s.substr(0, s.find('\0'));
}

int64_t H5File::attr_int(const std::string& object, const std::string& key) const {
  H5Handle a = open_attr(object, key);
  const AttrInfo i = inspect_attr(a.get(), path_, object, key);
  expect_one(i, {H5T_INTEGER}, "one integer");
  int64_t v = 0;
  PCV_H5(H5Aread(a.get(), H5T_NATIVE_INT64, &v), i.where, ": cannot read it");
  return v;
}

double H5File::attr_double(const std::string& object, const std::string& key) const {
  H5Handle a = open_attr(object, key);
  const AttrInfo i = inspect_attr(a.get(), path_, object, key);
  expect_one(i, {H5T_FLOAT, H5T_INTEGER}, "one number");
  double v = 0;
  PCV_H5(H5Aread(a.get(), H5T_NATIVE_DOUBLE, &v), i.where, ": cannot read it");
  return v;
}

std::vector<std::string> H5File::attr_strings(const std::string& object, const std::string& key,
                                              int64_t max_count) const {
  H5Handle a = open_attr(object, key);
  const AttrInfo i = inspect_attr(a.get(), path_, object, key);
  PCV_CHECK(i.s.vlen_string && i.s.space != H5S_NULL && i.s.rank <= 1 && i.s.count >= 1 && i.s.count <= max_count,
            i.where, " must be 1 to ", max_count, " variable-length strings, found ", describe(i.s));
  H5Handle type(PCV_H5(H5Tcopy(i.type.get()), i.where, ": cannot copy its type"), H5Tclose);
  std::vector<char*> ptrs(static_cast<size_t>(i.s.count), nullptr);
  PCV_H5(H5Aread(a.get(), type.get(), ptrs.data()), i.where, ": cannot read it");
  std::vector<std::string> out;
  for (char* p : ptrs) out.emplace_back(p ? p : "");
  H5Dvlen_reclaim(type.get(), i.space.get(), H5P_DEFAULT, ptrs.data());
  return out;
}

void H5File::flush() { PCV_H5(H5Fflush(file_.get(), H5F_SCOPE_GLOBAL), path_, ": cannot flush"); }

#define PCV_INSTANTIATE(T)                                                                      \
  template void H5File::write<T>(const std::string&, const T*, const std::vector<int64_t>&);   \
  template std::vector<T> H5File::read<T>(const std::string&) const;                           \
  template void H5File::read_into<T>(const std::string&, T*, int64_t) const;
PCV_INSTANTIATE(float)
PCV_INSTANTIATE(double)
PCV_INSTANTIATE(int64_t)
PCV_INSTANTIATE(int32_t)
PCV_INSTANTIATE(uint8_t)
PCV_INSTANTIATE(uint16_t)
#undef PCV_INSTANTIATE

}  // namespace perceiver
