// H5File: round trips of every element type, strings and attributes, and its error paths
// (missing file, non-HDF5 file, missing dataset: the message names the file and dataset);
// untrusted files (attributes of the wrong shape or type, sizes the file does not hold, data
// that lives in other files); in-memory files published atomically.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <csignal>
#include <functional>
#include <limits>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "io/hdf5_file.h"
#include "io_test_util.h"

namespace perceiver {
namespace {

namespace fs = iotest::fs;
using iotest::error_of;
using iotest::test_dir;

template <class T>
std::vector<T> ramp(size_t n) {
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = T(i * 7 % 251);
  return v;
}

template <class T>
void expect_round_trip(H5File& f, const std::string& name, const std::vector<T>& v, const std::vector<int64_t>& dims) {
  f.write<T>(name, v.data(), dims);
  EXPECT_EQ(f.shape(name), dims) << name;
  const std::vector<T> back = f.read<T>(name);
  ASSERT_EQ(back.size(), v.size()) << name;
  EXPECT_EQ(std::memcmp(back.data(), v.data(), v.size() * sizeof(T)), 0) << name;
}

TEST(Hdf5File, EveryTypeRoundTripsBitExactly) {
  const auto path = (test_dir() / "types.h5").string();
  // Floats that a careless path would change: -0, subnormals, extremes, NaN with payload.
  std::vector<float> f32 = {0.0f,
                            -0.0f,
                            std::numeric_limits<float>::denorm_min(),
                            std::numeric_limits<float>::max(),
                            -std::numeric_limits<float>::infinity(),
                            std::bit_cast<float>(0x7fc12345u),
                            1.0f / 3,
                            1e-30f};
  std::vector<double> f64 = {-0.0, std::numeric_limits<double>::denorm_min(), 1.0 / 3, -1e300, 2.5, 0.1};
  {
    H5File f = H5File::create(path);
    expect_round_trip(f, "/f32", f32, {2, 4});
    expect_round_trip(f, "/deep/group/f64", f64, {3, 2});
    expect_round_trip(f, "/i64", std::vector<int64_t>{std::numeric_limits<int64_t>::min(), -1, 0, 1LL << 40}, {4});
    expect_round_trip(f, "/i32", std::vector<int32_t>{-7, 0, std::numeric_limits<int32_t>::max()}, {3});
    expect_round_trip(f, "/u8", ramp<uint8_t>(24), {2, 3, 4});
    expect_round_trip(f, "/u16", ramp<uint16_t>(6), {1, 6});
    expect_round_trip(f, "/scalar", std::vector<double>{42.5}, {});
    expect_round_trip(f, "/params/perceiver.encoder.self_attends.0.mlp.dense1.weight", ramp<float>(6), {3, 2});
    f.write_string("/meta/name", "perceiver ✓");
    f.write_strings("/meta/list", {"a", "", "long string with spaces"});
    f.write_strings("/meta/empty", {});
    f.set_attr("/", "version", int64_t(3));
    f.set_attr("/", "lr", 1e-3);
    f.set_attr("/f32", "note", std::string("first"));
    f.set_attr("/f32", "note", std::string("overwritten"));
    f.flush();
  }
  const H5File f = H5File::open(path);  // reopened: everything was on disk
  EXPECT_EQ(std::memcmp(f.read<float>("/f32").data(), f32.data(), f32.size() * 4), 0);
  EXPECT_EQ(f.read<float>("/deep/group/f64")[2], float(1.0 / 3));  // converted on read
  EXPECT_EQ(f.read_string("/meta/name"), "perceiver ✓");
  EXPECT_EQ(f.read_strings("/meta/list"), (std::vector<std::string>{"a", "", "long string with spaces"}));
  EXPECT_TRUE(f.read_strings("/meta/empty").empty());
  EXPECT_EQ(f.attr_int("/", "version"), 3);
  EXPECT_EQ(f.attr_double("/", "lr"), 1e-3);
  EXPECT_EQ(f.attr_string("/f32", "note"), "overwritten");
  EXPECT_TRUE(f.has_attr("/f32", "note"));
  EXPECT_FALSE(f.has_attr("/f32", "absent"));
  EXPECT_FALSE(f.has_attr("/no/such", "note"));
  EXPECT_TRUE(f.has("/deep/group/f64"));
  EXPECT_FALSE(f.has("/deep/nothing/f64"));
  EXPECT_EQ(f.list("/params"), (std::vector<std::string>{"perceiver.encoder.self_attends.0.mlp.dense1.weight"}));
  EXPECT_EQ(f.list("/"),
            (std::vector<std::string>{"deep", "f32", "i32", "i64", "meta", "params", "scalar", "u16", "u8"}));
}

TEST(Hdf5File, MissingFileNamesThePath) {
  const auto path = (test_dir() / "absent.h5").string();
  const std::string msg = error_of([&] { H5File::open(path); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
}

TEST(Hdf5File, NonHdf5FileNamesThePath) {
  const auto path = (test_dir() / "text.h5").string();
  iotest::write_bytes(path, "this is not an HDF5 file\n");
  const std::string msg = error_of([&] { H5File::open(path); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("not an HDF5 file"), std::string::npos) << msg;
}

TEST(Hdf5File, MissingDatasetNamesFileAndDataset) {
  const auto path = (test_dir() / "one.h5").string();
  {
    H5File f = H5File::create(path);
    const float x = 1;
    f.write<float>("/params/a.weight", &x, {1});
  }
  const H5File f = H5File::open(path);
  for (auto* call : {+[](const H5File& h) { h.read<float>("/params/b.weight"); },
                     +[](const H5File& h) { h.shape("/params/b.weight"); }}) {
    const std::string msg = error_of([&] { call(f); });
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find("/params/b.weight"), std::string::npos) << msg;
  }
  float two[2];
  const std::string msg = error_of([&] { f.read_into<float>("/params/a.weight", two, 2); });
  EXPECT_NE(msg.find("/params/a.weight"), std::string::npos) << msg;
  EXPECT_NE(error_of([&] { f.attr_string("/params/a.weight", "absent"); }).find("absent"), std::string::npos);
}

TEST(Hdf5File, WriteErrorsNameTheTarget) {
  const auto dir = test_dir();
  const std::string nowhere = (dir / "no_such_dir" / "x.h5").string();
  EXPECT_NE(error_of([&] { H5File::create(nowhere); }).find(nowhere), std::string::npos);
  H5File f = H5File::create((dir / "w.h5").string());
  const double x = 1;
  f.write<double>("/x", &x, {});
  const std::string msg = error_of([&] { f.write<double>("/x", &x, {}); });
  EXPECT_NE(msg.find("'/x'"), std::string::npos) << msg;
}

// A file made with the raw HDF5 API, for shapes and types our writer never produces.
class RawFile {
 public:
  explicit RawFile(const std::string& path) : f_(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT)) {}
  ~RawFile() { H5Fclose(f_); }
  hid_t id() const { return f_; }
  // An attribute on "/" of `type` over `dims` (empty: scalar; {0} with null: a null dataspace).
  void attr(const char* key, hid_t type, const std::vector<hsize_t>& dims, const void* data, bool null = false) {
    const hid_t space = null ? H5Screate(H5S_NULL)
                             : dims.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(int(dims.size()), dims.data(), nullptr);
    const hid_t a = H5Acreate2(f_, key, type, space, H5P_DEFAULT, H5P_DEFAULT);
    if (data) H5Awrite(a, type, data);
    H5Aclose(a);
    H5Sclose(space);
  }

 private:
  hid_t f_;
};

hid_t vlen_string() {
  const hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, H5T_VARIABLE);
  return t;
}

// Issue 15, High 1: an attribute read as one value must hold exactly one value of that kind;
// reading an array into one variable overflowed the stack (SIGSEGV).
TEST(Hdf5File, ScalarAttributesMustHoldOneValueOfTheirKind) {
  const auto path = (test_dir() / "attrs.h5").string();
  {
    RawFile f(path);
    const std::vector<int64_t> many(4000, 7);
    f.attr("array", H5T_NATIVE_INT64, {4000}, many.data());
    f.attr("grid", H5T_NATIVE_INT64, {2, 3}, many.data());
    f.attr("null", H5T_NATIVE_INT64, {}, nullptr, /*null=*/true);
    const double d = 2.5;
    f.attr("real", H5T_NATIVE_DOUBLE, {}, &d);
    const hid_t s = vlen_string();
    const char* words[3] = {"a", "b", "c"};
    f.attr("word", s, {}, words);
    f.attr("words", s, {3}, words);
    H5Tclose(s);
    const int64_t one = 9;
    f.attr("one", H5T_NATIVE_INT64, {1}, &one);
  }
  const H5File f = H5File::open(path);
  auto err = [&](auto&& call) { return error_of(call); };
  const std::string where = path + ": attribute ";
  EXPECT_NE(err([&] { f.attr_int("/", "array"); }).find(where + "'array' on '/' must be one integer, found 4000 integers"),
            std::string::npos) << err([&] { f.attr_int("/", "array"); });
  EXPECT_NE(err([&] { f.attr_int("/", "grid"); }).find("found 6 integers in 2 dimensions"), std::string::npos);
  EXPECT_NE(err([&] { f.attr_int("/", "null"); }).find("found no value (an empty dataspace)"), std::string::npos);
  EXPECT_NE(err([&] { f.attr_int("/", "real"); }).find("must be one integer, found one float"), std::string::npos);
  EXPECT_NE(err([&] { f.attr_int("/", "word"); }).find("found one string"), std::string::npos);
  EXPECT_NE(err([&] { f.attr_double("/", "words"); }).find("must be one number, found 3 strings"), std::string::npos);
  EXPECT_NE(err([&] { f.attr_string("/", "array"); }).find("must be one string, found 4000 integers"), std::string::npos);
  EXPECT_NE(err([&] { f.attr_string("/", "words"); }).find("found 3 strings"), std::string::npos);
  EXPECT_NE(err([&] { f.attr_strings("/", "words", 2); }).find("must be 1 to 2 variable-length strings"),
            std::string::npos);
  // What is well-formed still reads, a one-element array included.
  EXPECT_EQ(f.attr_int("/", "one"), 9);
  EXPECT_EQ(f.attr_double("/", "one"), 9.0);
  EXPECT_EQ(f.attr_double("/", "real"), 2.5);
  EXPECT_EQ(f.attr_string("/", "word"), "a");
  EXPECT_EQ(f.attr_strings("/", "words", 3), (std::vector<std::string>{"a", "b", "c"}));
}

TEST(Hdf5File, DatasetsAreReadOnlyAsWhatTheyHold) {
  const auto path = (test_dir() / "datasets.h5").string();
  {
    RawFile f(path);
    const hsize_t huge = hsize_t(1) << 40;
    const hid_t space = H5Screate_simple(1, &huge, nullptr);
    const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    const hsize_t chunk = 1024;
    H5Pset_chunk(dcpl, 1, &chunk);  // nothing written: the file is small, the claim is 4 TiB
    H5Dclose(H5Dcreate2(f.id(), "huge", H5T_NATIVE_FLOAT, space, H5P_DEFAULT, dcpl, H5P_DEFAULT));
    H5Pclose(dcpl);
    H5Sclose(space);
    const hsize_t two = 2;
    const hid_t s2 = H5Screate_simple(1, &two, nullptr);
    const hid_t str = vlen_string();
    const char* words[2] = {"x", "y"};
    const hid_t ds = H5Dcreate2(f.id(), "words", str, s2, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(ds, str, H5S_ALL, H5S_ALL, H5P_DEFAULT, words);
    H5Dclose(ds);
    H5Tclose(str);
    H5Sclose(s2);
  }
  const H5File f = H5File::open(path);
  const std::string huge = error_of([&] { f.read<float>("huge"); });
  EXPECT_NE(huge.find("dataset 'huge' claims 1099511627776 elements but the file stores 0 bytes"), std::string::npos)
      << huge;
  EXPECT_NE(error_of([&] { f.read<float>("words"); }).find("must hold numbers, found 2 strings"), std::string::npos);
  EXPECT_EQ(f.read_strings("words"), (std::vector<std::string>{"x", "y"}));
}

// Issue 15, Medium 6: HDF5 reads a dataset's bytes from another file when told to (external
// raw storage, external links, virtual datasets): perceiver-convert copied a secret file into
// its output. Every file we open is walked once and such objects are refused by name.
TEST(Hdf5File, DataFromOtherFilesIsRefused) {
  const auto dir = test_dir();
  const std::string secret = (dir / "secret.txt").string();
  iotest::write_bytes(secret, "0123456789abcdef");  // 4 floats' worth
  const hsize_t four = 4;
  auto make = [&](const std::string& name, const std::function<void(hid_t file, hid_t space)>& add) {
    const std::string p = (dir / name).string();
    RawFile f(p);
    const hid_t space = H5Screate_simple(1, &four, nullptr);
    H5Gclose(H5Gcreate2(f.id(), "params", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    add(f.id(), space);
    H5Sclose(space);
    return p;
  };
  const std::string external = make("external.h5", [&](hid_t f, hid_t space) {
    const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_external(dcpl, secret.c_str(), 0, 16);
    H5Dclose(H5Dcreate2(f, "/params/w", H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT));
    H5Pclose(dcpl);
  });
  const std::string other = make("other.h5", [&](hid_t f, hid_t space) {
    const float v[4] = {1, 2, 3, 4};
    const hid_t ds = H5Dcreate2(f, "/params/w", H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
    H5Dclose(ds);
  });
  const std::string link = make("link.h5", [&](hid_t f, hid_t) {
    H5Lcreate_external(other.c_str(), "/params/w", f, "/params/w", H5P_DEFAULT, H5P_DEFAULT);
  });
  const std::string virt = make("virtual.h5", [&](hid_t f, hid_t space) {
    const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_virtual(dcpl, space, other.c_str(), "/params/w", space);
    H5Dclose(H5Dcreate2(f, "/params/w", H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT));
    H5Pclose(dcpl);
  });
  const std::vector<std::pair<std::string, std::string>> cases = {
      {external, "refusing a dataset with external storage '/params/w'"},
      {link, "refusing an external link '/params/w'"},
      {virt, "refusing a virtual dataset '/params/w'"}};
  for (const auto& c : cases) {
    const std::string msg = error_of([&] { H5File::open(c.first); });
    EXPECT_NE(msg.find(c.first + ": " + c.second), std::string::npos) << msg;
  }
  EXPECT_EQ(H5File::open(other).read<float>("/params/w"), (std::vector<float>{1, 2, 3, 4}));
}

TEST(Hdf5File, InMemoryFilesArePublishedWholeOrNotAtAll) {
  const auto dir = test_dir();
  const std::string path = (dir / "mem.h5").string();
  {
    H5File f = H5File::create_in_memory(path);
    const std::vector<float> v = {1, 2, 3};
    f.write<float>("/a/b", v.data(), {3});
    EXPECT_FALSE(fs::exists(path)) << "an in-memory file reached the disk before commit()";
    f.commit(TempName::kUnique);
  }
  const H5File back = H5File::open(path);
  EXPECT_EQ(back.read<float>("/a/b"), (std::vector<float>{1, 2, 3}));
  EXPECT_TRUE(back.has_checksum("/a/b"));
  for (const auto& e : fs::directory_iterator(dir)) EXPECT_EQ(e.path().filename(), "mem.h5") << "leftover " << e.path();

  // A write that fails for lack of space leaves the old file and no temporary, and the process
  // ends normally (HDF5 holds no half-written file to trip over at exit).
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{16 << 10, 16 << 10};
    setrlimit(RLIMIT_FSIZE, &limit);
    int code = 10;
    try {
      H5File f = H5File::create_in_memory(path);
      const std::vector<float> big(1 << 16, 1.0f);
      f.write<float>("/a/b", big.data(), {int64_t(big.size())});
      f.commit(TempName::kUnique);
    } catch (const Error& e) {
      code = std::string(e.what()).find("File too large") != std::string::npos ? 0 : 11;
    }
    H5close();  // HDF5's exit-time cleanup, which crashed on a file it could not close
    std::_Exit(code);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(H5File::open(path).read<float>("/a/b"), (std::vector<float>{1, 2, 3}));
  for (const auto& e : fs::directory_iterator(dir)) EXPECT_EQ(e.path().filename(), "mem.h5") << "leftover " << e.path();
}

}  // namespace
}  // namespace perceiver
