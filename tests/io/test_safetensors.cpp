// safetensors: the writer against the reference implementation's bytes, the reader on valid and
// hostile files (every error names the file and the tensor), and exact F16/BF16 conversion.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>

#include "io/safetensors.h"
#include "io_test_util.h"

namespace perceiver {
namespace {

using iotest::error_of;
using iotest::slurp;
using iotest::test_dir;

std::string u64_le(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = char((n >> (8 * i)) & 0xff);
  return s;
}

// A file from a header and a data section, exactly as given (no padding added).
std::string make_file(const iotest::fs::path& p, const std::string& header, const std::string& data) {
  iotest::write_bytes(p, u64_le(header.size()) + header + data);
  return p.string();
}

template <class T>
std::string bytes_of(const std::vector<T>& v) {
  return {reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T)};
}

std::span<const uint8_t> span_of(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// Expects opening `path` to fail with a message naming the file and containing every part.
void expect_open_error(const std::string& path, std::initializer_list<std::string> parts) {
  const std::string msg = error_of([&] { SafetensorsFile::open(path); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  for (const auto& part : parts) EXPECT_NE(msg.find(part), std::string::npos) << "want '" << part << "' in: " << msg;
}

TEST(Safetensors, WriterMatchesTheReferenceSerializer) {
  // The reference implementation's test_serialization: one F32 tensor [1,2,3] = 0..5.
  const auto dir = test_dir();
  const std::string data = bytes_of(std::vector<float>{0, 1, 2, 3, 4, 5});
  write_safetensors((dir / "a.safetensors").string(), {{"attn.0", StDtype::kF32, {1, 2, 3}, span_of(data)}}, nullptr);
  const std::string header = R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})";
  ASSERT_EQ(header.size(), 64u);  // already a multiple of 8: no padding
  EXPECT_EQ(slurp(dir / "a.safetensors"), u64_le(64) + header + data);

  // Its test_empty: metadata first, padded with spaces to a multiple of 8.
  const std::map<std::string, std::string> meta{{"framework", "pt"}};
  write_safetensors((dir / "e.safetensors").string(), {}, &meta);
  EXPECT_EQ(slurp(dir / "e.safetensors"), u64_le(40) + R"({"__metadata__":{"framework":"pt"}})" + "     ");
}

TEST(Safetensors, WriterSortsByDtypeThenName) {
  const auto dir = test_dir();
  const std::string f32 = bytes_of(std::vector<float>{1}), f64 = bytes_of(std::vector<double>{2});
  const std::string f16 = bytes_of(std::vector<uint16_t>{0x3c00});
  write_safetensors((dir / "s.safetensors").string(),
                    {{"b", StDtype::kF32, {1}, span_of(f32)},
                     {"c", StDtype::kF16, {}, span_of(f16)},
                     {"a", StDtype::kF32, {1}, span_of(f32)},
                     {"z", StDtype::kF64, {1}, span_of(f64)}},
                    nullptr);
  const SafetensorsFile f = SafetensorsFile::open((dir / "s.safetensors").string());
  std::vector<std::string> order;
  for (const auto& t : f.tensors()) order.push_back(t.name);
  EXPECT_EQ(order, (std::vector<std::string>{"z", "a", "b", "c"}));  // as Python's save_file
  EXPECT_EQ(f.header_json().size() % 8, 0u);
  EXPECT_TRUE(f.find("c")->shape.empty());
  float one = 0;
  f.read_float(*f.find("c"), &one, 1);
  EXPECT_EQ(one, 1.0f);
}

TEST(Safetensors, ReadsEveryFloatDtype) {
  const auto dir = test_dir();
  const std::string data = bytes_of(std::vector<float>{1.5f, -2}) + bytes_of(std::vector<uint16_t>{0x3c00, 0xc000}) +
                           bytes_of(std::vector<uint16_t>{0x3f80, 0x4049}) + bytes_of(std::vector<double>{0.1});
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("h":{"dtype":"F16","shape":[2],"data_offsets":[8,12]},"b":{"dtype":"BF16","shape":[1,2],"data_offsets":[12,16]},)"
      R"("d":{"dtype":"F64","shape":[1],"data_offsets":[16,24]}})";
  const SafetensorsFile f = SafetensorsFile::open(make_file(dir / "ok.safetensors", header, data));
  EXPECT_EQ(f.header().metadata, (std::map<std::string, std::string>{{"format", "pt"}}));
  float v[2];
  f.read_float(*f.find("a"), v, 2);
  EXPECT_EQ(v[0], 1.5f);
  f.read_float(*f.find("h"), v, 2);
  EXPECT_EQ(v[1], -2.0f);
  f.read_float(*f.find("b"), v, 2);
  EXPECT_EQ(v[1], 3.140625f);
  double d;
  f.read_double(*f.find("d"), &d, 1);
  EXPECT_EQ(d, 0.1);
  EXPECT_EQ(f.header_json(), header);
  EXPECT_NE(error_of([&] { f.read_float(*f.find("a"), v, 1); }).find("'a'"), std::string::npos);
}

TEST(Safetensors, RejectsTruncatedFiles) {
  const auto dir = test_dir();
  iotest::write_bytes(dir / "short", "abc");
  expect_open_error((dir / "short").string(), {"too short"});
  // The header length claims more than the file holds.
  iotest::write_bytes(dir / "cut_header", u64_le(100) + "{\"a\":");
  expect_open_error((dir / "cut_header").string(), {"header length 100", "exceeds the file size"});
  // The data section is shorter than the header says.
  const std::string header = R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})";
  expect_open_error(make_file(dir / "cut_data", header, std::string(10, '\0')), {"'w'", "out of range"});
}

