#include "io/hdf5_file.h"

#include <algorithm>
#include <mutex>

#include "perceiver/error.h"

namespace perceiver {
namespace {

// HDF5 prints its own error stacks to stderr by default; we report through exceptions instead.
void silence_hdf5() {
  static std::once_flag once;
  std::call_once(once, [] { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); });
}

template <class T>
hid_t mem_type();
template <> hid_t mem_type<float>() { return H5T_NATIVE_FLOAT; }
template <> hid_t mem_type<double>() { return H5T_NATIVE_DOUBLE; }
template <> hid_t mem_type<int64_t>() { return H5T_NATIVE_INT64; }
template <> hid_t mem_type<int32_t>() { return H5T_NATIVE_INT32; }
template <> hid_t mem_type<uint8_t>() { return H5T_NATIVE_UINT8; }
template <> hid_t mem_type<uint16_t>() { return H5T_NATIVE_UINT16; }

#define PCV_H5(call, ...)                                                                     \
  [&] {                                                                                       \
    auto r_ = (call);                                                                         \
    PCV_CHECK(r_ >= 0, #call " failed: ", __VA_ARGS__);                                       \
    return r_;                                                                                \
  }()

H5Handle open_object(hid_t file, const std::string& name, const std::string& path) {
  hid_t id = H5Oopen(file, name.c_str(), H5P_DEFAULT);
  PCV_CHECK(id >= 0, path, ": no object '", name, "'");
  return {id, H5Oclose};
}

H5Handle open_dataset(hid_t file, const std::string& name, const std::string& path) {
  hid_t id = H5Dopen2(file, name.c_str(), H5P_DEFAULT);
  PCV_CHECK(id >= 0, path, ": no dataset '", name, "'");
  return {id, H5Dclose};
}

H5Handle link_creation_props() {
  hid_t lcpl = PCV_H5(H5Pcreate(H5P_LINK_CREATE), "link creation property list");
  H5Handle h(lcpl, H5Pclose);
  PCV_H5(H5Pset_create_intermediate_group(lcpl, 1), "intermediate groups");
  return h;
}

H5Handle string_type() {
  hid_t t = PCV_H5(H5Tcopy(H5T_C_S1), "string type");
  H5Handle h(t, H5Tclose);
  PCV_H5(H5Tset_size(t, H5T_VARIABLE), "variable string size");
  PCV_H5(H5Tset_cset(t, H5T_CSET_UTF8), "utf-8 strings");
  return h;
}

}  // namespace

H5File H5File::create(const std::string& path) {
  silence_hdf5();
  hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  PCV_CHECK(f >= 0, "cannot create HDF5 file '", path, "'");
  return H5File(H5Handle(f, H5Fclose), path);
}

H5File H5File::open(const std::string& path, bool writable) {
  silence_hdf5();
  PCV_CHECK(H5Fis_hdf5(path.c_str()) > 0, "'", path, "' is missing or not an HDF5 file");
  hid_t f = H5Fopen(path.c_str(), writable ? H5F_ACC_RDWR : H5F_ACC_RDONLY, H5P_DEFAULT);
  PCV_CHECK(f >= 0, "cannot open HDF5 file '", path, "' (truncated or corrupt?)");
  return H5File(H5Handle(f, H5Fclose), path);
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

std::vector<int64_t> H5File::shape(const std::string& name) const {
  H5Handle ds = open_dataset(file_.get(), name, path_);
  H5Handle space(PCV_H5(H5Dget_space(ds.get()), path_, " ", name), H5Sclose);
  const int rank = PCV_H5(H5Sget_simple_extent_ndims(space.get()), path_, " ", name);
  std::vector<hsize_t> dims(rank);
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  return {dims.begin(), dims.end()};
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
  std::vector<hsize_t> hd(dims.begin(), dims.end());
  H5Handle space(dims.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(int(hd.size()), hd.data(), nullptr), H5Sclose);
  PCV_CHECK(space.get() >= 0, path_, ": cannot create dataspace for '", name, "'");
  H5Handle lcpl = link_creation_props();
  H5Handle ds(H5Dcreate2(file_.get(), name.c_str(), mem_type<T>(), space.get(), lcpl.get(), H5P_DEFAULT, H5P_DEFAULT),
              H5Dclose);
  PCV_CHECK(ds.get() >= 0, path_, ": cannot create dataset '", name, "' (exists already?)");
  PCV_H5(H5Dwrite(ds.get(), mem_type<T>(), H5S_ALL, H5S_ALL, H5P_DEFAULT, data), path_, " ", name);
}

void H5File::write_string(const std::string& name, const std::string& value) {
  H5Handle type = string_type();
  H5Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  H5Handle lcpl = link_creation_props();
  H5Handle ds(H5Dcreate2(file_.get(), name.c_str(), type.get(), space.get(), lcpl.get(), H5P_DEFAULT, H5P_DEFAULT),
              H5Dclose);
  PCV_CHECK(ds.get() >= 0, path_, ": cannot create dataset '", name, "'");
  const char* p = value.c_str();
  PCV_H5(H5Dwrite(ds.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, &p), path_, " ", name);
}

void H5File::write_strings(const std::string& name, const std::vector<std::string>& values) {
  H5Handle type = string_type();
  hsize_t n = values.size();
  H5Handle space(H5Screate_simple(1, &n, nullptr), H5Sclose);
  H5Handle lcpl = link_creation_props();
  H5Handle ds(H5Dcreate2(file_.get(), name.c_str(), type.get(), space.get(), lcpl.get(), H5P_DEFAULT, H5P_DEFAULT),
              H5Dclose);
  PCV_CHECK(ds.get() >= 0, path_, ": cannot create dataset '", name, "'");
  std::vector<const char*> ptrs;
  for (const auto& v : values) ptrs.push_back(v.c_str());
  if (n) PCV_H5(H5Dwrite(ds.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, ptrs.data()), path_, " ", name);
}

template <class T>
void H5File::read_into(const std::string& name, T* out, int64_t count) const {
  H5Handle ds = open_dataset(file_.get(), name, path_);
  H5Handle space(PCV_H5(H5Dget_space(ds.get()), path_, " ", name), H5Sclose);
  const int64_t n = H5Sget_simple_extent_npoints(space.get());
  PCV_CHECK(n == count, path_, ": dataset '", name, "' has ", n, " elements, expected ", count);
  PCV_H5(H5Dread(ds.get(), mem_type<T>(), H5S_ALL, H5S_ALL, H5P_DEFAULT, out), path_, ": reading '", name, "'");
}

template <class T>
std::vector<T> H5File::read(const std::string& name) const {
  int64_t n = 1;
  for (int64_t d : shape(name)) n *= d;
  std::vector<T> v(n);
  read_into(name, v.data(), n);
  return v;
}

std::vector<std::string> H5File::read_strings(const std::string& name) const {
  H5Handle ds = open_dataset(file_.get(), name, path_);
  H5Handle type = string_type();
  H5Handle space(PCV_H5(H5Dget_space(ds.get()), path_, " ", name), H5Sclose);
  const int64_t n = H5Sget_simple_extent_npoints(space.get());
  std::vector<char*> ptrs(n, nullptr);
  PCV_H5(H5Dread(ds.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, ptrs.data()), path_, ": reading '", name, "'");
  std::vector<std::string> out;
  for (char* p : ptrs) out.emplace_back(p ? p : "");
  H5Dvlen_reclaim(type.get(), space.get(), H5P_DEFAULT, ptrs.data());
  return out;
}

std::string H5File::read_string(const std::string& name) const {
  auto v = read_strings(name);
  PCV_CHECK(v.size() == 1, path_, ": dataset '", name, "' is not a single string");
  return v[0];
}

namespace {

H5Handle open_or_create_attr(hid_t obj, const std::string& key, hid_t type, const std::string& path) {
  if (H5Aexists(obj, key.c_str()) > 0) H5Adelete(obj, key.c_str());
  H5Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  hid_t a = H5Acreate2(obj, key.c_str(), type, space.get(), H5P_DEFAULT, H5P_DEFAULT);
  PCV_CHECK(a >= 0, path, ": cannot create attribute '", key, "'");
  return {a, H5Aclose};
}

}  // namespace

void H5File::set_attr(const std::string& object, const std::string& key, const std::string& value) {
  H5Handle obj = open_object(file_.get(), object, path_);
  H5Handle type = string_type();
  H5Handle a = open_or_create_attr(obj.get(), key, type.get(), path_);
  const char* p = value.c_str();
  PCV_H5(H5Awrite(a.get(), type.get(), &p), path_, " attribute ", key);
}

void H5File::set_attr(const std::string& object, const std::string& key, int64_t value) {
  H5Handle obj = open_object(file_.get(), object, path_);
  H5Handle a = open_or_create_attr(obj.get(), key, H5T_NATIVE_INT64, path_);
  PCV_H5(H5Awrite(a.get(), H5T_NATIVE_INT64, &value), path_, " attribute ", key);
}

void H5File::set_attr(const std::string& object, const std::string& key, double value) {
  H5Handle obj = open_object(file_.get(), object, path_);
  H5Handle a = open_or_create_attr(obj.get(), key, H5T_NATIVE_DOUBLE, path_);
  PCV_H5(H5Awrite(a.get(), H5T_NATIVE_DOUBLE, &value), path_, " attribute ", key);
}

bool H5File::has_attr(const std::string& object, const std::string& key) const {
  if (object != "/" && !has(object)) return false;
  H5Handle obj = open_object(file_.get(), object, path_);
  return H5Aexists(obj.get(), key.c_str()) > 0;
}

namespace {
H5Handle open_attr(hid_t file, const std::string& object, const std::string& key, const std::string& path) {
  H5Handle obj = open_object(file, object, path);
  hid_t a = H5Aopen(obj.get(), key.c_str(), H5P_DEFAULT);
  PCV_CHECK(a >= 0, path, ": no attribute '", key, "' on '", object, "'");
  return {a, H5Aclose};
}
}  // namespace

std::string H5File::attr_string(const std::string& object, const std::string& key) const {
  H5Handle a = open_attr(file_.get(), object, key, path_);
  H5Handle stored(H5Aget_type(a.get()), H5Tclose);
  PCV_CHECK(H5Tget_class(stored.get()) == H5T_STRING, path_, ": attribute '", key, "' is not a string");
  if (H5Tis_variable_str(stored.get()) > 0) {
    H5Handle type = string_type();
    char* p = nullptr;
    PCV_H5(H5Aread(a.get(), type.get(), &p), path_, " attribute ", key);
    std::string s = p ? p : "";
    H5free_memory(p);
    return s;
  }
  std::string s(H5Tget_size(stored.get()), '\0');
  PCV_H5(H5Aread(a.get(), stored.get(), s.data()), path_, " attribute ", key);
  return s.substr(0, s.find('\0'));
}

int64_t H5File::attr_int(const std::string& object, const std::string& key) const {
  H5Handle a = open_attr(file_.get(), object, key, path_);
  int64_t v = 0;
  PCV_H5(H5Aread(a.get(), H5T_NATIVE_INT64, &v), path_, " attribute ", key);
  return v;
}

double H5File::attr_double(const std::string& object, const std::string& key) const {
  H5Handle a = open_attr(file_.get(), object, key, path_);
  double v = 0;
  PCV_H5(H5Aread(a.get(), H5T_NATIVE_DOUBLE, &v), path_, " attribute ", key);
  return v;
}

void H5File::flush() { PCV_H5(H5Fflush(file_.get(), H5F_SCOPE_GLOBAL), path_); }

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
