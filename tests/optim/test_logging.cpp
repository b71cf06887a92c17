// TensorBoard event files decoded by a reader written here, independently of the writer: a
// bit-at-a-time CRC32C (the writer uses a table), TFRecord framing, and a generic protobuf
// wire-format walk. Also metrics.jsonl lines parsed back with nlohmann-json.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/metrics_jsonl.h"
#include "io/tensorboard.h"
#include "perceiver/error.h"

namespace perceiver {
namespace {

namespace fs = std::filesystem;

fs::path test_dir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const fs::path d = fs::path(PERCEIVER_BINARY_DIR) / "fixtures" / "optim" /
                     (std::string(info->test_suite_name()) + "." + info->name());
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// ---- Independent reader -------------------------------------------------------------------

uint32_t crc32c_bitwise(const std::string_view s) {
  uint32_t c = ~0u;
  for (unsigned char b : s) {
    c ^= b;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
  }
  return ~c;
}

uint32_t masked(uint32_t c) { return ((c >> 15) | (c << 17)) + 0xa282ead8u; }

template <class T>
T read_le(std::string_view s, size_t at) {
  T v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= T(uint8_t(s[at + i])) << (8 * i);
  return v;
}

/// Splits a TFRecord file, checking both CRCs of every record.
std::vector<std::string> read_records(const std::string& file) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < file.size()) {
    if (file.size() - at < 12) throw std::runtime_error("truncated header");
    const uint64_t len = read_le<uint64_t>(file, at);
    if (read_le<uint32_t>(file, at + 8) != masked(crc32c_bitwise(std::string_view(file).substr(at, 8))))
      throw std::runtime_error("bad length crc");
    if (file.size() - at < 16 + len) throw std::runtime_error("truncated record");
    const std::string data = file.substr(at + 12, len);
    if (read_le<uint32_t>(file, at + 12 + len) != masked(crc32c_bitwise(data))) throw std::runtime_error("bad data crc");
    out.push_back(data);
    at += 16 + len;
  }
  return out;
}

/// One protobuf field: varint/fixed values in `num`, length-delimited bytes in `bytes`.
struct Field {
  int wire = 0;
  uint64_t num = 0;
  std::string bytes;
};

uint64_t read_varint(std::string_view s, size_t& at) {
  uint64_t v = 0;
  for (int shift = 0;; shift += 7) {
    if (at >= s.size() || shift > 63) throw std::runtime_error("bad varint");
    const uint8_t b = uint8_t(s[at++]);
    v |= uint64_t(b & 0x7F) << shift;
    if (!(b & 0x80)) return v;
  }
}

std::multimap<int, Field> parse_message(std::string_view s) {
  std::multimap<int, Field> fields;
  size_t at = 0;
  while (at < s.size()) {
    const uint64_t key = read_varint(s, at);
    Field f;
    f.wire = int(key & 7);
    if (f.wire == 0) f.num = read_varint(s, at);
    else if (f.wire == 1) f.num = read_le<uint64_t>(s, at), at += 8;
    else if (f.wire == 5) f.num = read_le<uint32_t>(s, at), at += 4;
    else if (f.wire == 2) {
      const uint64_t n = read_varint(s, at);
      f.bytes = std::string(s.substr(at, n));
      at += n;
    } else throw std::runtime_error("unexpected wire type");
    if (at > s.size()) throw std::runtime_error("field past end");
    fields.emplace(int(key >> 3), f);
  }
  return fields;
}

struct DecodedEvent {
  double wall_time = 0;
  int64_t step = 0;
  std::optional<std::string> file_version;
  std::optional<std::string> tag;
  std::optional<float> value;
  std::optional<uint64_t> session_status;
};

DecodedEvent decode_event(const std::string& data) {
  DecodedEvent e;
  for (const auto& [num, f] : parse_message(data)) {
    if (num == 1 && f.wire == 1) std::memcpy(&e.wall_time, &f.num, 8);
    else if (num == 2 && f.wire == 0) e.step = int64_t(f.num);
    else if (num == 3 && f.wire == 2) e.file_version = f.bytes;
    else if (num == 7 && f.wire == 2) e.session_status = parse_message(f.bytes).find(1)->second.num;
    else if (num == 5 && f.wire == 2) {
      const auto summary = parse_message(f.bytes);
      EXPECT_EQ(summary.count(1), 1u) << "one Value per Summary";
      for (const auto& [vn, vf] : parse_message(summary.find(1)->second.bytes)) {
        if (vn == 1) e.tag = vf.bytes;
        if (vn == 2 && vf.wire == 5) {
          const uint32_t bits = uint32_t(vf.num);
          float v;
          std::memcpy(&v, &bits, 4);
          e.value = v;
        }
      }
    } else ADD_FAILURE() << "unexpected Event field " << num;
  }
  return e;
}

// ---- Tests ----------------------------------------------------------------------------------

TEST(TensorBoard, Crc32cKnownVectors) {
  EXPECT_EQ(crc32c_bitwise("123456789"), 0xE3069283u);
  EXPECT_EQ(detail::crc32c("123456789", 9), 0xE3069283u);
  const std::string zeros(32, '\0');
  EXPECT_EQ(detail::crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);  // RFC 3720 B.4
  EXPECT_EQ(detail::masked_crc32c("abc", 3), masked(crc32c_bitwise("abc")));
}