TEST(Safetensors, RejectsHugeHeaderLength) {
  const auto dir = test_dir();
  iotest::write_bytes(dir / "huge", u64_le(uint64_t(1) << 63) + "{}      ");
  expect_open_error((dir / "huge").string(), {"exceeds the limit"});
  iotest::write_bytes(dir / "over", u64_le(kSafetensorsMaxHeader + 1) + "{}      ");
  expect_open_error((dir / "over").string(), {"exceeds the limit"});
}

TEST(Safetensors, RejectsOffsetsOutOfRangeOverlappingOrGapped) {
  const auto dir = test_dir();
  const std::string data(16, '\0');
  expect_open_error(make_file(dir / "range", R"({"big":{"dtype":"F32","shape":[250],"data_offsets":[0,1000]}})", data),
                    {"'big'", "out of range"});
  expect_open_error(make_file(dir / "reversed", R"({"r":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}})", data),
                    {"'r'", "end before they begin"});
  expect_open_error(make_file(dir / "overlap",
                              R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                              R"("y":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                              data),
                    {"'y'", "overlap tensor 'x'"});
  expect_open_error(make_file(dir / "gap",
                              R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                              R"("y":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                              data),
                    {"'y'", "gap of 4 bytes"});
  expect_open_error(make_file(dir / "trailing", R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", data),
                    {"trailing"});
}

TEST(Safetensors, RejectsWrongDtypeSize) {
  const auto dir = test_dir();
  // Two F16 values need 4 bytes, not 8.
  expect_open_error(
      make_file(dir / "f16", R"({"h":{"dtype":"F16","shape":[2],"data_offsets":[0,8]}})", std::string(8, '\0')),
      {"'h'", "F16", "needs 4"});
  // A shape whose byte count overflows 64 bits.
  expect_open_error(
      make_file(dir / "overflow", R"({"o":{"dtype":"F64","shape":[1099511627776,1099511627776],"data_offsets":[0,8]}})",
                std::string(8, '\0')),
      {"'o'", "more than 2^64"});
}

TEST(Safetensors, RejectsMalformedHeaders) {
  const auto dir = test_dir();
  const std::string d8(8, '\0');
  const std::pair<std::string, std::vector<std::string>> cases[] = {
      {"not json at all", {"does not start with '{'"}},
      {"{\"a\":", {"not valid JSON"}},
      {R"({"a":{"dtype":"F12","shape":[2],"data_offsets":[0,8]}})", {"'a'", "unknown safetensors dtype 'F12'"}},
      {R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", {"'a'", "non-negative"}},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0.0,8]}})", {"'a'", "data_offsets"}},
      {R"({"a":{"dtype":"F32","shape":[2]}})", {"'a'", "missing \"data_offsets\""}},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
       {"'a' twice"}},
      {R"({"__metadata__":{"n":1},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", {"__metadata__", "'n'"}},
      {"[1,2]", {"does not start with '{'"}},
  };
  int i = 0;
  for (const auto& [header, parts] : cases) {
    const std::string path = make_file(dir / ("bad" + std::to_string(i++)), header, d8);
    const std::string msg = error_of([&] { SafetensorsFile::open(path); });
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    for (const auto& part : parts) EXPECT_NE(msg.find(part), std::string::npos) << header << " -> " << msg;
  }
}

TEST(Safetensors, NullMetadataMeansNoMetadata) {
  const auto dir = test_dir();
  const SafetensorsFile f = SafetensorsFile::open(make_file(
      dir / "null.safetensors", R"({"__metadata__":null,"x":{"dtype":"F32","shape":[],"data_offsets":[0,4]}})",
      bytes_of(std::vector<float>{2})));
  EXPECT_FALSE(f.header().has_metadata);
  EXPECT_EQ(f.tensors().size(), 1u);
}

TEST(Safetensors, NonFloatTensorsParseButDoNotConvert) {
  const auto dir = test_dir();
  const SafetensorsFile f = SafetensorsFile::open(
      make_file(dir / "int.safetensors", R"({"steps":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", u64_le(7)));
  float v;
  const std::string msg = error_of([&] { f.read_float(f.tensors()[0], &v, 1); });
  EXPECT_NE(msg.find("'steps'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("I64"), std::string::npos) << msg;
}

TEST(HalfFloats, KnownValuesUpcastExactly) {
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xc000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x3555), 0.333251953125f);
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);               // largest half
  EXPECT_EQ(f16_to_f32(0x0400), std::ldexp(1.0f, -14));  // smallest normal
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(f16_to_f32(0x03ff), std::ldexp(1023.0f, -24));
  EXPECT_EQ(std::bit_cast<uint32_t>(f16_to_f32(0x8000)), 0x80000000u);  // -0
  EXPECT_EQ(f16_to_f32(0x7c00), INFINITY);
  EXPECT_EQ(f16_to_f32(0xfc00), -INFINITY);
  EXPECT_EQ(std::bit_cast<uint32_t>(f16_to_f32(0x7e01)), 0x7fc02000u);  // NaN payload kept

  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  EXPECT_EQ(bf16_to_f32(0x4049), 3.140625f);
  EXPECT_EQ(bf16_to_f32(0xc2f7), -123.5f);
  EXPECT_EQ(bf16_to_f32(0x0001), std::ldexp(1.0f, -133));   // smallest subnormal
  EXPECT_EQ(bf16_to_f32(0x7f7f), std::ldexp(255.0f, 120));  // largest finite: 0x7f7f0000
  EXPECT_EQ(bf16_to_f32(0xff80), -INFINITY);
}

TEST(HalfFloats, EveryBitPatternRoundTrips) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    ASSERT_EQ(f32_to_f16(f16_to_f32(uint16_t(h))), h) << std::hex << h;
    ASSERT_EQ(f32_to_bf16(bf16_to_f32(uint16_t(h))), h) << std::hex << h;
  }
}

TEST(HalfFloats, DowncastRoundsToNearestEven) {
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);      // tie → even (down)
  EXPECT_EQ(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // tie → even (up)
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);               // overflows to inf
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);  // tie below the subnormals
  EXPECT_EQ(f32_to_f16(std::ldexp(3.0f, -26)), 0x0001);
  EXPECT_EQ(f32_to_f16(-std::ldexp(1023.5f, -24)), 0x8400);                   // rounds up to -min normal
  EXPECT_EQ(f32_to_f16(std::bit_cast<float>(0x7f800001u)) & 0x7c00, 0x7c00);  // NaN stays NaN
  EXPECT_NE(f32_to_f16(std::bit_cast<float>(0x7f800001u)) & 0x03ff, 0);
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3f808000u)), 0x3f80);  // tie → even (down)
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3f818000u)), 0x3f82);  // tie → even (up)
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x7f7fffffu)), 0x7f80);  // rounds to inf
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x7f800001u)), 0x7fc0);  // NaN stays NaN
}

}  // namespace
}  // namespace perceiver
