// LOGDIR/metrics.jsonl: one JSON object per log step, the same scalars as the log line and
// TensorBoard (DESIGN.md "Log line"). Lines are appended and flushed one at a time, so a killed
// run leaves only whole lines (at worst one partial last line, which readers skip; a run that
// reopens the file ends that line first, so its own lines stay whole).
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace perceiver {

/// One line: {"step": .., "wall_time": .., <integers...>, <numbers...>, <strings...>} in this order.
/// NaN and infinite numbers are written as null (JSON has no such values).
struct MetricsRecord {
  int64_t step = 0;
  std::vector<std::pair<std::string, int64_t>> integers;      // e.g. {"epoch", 1}
  std::vector<std::pair<std::string, double>> numbers;        // e.g. {"loss", 0.09}, {"lr", 1e-5}
  std::vector<std::pair<std::string, std::string>> strings;   // e.g. {"time", "2026-11-22 10:57:48"}
};

class MetricsJsonl {
 public:
  /// Opens `path` for appending (creating it and its directory); throws naming the path.
  explicit MetricsJsonl(const std::string& path);
  MetricsJsonl(const MetricsJsonl&) = delete;
  MetricsJsonl& operator=(const MetricsJsonl&) = delete;

  void append(const MetricsRecord& record);
  const std::string& path() const { return path_; }

 private:
  struct Close {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::unique_ptr<std::FILE, Close> file_;
  std::string path_;
};

}  // namespace perceiver
