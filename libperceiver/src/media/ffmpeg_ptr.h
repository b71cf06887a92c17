// Owners for FFmpeg objects (STYLE.md §5): one deleter struct and one unique_ptr alias per type,
// so ownership always moves as a unique_ptr and every early throw releases what was allocated.
// Also the conversion of FFmpeg return codes into perceiver::Error (STYLE.md §6).
#pragma once

#include <memory>
#include <string>
#include <string_view>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/dict.h>
#include <libswresample/swresample.h>
#include <libswscale/swscale.h>
}

namespace perceiver::detail {

/// Demuxer contexts opened with avformat_open_input.
struct InputFormatDeleter {
  void operator()(AVFormatContext* p) const { avformat_close_input(&p); }
};
/// Muxer contexts from avformat_alloc_output_context2; closes the file the muxer wrote to.
struct OutputFormatDeleter {
  void operator()(AVFormatContext* p) const {
    if (p->pb && !(p->oformat->flags & AVFMT_NOFILE)) avio_closep(&p->pb);
    avformat_free_context(p);
  }
};
/// Custom I/O contexts from avio_alloc_context (with their av_malloc'ed buffer).
struct IoContextDeleter {
  void operator()(AVIOContext* p) const {
    av_freep(&p->buffer);
    avio_context_free(&p);
  }
};
struct CodecContextDeleter {
  void operator()(AVCodecContext* p) const { avcodec_free_context(&p); }
};
struct FrameDeleter {
  void operator()(AVFrame* p) const { av_frame_free(&p); }
};
struct PacketDeleter {
  void operator()(AVPacket* p) const { av_packet_free(&p); }
};
struct SwsDeleter {
  void operator()(SwsContext* p) const { sws_freeContext(p); }
};
struct SwrDeleter {
  void operator()(SwrContext* p) const { swr_free(&p); }
};
struct DictDeleter {
  void operator()(AVDictionary* p) const { av_dict_free(&p); }
};

using InputFormatPtr = std::unique_ptr<AVFormatContext, InputFormatDeleter>;
using OutputFormatPtr = std::unique_ptr<AVFormatContext, OutputFormatDeleter>;
using IoContextPtr = std::unique_ptr<AVIOContext, IoContextDeleter>;
using CodecContextPtr = std::unique_ptr<AVCodecContext, CodecContextDeleter>;
using FramePtr = std::unique_ptr<AVFrame, FrameDeleter>;
using PacketPtr = std::unique_ptr<AVPacket, PacketDeleter>;
using SwsPtr = std::unique_ptr<SwsContext, SwsDeleter>;
using SwrPtr = std::unique_ptr<SwrContext, SwrDeleter>;
using DictPtr = std::unique_ptr<AVDictionary, DictDeleter>;

/// Allocators that throw instead of returning null.
FramePtr make_frame();
PacketPtr make_packet();

/// av_strerror as a string ("Invalid data found when processing input").
std::string av_error_string(int code);

/// Throws perceiver::Error naming the FFmpeg call, the media file, the error text and the last
/// error FFmpeg logged on this thread (which usually holds the real reason, e.g. "moov atom not
/// found"). `where` is our file:line.
[[noreturn]] void throw_av_error(const char* where, std::string_view call, int code,
                                 std::string_view path);

/// Starts collecting FFmpeg log lines of level AV_LOG_ERROR or worse that this thread emits.
/// Installed once per process; lines are still printed by av_log_default_callback as before.
void begin_av_log_capture();
/// The error lines collected since begin_av_log_capture(), joined by "; " (may be empty).
std::string take_av_log_capture();

}  // namespace perceiver::detail

#define PCV_STRINGIFY_DETAIL(x) #x
#define PCV_STRINGIFY(x) PCV_STRINGIFY_DETAIL(x)

/// Evaluates an FFmpeg call returning an int error code; a negative result throws an Error that
/// names the call and `path`. Evaluates to the (non-negative) result otherwise.
#define PCV_AV_CHECK(call, path)                                                                \
  ([&]() {                                                                                      \
    const int pcv_av_ret_ = (call);                                                             \
    if (pcv_av_ret_ < 0)                                                                        \
      ::perceiver::detail::throw_av_error(__FILE__ ":" PCV_STRINGIFY(__LINE__), #call, pcv_av_ret_, \
                                          (path));                                              \
    return pcv_av_ret_;                                                                         \
  }())
