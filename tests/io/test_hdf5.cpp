// H5File: round trips of every element type, strings and attributes, and its error paths
// (missing file, non-HDF5 file, missing dataset: the message names the file and dataset).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "io/hdf5_file.h"
#include "io_test_util.h"

namespace perceiver {
namespace {

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

}  // namespace
}  // namespace perceiver
