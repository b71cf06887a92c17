#include "io/tensorboard.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "perceiver/error.h"

namespace perceiver {
namespace detail {
namespace {

// Byte-at-a-time table for the reflected Castagnoli polynomial.
constexpr std::array<uint32_t, 256> make_crc32c_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr auto kCrc32cTable = make_crc32c_table();

}  // namespace

uint32_t crc32c(const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) c = kCrc32cTable[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const void* data, size_t n) {
  const uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

}  // namespace detail

namespace {

// ---- Protobuf wire format, only what Event needs (developers.google.com/protocol-buffers/docs/encoding)

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += char(uint8_t(v) | 0x80);
    v >>= 7;
  }
  out += char(uint8_t(v));
}

template <class T>
void put_le(std::string& out, T v) {  // fixed32/fixed64 are little-endian
  unsigned char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  if constexpr (std::endian::native == std::endian::big) std::reverse(b, b + sizeof(T));
  out.append(reinterpret_cast<const char*>(b), sizeof(T));
}

// Field key = (number << 3) | wire type (0 varint, 1 fixed64, 2 length-delimited, 5 fixed32).
void put_bytes(std::string& out, int field, std::string_view bytes) {
  put_varint(out, uint64_t(field) << 3 | 2);
  put_varint(out, bytes.size());
  out.append(bytes);
}

double wall_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Event{wall_time = 1 (double), step = 2 (int64)}; the caller appends the oneof field.
std::string event_header(int64_t step) {
  std::string e;
  e += char(0x09);
  put_le(e, wall_time());
  if (step != 0) {  // proto3 omits defaults
    e += char(0x10);
    put_varint(e, uint64_t(step));  // negative int64 is a 10-byte varint, as protobuf does
  }
  return e;
}

std::string scalar_event(std::string_view tag, float value, int64_t step) {
  std::string v;  // Summary.Value{tag = 1, simple_value = 2 (float)}
  put_bytes(v, 1, tag);
  v += char(0x15);
  put_le(v, value);
  std::string summary;  // Summary{repeated Value value = 1}
  put_bytes(summary, 1, v);
  std::string e = event_header(step);
  put_bytes(e, 5, summary);  // Event.summary = 5
  return e;
}

std::string hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0 || !buf[0]) return "localhost";
  return buf;
}

}  // namespace

TensorBoardWriter::TensorBoardWriter(const std::string& logdir, TensorBoardOptions opts) : opts_(opts) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(logdir, ec);
  PCV_CHECK(!ec, "cannot create log directory '", logdir, "': ", ec.message());
  char stamp[32];
  std::snprintf(stamp, sizeof stamp, "%010lld", static_cast<long long>(std::time(nullptr)));
  const std::string base = (fs::path(logdir) / "events.out.tfevents.").string() + stamp + "." + hostname();
  // "x": never append to another writer's file (a restart within the same second).
  for (int n = 0; n < 1000 && !file_; ++n) {
    path_ = n == 0 ? base : base + "." + std::to_string(n);
    file_.reset(std::fopen(path_.c_str(), "wbx"));
    if (!file_ && errno != EEXIST) break;
  }
  PCV_CHECK(file_ != nullptr, "cannot create TensorBoard event file '", path_, "': ", std::strerror(errno));
  std::string e = event_header(0);
  put_bytes(e, 3, "brain.Event:2");  // Event.file_version = 3
  write_record(e);
  flush();
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_) std::fflush(file_.get());  // no throw from a destructor
}

void TensorBoardWriter::scalar(std::string_view tag, double value, int64_t step) {
  PCV_CHECK(!tag.empty(), "TensorBoard scalar needs a tag");
  write_record(scalar_event(tag, float(value), step));
  if (opts_.flush_secs <= 0 || wall_time() - last_flush_ >= opts_.flush_secs) flush();
}

void TensorBoardWriter::session_start(int64_t step) {
  std::string e = event_header(step);
  put_bytes(e, 7, std::string("\x08\x01", 2));  // Event.session_log = 7 {status = START (1)}
  write_record(e);
  flush();
}

void TensorBoardWriter::flush() {
  PCV_CHECK(std::fflush(file_.get()) == 0, "cannot write TensorBoard event file '", path_, "': ",
            std::strerror(errno));
  last_flush_ = wall_time();
}

// TFRecord: uint64 length (LE), masked crc32c(length bytes), data, masked crc32c(data).
void TensorBoardWriter::write_record(const std::string& data) {
  std::string rec;
  put_le(rec, uint64_t(data.size()));
  put_le(rec, detail::masked_crc32c(rec.data(), 8));
  rec += data;
  put_le(rec, detail::masked_crc32c(data.data(), data.size()));
  PCV_CHECK(std::fwrite(rec.data(), 1, rec.size(), file_.get()) == rec.size(),
            "cannot write TensorBoard event file '", path_, "': ", std::strerror(errno));
}

}  // namespace perceiver