TEST(TensorBoard, EventFileDecodesIndependently) {
  const fs::path dir = test_dir() / "logs";  // the writer creates it
  std::string path;
  const double t0 = double(std::time(nullptr));
  {
    TensorBoardWriter w(dir.string());
    path = w.path();
    w.scalar("train/loss", 0.09277, 40);
    w.scalar("train/lr", 1e-5, 40);
    w.scalar("eval/top1 accuracy", 0.5, 1234567890123);
    w.session_start(41);
    w.scalar("train/loss", -3.5, -2);  // negative int64: 10-byte varint
  }
  const std::string name = fs::path(path).filename().string();
  EXPECT_EQ(name.rfind("events.out.tfevents.", 0), 0u) << name;
  EXPECT_EQ(fs::path(path).parent_path(), dir);
  EXPECT_EQ(name.substr(20, 10).find_first_not_of("0123456789"), std::string::npos) << name;

  const auto records = read_records(slurp(path));
  ASSERT_EQ(records.size(), 6u);
  const DecodedEvent first = decode_event(records[0]);
  EXPECT_EQ(first.file_version, "brain.Event:2");
  EXPECT_NEAR(first.wall_time, t0, 5.0);
  struct Want {
    const char* tag;
    float value;
    int64_t step;
  };
  const Want want[] = {{"train/loss", 0.09277f, 40}, {"train/lr", 1e-5f, 40},
                       {"eval/top1 accuracy", 0.5f, 1234567890123}, {"train/loss", -3.5f, -2}};
  const int scalar_records[] = {1, 2, 3, 5};
  for (int i = 0; i < 4; ++i) {
    const DecodedEvent e = decode_event(records[scalar_records[i]]);
    EXPECT_EQ(e.tag, want[i].tag);
    EXPECT_EQ(e.value, want[i].value);
    EXPECT_EQ(e.step, want[i].step);
    EXPECT_GE(e.wall_time, first.wall_time);
  }
  const DecodedEvent start = decode_event(records[4]);
  EXPECT_EQ(start.session_status, 1u);
  EXPECT_EQ(start.step, 41);
}

TEST(TensorBoard, ReaderRejectsCorruptionAndNamesDoNotCollide) {
  const fs::path dir = test_dir();
  TensorBoardWriter a(dir.string()), b(dir.string());  // same second, same host
  EXPECT_NE(a.path(), b.path());
  a.scalar("x", 1.0, 1);  // flushed: the bytes are on disk now
  std::string bytes = slurp(a.path());
  EXPECT_EQ(read_records(bytes).size(), 2u);
  bytes[bytes.size() - 6] ^= 0x01;  // inside the last record's data
  EXPECT_THROW(read_records(bytes), std::runtime_error);
  EXPECT_THROW(TensorBoardWriter("/proc/definitely/not/writable"), Error);
}

TEST(TensorBoard, TimedFlushStillWritesOnFlushAndClose) {
  const fs::path dir = test_dir();
  std::string path;
  {
    TensorBoardWriter w(dir.string(), {.flush_secs = 3600});
    path = w.path();
    w.scalar("a", 2.0, 1);
    w.flush();
    EXPECT_EQ(read_records(slurp(path)).size(), 2u);
    w.scalar("a", 3.0, 2);
  }
  EXPECT_EQ(read_records(slurp(path)).size(), 3u);
}

TEST(MetricsJsonl, OneObjectPerLineAppended) {
  const fs::path path = test_dir() / "sub" / "metrics.jsonl";
  {
    MetricsJsonl m(path.string());
    m.append({.step = 40, .integers = {{"epoch", 1}}, .numbers = {{"loss", 0.09277}, {"lr", 1e-5}}, .strings = {{"device", "cpu"}}});
  }
  MetricsJsonl m(path.string());  // reopening appends (resume)
  m.append({.step = 80, .integers = {}, .numbers = {{"loss", std::nan("")}}, .strings = {}});
  std::ifstream in(path);
  std::vector<nlohmann::ordered_json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::ordered_json::parse(line));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0]["step"], 40);
  EXPECT_DOUBLE_EQ(lines[0]["loss"].get<double>(), 0.09277);
  EXPECT_DOUBLE_EQ(lines[0]["lr"].get<double>(), 1e-5);
  EXPECT_EQ(lines[0]["device"], "cpu");
  EXPECT_TRUE(lines[0]["epoch"].is_number_integer());
  EXPECT_EQ(lines[0]["epoch"], 1);
  EXPECT_GT(lines[0]["wall_time"].get<double>(), 1.6e9);
  EXPECT_EQ(lines[0].begin().key(), "step");
  EXPECT_TRUE(lines[1]["loss"].is_null());
  EXPECT_THROW(MetricsJsonl("/proc/nope/metrics.jsonl"), Error);
}

// A run killed while writing a line leaves it partial; the run that resumes ends it before its
// own first line, which stays whole and parses.
TEST(MetricsJsonl, AResumedRunStartsAfterAKilledRunsPartialLine) {
  const fs::path path = test_dir() / "metrics.jsonl";
  {
    MetricsJsonl m(path.string());
    m.append({.step = 1, .integers = {}, .numbers = {{"loss", 0.5}}, .strings = {}});
  }
  {
    std::ofstream out(path, std::ios::app);
    out << R"({"step": 2, "wall_ti)";  // killed here
  }
  {
    MetricsJsonl m(path.string());
    m.append({.step = 2, .integers = {}, .numbers = {{"loss", 0.25}}, .strings = {}});
  }
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(nlohmann::json::parse(lines[0])["step"], 1);
  EXPECT_FALSE(nlohmann::json::accept(lines[1])) << lines[1];
  EXPECT_EQ(nlohmann::json::parse(lines[2])["step"], 2);
  EXPECT_DOUBLE_EQ(nlohmann::json::parse(lines[2])["loss"].get<double>(), 0.25);
  const auto size = fs::file_size(path);
  {
    MetricsJsonl m(path.string());  // whole lines: nothing is added on reopening
  }
  EXPECT_EQ(fs::file_size(path), size);
}

}  // namespace
}  // namespace perceiver
