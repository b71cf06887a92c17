#include "fixture.h"

#include <hdf5.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <type_traits>

#include "perceiver/error.h"

namespace perceiver::parity {
namespace {

namespace fs = std::filesystem;

static_assert(std::is_same_v<hid_t, int64_t>, "HDF5 >= 1.10 is required (64-bit hid_t)");

// Closes an HDF5 handle with its own close function on every exit path.
class Handle {
 public:
  Handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~Handle() {
    if (id_ >= 0) close_(id_);
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

Shape dataset_shape(hid_t dataset, const std::string& where) {
  Handle space(H5Dget_space(dataset), H5Sclose);
  const int rank = space.ok() ? H5Sget_simple_extent_ndims(space.get()) : -1;
  PCV_CHECK(rank >= 0 && rank <= Shape::kMaxRank, where, ": unreadable dataspace (rank ", rank,
            ")");
  hsize_t dims[Shape::kMaxRank] = {};
  H5Sget_simple_extent_dims(space.get(), dims, nullptr);
  Shape shape;
  for (int i = 0; i < rank; ++i) shape.push_back(int64_t(dims[i]));
  return shape;  // rank 0 (a scalar) has numel 1
}

// Reads a whole dataset as `mem_type`, checking that its stored class is `expected`.
template <class T>
std::vector<T> read_dataset(hid_t file, const std::string& file_path, const std::string& name,
                            hid_t mem_type, H5T_class_t expected, Shape* shape_out) {
  const std::string where = file_path + ":" + name;
  Handle d(H5Dopen2(file, name.c_str(), H5P_DEFAULT), H5Dclose);
  PCV_CHECK(d.ok(), where, ": no such dataset");
  Handle type(H5Dget_type(d.get()), H5Tclose);
  PCV_CHECK(H5Tget_class(type.get()) == expected, where, ": unexpected element type");
  const Shape shape = dataset_shape(d.get(), where);
  std::vector<T> out(size_t(shape.numel()));
  PCV_CHECK(H5Dread(d.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()) >= 0, where,
            ": read failed");
  if (shape_out) *shape_out = shape;
  return out;
}

std::string index_str(int64_t flat, const Shape& shape) {
  std::string s;
  for (int i = shape.rank() - 1; i >= 0; --i) {
    s = std::to_string(flat % shape[i]) + (s.empty() ? "" : ",") + s;
    flat /= shape[i];
  }
  return "[" + s + "]";
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// A stamp holds the seed of the last successful run; it is valid while newer than the script.
// ctest runs every test in its own process, and this keeps it to one generator run per build.
bool stamp_is_current(const fs::path& stamp, const fs::path& script, const std::string& tag) {
  std::error_code ec;
  const auto script_time = fs::last_write_time(script, ec);
  if (ec) return false;
  const auto stamp_time = fs::last_write_time(stamp, ec);
  if (ec || stamp_time < script_time) return false;
  std::ifstream in(stamp);
  std::string line;
  return std::getline(in, line) && line == tag;
}

// Runs the generator; returns "" on success (and writes the stamp), else the failure message.
std::string run_generator(const fs::path& script, const fs::path& dir, int seed,
                          const fs::path& stamp, const std::string& tag) {
  const std::string cmd = shell_quote(PERCEIVER_PYTHON) + " " + shell_quote(script.string()) +
                          " --out " + shell_quote(dir.string()) + " --seed " + std::to_string(seed);
  std::printf("generating fixtures: %s\n", cmd.c_str());
  std::fflush(stdout);
  const int status = std::system(cmd.c_str());
  if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return "the PyTorch fixture generator failed (" +
           (WIFEXITED(status) ? "exit code " + std::to_string(WEXITSTATUS(status))
                              : "status " + std::to_string(status)) +
           "); see its message above. Command: " + cmd +
           "\nHINT: " PERCEIVER_PYTHON
           " needs PyTorch and h5py (Debian: apt install python3-torch python3-h5py)";
  std::ofstream(stamp) << tag << "\n";
  return "";
}

}  // namespace

Fixture::Fixture(std::string path) : path_(std::move(path)) {
  file_ = H5Fopen(path_.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  PCV_CHECK(file_ >= 0, "cannot open HDF5 fixture ", path_);
}

Fixture::~Fixture() {
  if (file_ >= 0) H5Fclose(file_);
}

RefTensor Fixture::floats(const std::string& dataset) const {
  RefTensor t;
  t.data = read_dataset<float>(file_, path_, dataset, H5T_NATIVE_FLOAT, H5T_FLOAT, &t.shape);
  return t;
}

std::vector<int64_t> Fixture::ints(const std::string& dataset) const {
  return read_dataset<int64_t>(file_, path_, dataset, H5T_NATIVE_INT64, H5T_INTEGER, nullptr);
}

std::vector<std::string> Fixture::names(const std::string& group) const {
  Handle g(H5Gopen2(file_, group.c_str(), H5P_DEFAULT), H5Gclose);
  PCV_CHECK(g.ok(), path_, ": no group ", group);
  H5G_info_t info;
  PCV_CHECK(H5Gget_info(g.get(), &info) >= 0, path_, ": cannot list ", group);
  std::vector<std::string> out;
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    const ssize_t n =
        H5Lget_name_by_idx(g.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    PCV_CHECK(n >= 0, path_, ": cannot read member ", i, " of ", group);
    std::string name(size_t(n) + 1, '\0');
    H5Lget_name_by_idx(g.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), name.size(),
                       H5P_DEFAULT);
    name.resize(size_t(n));
    out.push_back(name);
  }
  return out;
}

int64_t Fixture::attr_int(const std::string& name) const {
  Handle a(H5Aopen(file_, name.c_str(), H5P_DEFAULT), H5Aclose);
  int64_t v = 0;
  PCV_CHECK(a.ok() && H5Aread(a.get(), H5T_NATIVE_INT64, &v) >= 0, path_,
            ": no integer attribute '", name, "'");
  return v;
}

double Fixture::attr_double(const std::string& name) const {
  Handle a(H5Aopen(file_, name.c_str(), H5P_DEFAULT), H5Aclose);
  double v = 0;
  PCV_CHECK(a.ok() && H5Aread(a.get(), H5T_NATIVE_DOUBLE, &v) >= 0, path_,
            ": no numeric attribute '", name, "'");
  return v;
}

// h5py writes Python str attributes as variable-length strings; numpy bytes as fixed-length.
std::string Fixture::attr_string(const std::string& name) const {
  Handle a(H5Aopen(file_, name.c_str(), H5P_DEFAULT), H5Aclose);
  PCV_CHECK(a.ok(), path_, ": no string attribute '", name, "'");
  Handle type(H5Aget_type(a.get()), H5Tclose);
  PCV_CHECK(H5Tget_class(type.get()) == H5T_STRING, path_, ": attribute '", name,
            "' is not a string");
  if (H5Tis_variable_str(type.get()) > 0) {
    Handle mem(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(mem.get(), H5T_VARIABLE);
    H5Tset_cset(mem.get(), H5Tget_cset(type.get()));
    char* s = nullptr;
    PCV_CHECK(H5Aread(a.get(), mem.get(), &s) >= 0 && s, path_, ": cannot read attribute '", name,
              "'");
    std::string out(s);
    H5free_memory(s);
    return out;
  }
  std::string out(H5Tget_size(type.get()), '\0');
  PCV_CHECK(H5Aread(a.get(), type.get(), out.data()) >= 0, path_, ": cannot read attribute '", name,
            "'");
  return out.substr(0, out.find('\0'));
}

::testing::AssertionResult tensors_close(const std::string& name, ConstView<float> got,
                                         const RefTensor& ref, Tolerance tol) {
  if (got.shape != ref.shape)
    return ::testing::AssertionFailure()
           << name << ": shape " << got.shape.str() << " but the reference has " << ref.shape.str();
  const double rel_floor = tol.atol / tol.rtol;  // below this |ref| the absolute term dominates
  double max_abs = 0, max_rel = 0, max_use = 0;
  int64_t bad = 0;
  std::ostringstream first;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double g = got.data[i], r = ref.data[size_t(i)], d = std::abs(g - r);
    const double use = d / (tol.atol + tol.rtol * std::abs(r));
    max_abs = std::max(max_abs, d);
    max_rel = std::max(max_rel, d / std::max(std::abs(r), rel_floor));
    max_use = std::max(max_use, use);
    if (use <= 1.0) continue;  // also false for NaN, which counts as a mismatch
    if (bad++ < 5)
      first << "\n    at " << index_str(i, got.shape) << ": got " << g << ", ref " << r;
  }
  std::printf("  %-4s %-44s %-12s max_abs %.2e  max_rel %.2e  tol_used %.3f\n", bad ? "FAIL" : "ok",
              name.c_str(), got.shape.str().c_str(), max_abs, max_rel, max_use);
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << name << ": " << bad << " of " << got.numel() << " elements exceed " << tol.atol << " + "
         << tol.rtol << "·|ref| (max_abs " << max_abs << ")" << first.str();
}

std::string generate_fixtures(const std::string& script, const std::string& subdir, int seed) {
  static std::map<std::string, std::string> outcome;  // dir -> "" or the generator's failure
  const fs::path dir = fs::path(PERCEIVER_BINARY_DIR) / subdir;
  const fs::path src = fs::path(PERCEIVER_SOURCE_DIR) / "tests" / "reference" / script;
  const fs::path stamp = dir / (script + ".stamp");
  const std::string tag = "seed " + std::to_string(seed);
  auto it = outcome.find(dir.string());
  if (it == outcome.end()) {
    const bool current = stamp_is_current(stamp, src, tag);
    if (current) std::printf("fixtures up to date: %s\n", stamp.c_str());
    it = outcome.emplace(dir.string(), current ? "" : run_generator(src, dir, seed, stamp, tag))
             .first;
  }
  PCV_CHECK(it->second.empty(), it->second);
  return dir.string();
}

}  // namespace perceiver::parity
