// TensorBoard scalars without TensorFlow or protobuf (DEPLOY-NOTES.md §9): an event file is a
// sequence of TFRecords (uint64 length, masked CRC32C of the length, data, masked CRC32C of the
// data), each holding one hand-encoded `Event` proto. The first record carries file_version
// "brain.Event:2"; every scalar is an Event{wall_time, step, summary{value{tag, simple_value}}}.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>

namespace perceiver {

namespace detail {
/// CRC32C (Castagnoli, reflected polynomial 0x82F63B78); crc32c("123456789") == 0xE3069283.
uint32_t crc32c(const void* data, size_t n);
/// TFRecord's mask: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t masked_crc32c(const void* data, size_t n);
}  // namespace detail

struct TensorBoardOptions {
  /// 0: flush after every record. Otherwise flush when a write finds the last flush older than
  /// this (no timer thread), and always on flush() and destruction.
  double flush_secs = 0.0;
};

/// Writes `<logdir>/events.out.tfevents.<unix secs, 10 digits>.<hostname>` (".<n>" appended if
/// that name exists, e.g. a resume within the same second). One writer per run dir (rank 0).
class TensorBoardWriter {
 public:
  /// Creates logdir if needed; throws perceiver::Error naming the path if it cannot.
  explicit TensorBoardWriter(const std::string& logdir, TensorBoardOptions opts = {});
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  /// One scalar point (stored as float32, TensorBoard's simple_value).
  void scalar(std::string_view tag, double value, int64_t step);
  /// SessionLog START at `step`, written on resume: TensorBoard then drops orphaned points with
  /// step >= `step` left by the interrupted run.
  void session_start(int64_t step);
  void flush();
  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& data);
  struct Close {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::unique_ptr<std::FILE, Close> file_;
  std::string path_;
  TensorBoardOptions opts_;
  double last_flush_ = 0.0;
};

}  // namespace perceiver
