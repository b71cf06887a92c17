// FFmpeg error conversion and per-thread capture of FFmpeg's error log lines.
#include "media/ffmpeg_ptr.h"

#include <cstdarg>
#include <deque>
#include <mutex>
#include <sstream>

#include "perceiver/error.h"

extern "C" {
#include <libavutil/error.h>
#include <libavutil/log.h>
}

namespace perceiver::detail {
namespace {

// FFmpeg reports the real cause of a failure ("moov atom not found", "Format hls not on
// whitelist") only through av_log; the return code is a generic AVERROR_INVALIDDATA. Keeping the
// last few error lines of the current thread lets the exception carry the cause.
struct LogCapture {
  bool active = false;
  std::deque<std::string> lines;
};
thread_local LogCapture t_capture;
constexpr size_t kMaxCapturedLines = 4;

void capture_callback(void* avcl, int level, const char* fmt, va_list vl) {
  if (t_capture.active && level <= AV_LOG_ERROR) {
    char line[512];
    int print_prefix = 0;  // no "[mov @ 0x55..]" prefix: addresses make messages vary
    va_list copy;
    va_copy(copy, vl);
    av_log_format_line2(avcl, level, fmt, copy, line, sizeof line, &print_prefix);
    va_end(copy);
    std::string s(line);
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
    if (!s.empty()) {
      if (t_capture.lines.size() == kMaxCapturedLines) t_capture.lines.pop_front();
      t_capture.lines.push_back(std::move(s));
    }
  }
  av_log_default_callback(avcl, level, fmt, vl);
}

std::string_view base_name(std::string_view file) {
  auto slash = file.rfind('/');
  return slash == std::string_view::npos ? file : file.substr(slash + 1);
}

}  // namespace

FramePtr make_frame() {
  FramePtr f(av_frame_alloc());
  PCV_CHECK(f, "av_frame_alloc: out of memory");
  return f;
}

PacketPtr make_packet() {
  PacketPtr p(av_packet_alloc());
  PCV_CHECK(p, "av_packet_alloc: out of memory");
  return p;
}

std::string av_error_string(int code) {
  char buf[AV_ERROR_MAX_STRING_SIZE] = {};
  if (av_strerror(code, buf, sizeof buf) < 0) return "FFmpeg error " + std::to_string(code);
  return buf;
}

void begin_av_log_capture() {
  static std::once_flag installed;
  std::call_once(installed, [] { av_log_set_callback(capture_callback); });
  t_capture.active = true;
  t_capture.lines.clear();
}

std::string take_av_log_capture() {
  std::string out;
  for (const auto& l : t_capture.lines) {
    if (!out.empty()) out += "; ";
    out += l;
  }
  t_capture.lines.clear();
  return out;
}

void throw_av_error(const char* where, std::string_view call, int code, std::string_view path) {
  std::ostringstream os;
  os << base_name(where) << ": " << call << " failed for '" << path << "': " << av_error_string(code);
  if (std::string log = take_av_log_capture(); !log.empty()) os << " (FFmpeg: " << log << ")";
  throw Error(os.str());
}

}  // namespace perceiver::detail
