#include "io/metrics_jsonl.h"

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "perceiver/error.h"

namespace perceiver {

namespace {

// Whether the file at `path` ends inside a line: a run killed while writing one leaves it.
bool ends_inside_a_line(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return false;
  const int last = std::fseek(f, -1, SEEK_END) == 0 ? std::fgetc(f) : EOF;
  std::fclose(f);
  return last != EOF && last != '\n';
}

}  // namespace

MetricsJsonl::MetricsJsonl(const std::string& path) : path_(path) {
  const auto dir = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!dir.empty()) std::filesystem::create_directories(dir, ec);
  PCV_CHECK(!ec, "cannot create directory '", dir.string(), "': ", ec.message());
  const bool partial = ends_inside_a_line(path);
  file_.reset(std::fopen(path.c_str(), "ab"));
  PCV_CHECK(file_ != nullptr, "cannot open metrics file '", path, "': ", std::strerror(errno));
  // A resumed run's first line must not be glued to a killed run's partial last one.
  if (partial)
    PCV_CHECK(std::fputc('\n', file_.get()) != EOF && std::fflush(file_.get()) == 0, "cannot write metrics file '",
              path, "': ", std::strerror(errno));
}

void MetricsJsonl::append(const MetricsRecord& record) {
  // ordered_json keeps the insertion order, so lines read like the log line.
  nlohmann::ordered_json j;
  j["step"] = record.step;
  j["wall_time"] =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  for (const auto& [key, value] : record.integers) j[key] = value;
  for (const auto& [key, value] : record.numbers) {
    if (std::isfinite(value))
      j[key] = value;
    else
      j[key] = nullptr;
  }
  for (const auto& [key, value] : record.strings) j[key] = value;
  // Invalid UTF-8 in a string is replaced rather than thrown mid-training.
  const std::string line = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  PCV_CHECK(std::fwrite(line.data(), 1, line.size(), file_.get()) == line.size() && std::fflush(file_.get()) == 0,
            "cannot write metrics file '", path_, "': ", std::strerror(errno));
}

}  // namespace perceiver
