// Weights by HF name: save/load round trips (float and double stores), reports naming missing,
// unexpected and mis-shaped tensors, the checkpoint format version, and the value-preserving
// conversions on every F16/BF16 bit pattern.
#include <gtest/gtest.h>

#include <cstring>

#include "io/hdf5_file.h"
#include "io/safetensors.h"
#include "io/weights.h"
#include "io_test_util.h"

namespace perceiver {
namespace {

using iotest::error_of;
using iotest::slurp;
using iotest::test_dir;

ParamRegistry small_registry() {
  ParamRegistry r;
  r.add({{"dense.weight", Shape{3, 4}, ParamRole::kLinearWeight, 4},
         {"dense.bias", Shape{3}, ParamRole::kBias, 4},
         {"norm.weight", Shape{4}, ParamRole::kNormGain, 4},
         {"latents", Shape{2, 5}, ParamRole::kEmbedding, 5}},
        "perceiver.");
  return r;
}

template <class T>
ParamStore<T> filled_store(uint64_t seed) {
  ParamStore<T> s(small_registry());
  s.initialize(seed, InitScheme::kDeepMind);
  return s;
}

template <class T>
bool same_params(ParamStore<T>& a, ParamStore<T>& b) {
  for (const auto& e : a.registry().entries())
    if (std::memcmp(a.param(e.spec.name).data, b.param(e.spec.name).data, e.spec.shape.numel() * sizeof(T)) != 0)
      return false;
  return true;
}

template <class T>
void expect_save_load_round_trip() {
  const auto dir = test_dir();
  ParamStore<T> src = filled_store<T>(1);
  save_safetensors(src, (dir / "w.safetensors").string());
  save_weights_h5(src, (dir / "w.h5").string(), {{"step", "12"}});
  EXPECT_FALSE(iotest::fs::exists(dir / "w.h5.tmp"));
  for (const char* file : {"w.safetensors", "w.h5"}) {
    ParamStore<T> dst = filled_store<T>(2);
    const WeightReport r = load_weights(dst, (dir / file).string());
    EXPECT_TRUE(r.ok()) << file;
    EXPECT_EQ(r.loaded, 4) << file;
    EXPECT_TRUE(same_params(src, dst)) << file;
  }
  EXPECT_EQ(H5File::open((dir / "w.h5").string()).attr_string("/", "step"), "12");
}

TEST(Weights, FloatStoreRoundTripsThroughBothFormats) { expect_save_load_round_trip<float>(); }
TEST(Weights, DoubleStoreRoundTripsThroughBothFormats) { expect_save_load_round_trip<double>(); }

// A safetensors file with one tensor missing, one extra and one mis-shaped.
std::string write_mismatched(const iotest::fs::path& dir, ParamStore<float>& src) {
  auto bytes = [&](const std::string& n) {
    auto p = src.param(n);
    return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(p.data), size_t(p.numel()) * 4);
  };
  const std::vector<float> extra(6, 0.5f);
  const std::vector<float> wrong(4 * 3, 0.25f);
  std::vector<StOutTensor> t = {
      {"perceiver.dense.weight", StDtype::kF32, {4, 3}, {reinterpret_cast<const uint8_t*>(wrong.data()), 48}},
      {"perceiver.dense.bias", StDtype::kF32, {3}, bytes("perceiver.dense.bias")},
      {"perceiver.latents", StDtype::kF32, {2, 5}, bytes("perceiver.latents")},
      {"perceiver.extra", StDtype::kF32, {6}, {reinterpret_cast<const uint8_t*>(extra.data()), 24}},
  };
  const std::string path = (dir / "mismatch.safetensors").string();
  write_safetensors(path, t, nullptr);
  return path;
}

void expect_report_names(const WeightReport& r) {
  EXPECT_EQ(r.missing, std::vector<std::string>{"perceiver.norm.weight"});
  EXPECT_EQ(r.unexpected, std::vector<std::string>{"perceiver.extra"});
  ASSERT_EQ(r.mis_shaped.size(), 1u);
  EXPECT_EQ(r.mis_shaped[0].name, "perceiver.dense.weight");
  EXPECT_EQ(r.mis_shaped[0].expected, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(r.mis_shaped[0].found, (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(r.problems().size(), 3u);
}

TEST(Weights, ReportNamesMissingUnexpectedAndMisShaped) {
  const auto dir = test_dir();
  ParamStore<float> src = filled_store<float>(3);
  const std::string path = write_mismatched(dir, src);

  ParamStore<float> dst = filled_store<float>(4);
  ParamStore<float> before = filled_store<float>(4);
  const std::string msg = error_of([&] { load_weights(dst, path); });
  for (const char* name : {"perceiver.norm.weight", "perceiver.extra", "perceiver.dense.weight", path.c_str()})
    EXPECT_NE(msg.find(name), std::string::npos) << name << " not in: " << msg;
  EXPECT_TRUE(same_params(dst, before)) << "strict loading must not touch the store on failure";

  const WeightReport r = load_weights(dst, path, /*strict=*/false);
  expect_report_names(r);
  EXPECT_EQ(r.loaded, 2);
  EXPECT_EQ(std::memcmp(dst.param("perceiver.latents").data, src.param("perceiver.latents").data, 40), 0);
  EXPECT_EQ(std::memcmp(dst.param("perceiver.norm.weight").data, before.param("perceiver.norm.weight").data, 16), 0);
  EXPECT_EQ(std::memcmp(dst.param("perceiver.dense.weight").data, before.param("perceiver.dense.weight").data, 48), 0);

  // The same report from the HDF5 checkpoint the file converts to.
  convert_safetensors_to_h5(path, (dir / "mismatch.h5").string());
  expect_report_names(load_weights(dst, (dir / "mismatch.h5").string(), false));
  expect_report_names(check_weights(dst.registry(), list_weight_tensors((dir / "mismatch.h5").string()), "x"));
}

TEST(Weights, NewerCheckpointFormatIsRefusedWithAHint) {
  const auto dir = test_dir();
  ParamStore<float> s = filled_store<float>(5);
  const std::string path = (dir / "future.h5").string();
  save_weights_h5(s, path);
  H5File::open(path, true).set_attr("/", "format_version", kCheckpointFormatVersion + 1);
  const std::string msg = error_of([&] { load_weights(s, path); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("HINT:"), std::string::npos) << msg;
  H5File::create((dir / "empty.h5").string());
  EXPECT_NE(error_of([&] { load_weights(s, (dir / "empty.h5").string()); }).find("no /params"), std::string::npos);
}

TEST(Weights, FailedSaveLeavesNoFile) {
  const auto dir = test_dir();
  ParamStore<float> s = filled_store<float>(6);
  const std::string bad = (dir / "missing_dir" / "w.safetensors").string();
  EXPECT_NE(error_of([&] { save_safetensors(s, bad); }).find(bad), std::string::npos);
  EXPECT_FALSE(iotest::fs::exists(bad + ".tmp"));
}

// Every 16-bit pattern (NaNs, infinities, subnormals, -0) of F16 and BF16 in one file, with
// F32/F64 tensors and metadata: safetensors → HDF5 → safetensors must give the same bytes.
TEST(Convert, EveryHalfBitPatternRoundTripsByteExactly) {
  const auto dir = test_dir();
  std::vector<uint16_t> all(0x10000);
  for (uint32_t i = 0; i < all.size(); ++i) all[i] = uint16_t(i);
  const std::vector<float> f32 = {1.0f / 3, -0.0f, 1e-45f};
  const std::vector<double> f64 = {0.1, -1e300};
  auto raw = [](const auto& v) {
    return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(v[0]));
  };
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"note", "all bits"}};
  const std::string src = (dir / "all.safetensors").string();
  write_safetensors(src,
                    {{"half", StDtype::kF16, {256, 256}, raw(all)},
                     {"brain", StDtype::kBF16, {0x10000}, raw(all)},
                     {"single", StDtype::kF32, {3}, raw(f32)},
                     {"double", StDtype::kF64, {2, 1}, raw(f64)}},
                    &meta);
  const ConvertSummary to_h5 = convert_safetensors_to_h5(src, (dir / "all.h5").string());
  EXPECT_EQ(to_h5.tensors, 4);
  EXPECT_EQ(to_h5.parameters, 2 * 0x10000 + 5);
  EXPECT_EQ(to_h5.dtype_str(), "BF16:1, F16:1, F32:1, F64:1");
  const H5File h = H5File::open((dir / "all.h5").string());
  EXPECT_EQ(h.attr_string("/params/half", "source_dtype"), "F16");
  EXPECT_EQ(h.read<float>("/params/half")[0x3c00], 1.0f);  // stored upcast

  const ConvertSummary back = convert_h5_to_safetensors((dir / "all.h5").string(), (dir / "back.safetensors").string());
  EXPECT_TRUE(back.header_preserved);
  EXPECT_EQ(back.rounded, 0);
  EXPECT_EQ(slurp(dir / "back.safetensors"), slurp(src));
}

// A checkpoint we wrote (no source header) converts to exactly what save_safetensors writes.
TEST(Convert, CheckpointWithoutSourceHeaderGetsTheCanonicalOne) {
  const auto dir = test_dir();
  ParamStore<float> s = filled_store<float>(7);
  save_weights_h5(s, (dir / "w.h5").string());
  save_safetensors(s, (dir / "direct.safetensors").string());
  const ConvertSummary c = convert_h5_to_safetensors((dir / "w.h5").string(), (dir / "conv.safetensors").string());
  EXPECT_FALSE(c.header_preserved);
  EXPECT_EQ(slurp(dir / "conv.safetensors"), slurp(dir / "direct.safetensors"));
}

TEST(Convert, RefusesNamesThatAreNotDatasetNames) {
  const auto dir = test_dir();
  const std::vector<float> v = {1};
  const std::span<const uint8_t> b(reinterpret_cast<const uint8_t*>(v.data()), 4);
  const std::string src = (dir / "slash.safetensors").string();
  write_safetensors(src, {{"a/b", StDtype::kF32, {1}, b}}, nullptr);
  const std::string msg = error_of([&] { convert_safetensors_to_h5(src, (dir / "x.h5").string()); });
  EXPECT_NE(msg.find("'a/b'"), std::string::npos) << msg;
  EXPECT_FALSE(iotest::fs::exists(dir / "x.h5"));
  EXPECT_FALSE(iotest::fs::exists(dir / "x.h5.tmp"));
}

}  // namespace
}  // namespace perceiver
