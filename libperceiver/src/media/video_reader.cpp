// VideoReader: opening untrusted local media safely, and reading stream metadata.
// The window decode itself (seek, frame selection, audio) is in window_decode.cpp.
#include "media/video_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <sstream>
#include <system_error>

#include "media/reader_state.h"
#include "perceiver/error.h"

extern "C" {
#include <libavutil/pixdesc.h>
}

namespace perceiver {
namespace detail {
namespace {

int interrupt_callback(void* opaque) { return static_cast<const Deadline*>(opaque)->expired() ? 1 : 0; }

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : sep) + s;
  return out;
}

std::string errno_text(int err) { return std::error_code(err, std::generic_category()).message(); }

// Only regular files: a FIFO or device would block or never end, and a directory or URL is never
// a clip. The name is checked first (so devices are not even opened), then the file is opened
// without blocking (O_NONBLOCK: a FIFO swapped in after the check does not wait for a writer)
// and what was opened is checked again with fstat. FFmpeg reads only this descriptor.
std::unique_ptr<MediaFile> open_local_file(const std::filesystem::path& path, const ReaderOptions& opts) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  PCV_CHECK(!ec && std::filesystem::exists(st), "cannot open '", path.string(), "': no such file");
  PCV_CHECK(std::filesystem::is_regular_file(st), "cannot open '", path.string(), "': not a regular file");
  auto file = std::make_unique<MediaFile>();
  file->fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  PCV_CHECK(file->fd >= 0, "cannot open '", path.string(), "': ",
            errno == ENOENT ? std::string("no such file") : errno_text(errno));
  struct stat opened {};
  PCV_CHECK(::fstat(file->fd, &opened) == 0, "cannot stat '", path.string(), "': ", errno_text(errno));
  PCV_CHECK(S_ISREG(opened.st_mode), "cannot open '", path.string(), "': not a regular file");
  file->size = int64_t(opened.st_size);
  PCV_CHECK(file->size > 0, "'", path.string(), "' is empty (0 bytes)");
  PCV_CHECK(file->size <= opts.max_file_bytes, "'", path.string(), "' is ", file->size,
            " bytes, over the limit of ", opts.max_file_bytes, " (ReaderOptions::max_file_bytes)");
  return file;
}

int read_file(void* opaque, uint8_t* buf, int n) {
  auto* f = static_cast<MediaFile*>(opaque);
  ssize_t r;
  do r = ::pread(f->fd, buf, size_t(n), f->pos);
  while (r < 0 && errno == EINTR);
  if (r < 0) return AVERROR(errno);
  if (r == 0) return AVERROR_EOF;
  f->pos += r;
  return int(r);
}

int64_t seek_file(void* opaque, int64_t offset, int whence) {
  auto* f = static_cast<MediaFile*>(opaque);
  if (whence & AVSEEK_SIZE) return f->size;
  whence &= ~AVSEEK_FORCE;
  const int64_t base = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? f->pos : whence == SEEK_END ? f->size : -1;
  if (base < 0 || offset < -base || offset > INT64_MAX - base) return AVERROR(EINVAL);
  f->pos = base + offset;
  return f->pos;
}

IoContextPtr make_io(MediaFile& file) {
  constexpr int kBufferBytes = 32768;  // the file protocol's default
  auto* buffer = static_cast<unsigned char*>(av_malloc(kBufferBytes));
  PCV_CHECK(buffer, "av_malloc: out of memory");
  AVIOContext* io = avio_alloc_context(buffer, kBufferBytes, 0, &file, read_file, nullptr, seek_file);
  if (!io) av_free(buffer);
  PCV_CHECK(io, "avio_alloc_context: out of memory");
  return IoContextPtr(io);
}

// Which demuxer FFmpeg would pick from the first bytes; only used to explain a failed open.
std::string probe_format_name(const std::filesystem::path& path, const MediaFile& file) {
  std::vector<unsigned char> buf(4096 + AVPROBE_PADDING_SIZE, 0);
  const ssize_t n = ::pread(file.fd, buf.data(), 4096, 0);
  AVProbeData pd{};
  const std::string name = path.string();
  pd.filename = name.c_str();
  pd.buf = buf.data();
  pd.buf_size = int(std::max<ssize_t>(0, n));
  int score = 0;
  const AVInputFormat* f = av_probe_input_format3(&pd, 1, &score);
  return f ? f->name : "";
}

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

// The decoders FFmpeg may open while probing the streams: its whitelist matches decoder names
// ("libdav1d" decodes codec "av1"), ours lists codecs. Hardware decoders are left out.
std::string decoder_whitelist(const ReaderOptions& opts) {
  std::string out;
  void* it = nullptr;
  while (const AVCodec* c = av_codec_iterate(&it)) {
    const std::string codec = avcodec_get_name(c->id);
    const bool allowed = contains(opts.allowed_video_codecs, codec) || contains(opts.allowed_audio_codecs, codec);
    if (av_codec_is_decoder(c) && allowed && !(c->capabilities & AV_CODEC_CAP_HARDWARE))
      out += (out.empty() ? "" : ",") + std::string(c->name);
  }
  return out;
}

bool format_allowed(const std::string& names, const std::vector<std::string>& allowed) {
  std::istringstream is(names);
  for (std::string n; std::getline(is, n, ',');)
    if (std::find(allowed.begin(), allowed.end(), n) != allowed.end()) return true;
  return false;
}

// FFmpeg reads the opened file through our callbacks (AVFMT_FLAG_CUSTOM_IO); the name is only
// for messages and probing by extension. protocol_whitelist=file: nothing inside a demuxer may
// open a network URL. format_whitelist: a playlist (hls), concat list or image sequence is
// refused before it can open the files it names. codec_whitelist: only allowed decoders run
// while the streams are probed.
InputFormatPtr open_format(ReaderState& s) {
  const std::filesystem::path& path = s.path;
  const ReaderOptions& opts = s.opts;
  AVFormatContext* raw = avformat_alloc_context();
  PCV_CHECK(raw, "avformat_alloc_context: out of memory");
  raw->interrupt_callback = AVIOInterruptCB{interrupt_callback, s.deadline.get()};
  raw->pb = s.io.get();
  raw->flags |= AVFMT_FLAG_CUSTOM_IO;
  AVDictionary* dict = nullptr;
  av_dict_set(&dict, "protocol_whitelist", "file", 0);
  av_dict_set(&dict, "format_whitelist", join(opts.allowed_formats, ",").c_str(), 0);
  av_dict_set(&dict, "codec_whitelist", decoder_whitelist(opts).c_str(), 0);
  DictPtr dict_owner(dict);
  const std::string url = "file:" + std::filesystem::absolute(path).string();
  begin_av_log_capture();
  AVDictionary* d = dict_owner.release();
  const int ret = avformat_open_input(&raw, url.c_str(), nullptr, &d);  // frees raw on failure
  dict_owner.reset(d);
  if (ret >= 0) return InputFormatPtr(raw);
  PCV_CHECK(!s.deadline->expired(), "opening '", path.string(), "' timed out after ",
            opts.timeout_s, " s (ReaderOptions::timeout_s)");
  const std::string probed = probe_format_name(path, *s.file);
  PCV_CHECK(probed.empty() || format_allowed(probed, opts.allowed_formats), "'", path.string(),
            "' is a '", probed, "' file, which is not an allowed container (allowed: ",
            join(opts.allowed_formats, ","), "); playlists and concat lists are never opened");
  throw_av_error(__FILE__ ":" PCV_STRINGIFY(__LINE__), "avformat_open_input", ret, path.string());
}

// Refuses a stream whose codec is not on the list, naming it.
void check_codec(const AVStream& st, const std::vector<std::string>& allowed, const char* kind,
                 const std::string& path) {
  const std::string codec = avcodec_get_name(st.codecpar->codec_id);
  PCV_CHECK(contains(allowed, codec), "'", path, "': ", kind, " codec '", codec, "' (stream ", st.index,
            ") is not allowed (allowed: ", join(allowed, ", "), ")");
}

CodecContextPtr open_decoder(const AVStream& st, const ReaderOptions& opts, const std::string& path) {
  const AVCodec* codec = avcodec_find_decoder(st.codecpar->codec_id);
  PCV_CHECK(codec, "'", path, "': no decoder for codec '", avcodec_get_name(st.codecpar->codec_id),
            "' (stream ", st.index, ")");
  CodecContextPtr ctx(avcodec_alloc_context3(codec));
  PCV_CHECK(ctx, "avcodec_alloc_context3: out of memory");
  PCV_AV_CHECK(avcodec_parameters_to_context(ctx.get(), st.codecpar), path);
  ctx->pkt_timebase = st.time_base;
  ctx->thread_count = std::max(1, opts.decoder_threads);
  // EXPLODE: stop at the first bitstream error instead of concealing it, so a corrupt clip is
  // reported and skipped rather than silently trained on.
  if (opts.reject_corrupt) ctx->err_recognition |= AV_EF_BITSTREAM | AV_EF_EXPLODE;
  PCV_AV_CHECK(avcodec_open2(ctx.get(), codec, nullptr), path);
  return ctx;
}

double seconds(int64_t ts, AVRational tb) { return double(ts) * av_q2d(tb); }

// A container whose index points past the end of the file was cut short (e.g. an interrupted
// download with the moov atom first): refuse it at open rather than deliver a half clip.
void check_index_within_file(AVStream* st, int64_t file_size, const std::string& path) {
  const int n = avformat_index_get_entries_count(st);
  int64_t furthest = 0;
  for (int i = 0; i < n; ++i) {
    const AVIndexEntry* e = avformat_index_get_entry(st, i);
    furthest = std::max<int64_t>(furthest, e->pos + e->size);
  }
  PCV_CHECK(furthest <= file_size, "'", path, "' is truncated: stream ", st->index,
            " has data indexed up to byte ", furthest, " but the file has ", file_size, " bytes");
}

void fill_video_info(const ReaderState& s, MediaInfo& info) {
  const AVStream* st = s.fmt->streams[s.video_index];
  const AVCodecParameters* par = st->codecpar;
  info.container = s.fmt->iformat->name;
  info.video_codec = avcodec_get_name(par->codec_id);
  info.width = par->width, info.height = par->height;
  const char* pf = av_get_pix_fmt_name(AVPixelFormat(par->format));
  info.pixel_format = pf ? pf : "unknown";
  AVRational rate = st->avg_frame_rate.num > 0 ? st->avg_frame_rate : st->r_frame_rate;
  info.fps = rate.num > 0 && rate.den > 0 ? av_q2d(rate) : 0;
  if (st->duration != AV_NOPTS_VALUE && st->duration > 0)
    info.duration_s = seconds(st->duration, st->time_base);
  else if (s.fmt->duration != AV_NOPTS_VALUE && s.fmt->duration > 0)
    info.duration_s = double(s.fmt->duration) / AV_TIME_BASE;
  info.frame_count = st->nb_frames > 0 ? st->nb_frames : std::llround(info.duration_s * info.fps);
}

void fill_audio_info(const ReaderState& s, MediaInfo& info) {
  info.has_audio = s.audio_index >= 0;
  if (!info.has_audio) return;
  const AVCodecParameters* par = s.fmt->streams[s.audio_index]->codecpar;
  info.sample_rate = par->sample_rate;
  info.channels = par->ch_layout.nb_channels;
  info.audio_codec = avcodec_get_name(par->codec_id);
}

void check_limits(const MediaInfo& info, const ReaderOptions& opts, const std::string& path) {
  PCV_CHECK(info.width > 0 && info.height > 0, "'", path, "': the video stream has no picture size");
  PCV_CHECK(info.width <= opts.max_width && info.height <= opts.max_height, "'", path, "': frames are ",
            info.width, "x", info.height, ", over the limit of ", opts.max_width, "x",
            opts.max_height, " (ReaderOptions::max_width/max_height)");
  PCV_CHECK(info.duration_s <= opts.max_duration_s, "'", path, "' lasts ", info.duration_s,
            " s, over the limit of ", opts.max_duration_s, " s (ReaderOptions::max_duration_s)");
  PCV_CHECK(info.fps > 0, "'", path, "': the video stream has no frame rate");
}

// Picks the video stream (never cover art) and the audio stream that belongs with it, and opens
// their decoders. An audio stream without a decoder is treated as absent.
void open_streams(ReaderState& s) {
  const std::string path = s.path.string();
  s.video_index = av_find_best_stream(s.fmt.get(), AVMEDIA_TYPE_VIDEO, -1, -1, nullptr, 0);
  PCV_CHECK(s.video_index >= 0, "'", path, "' has no video stream");
  AVStream* vst = s.fmt->streams[s.video_index];
  PCV_CHECK(!(vst->disposition & AV_DISPOSITION_ATTACHED_PIC), "'", path,
            "' has only a still picture, no video");
  check_codec(*vst, s.opts.allowed_video_codecs, "video", path);
  s.video = open_decoder(*vst, s.opts, path);
  s.origin = vst->start_time != AV_NOPTS_VALUE ? vst->start_time : 0;
  const int a = av_find_best_stream(s.fmt.get(), AVMEDIA_TYPE_AUDIO, -1, s.video_index, nullptr, 0);
  if (a >= 0) check_codec(*s.fmt->streams[a], s.opts.allowed_audio_codecs, "audio", path);
  if (a >= 0 && avcodec_find_decoder(s.fmt->streams[a]->codecpar->codec_id)) {
    s.audio_index = a;
    s.audio = open_decoder(*s.fmt->streams[a], s.opts, path);
    // One codec frame (MDCT overlap) plus the container's seek pre-roll (80 ms for Opus).
    const AVCodecParameters* par = s.fmt->streams[a]->codecpar;
    if (par->sample_rate > 0)
      s.audio_preroll_s = double(std::max(0, par->frame_size) + std::max(0, par->seek_preroll)) / par->sample_rate;
  }
}

}  // namespace
}  // namespace detail

struct VideoReader::State : detail::ReaderState {};

VideoReader VideoReader::open(const std::filesystem::path& path, const ReaderOptions& opts) {
  using namespace detail;
  auto s = std::make_unique<State>();
  s->path = path;
  s->opts = opts;
  s->file = open_local_file(path, opts);
  s->io = make_io(*s->file);
  s->deadline = std::make_unique<Deadline>();
  s->deadline->start(opts.timeout_s);
  s->fmt = open_format(*s);
  const std::string name = path.string();
  begin_av_log_capture();
  PCV_AV_CHECK(avformat_find_stream_info(s->fmt.get(), nullptr), name);
  PCV_CHECK(!s->deadline->expired(), "reading the stream headers of '", name, "' timed out");
  open_streams(*s);
  fill_video_info(*s, s->info);
  fill_audio_info(*s, s->info);
  check_limits(s->info, opts, name);
  for (unsigned i = 0; i < s->fmt->nb_streams; ++i)
    if (int(i) == s->video_index || int(i) == s->audio_index)
      check_index_within_file(s->fmt->streams[i], s->file->size, name);
  s->packet = make_packet();
  s->frame = make_frame();
  return VideoReader(std::move(s));
}

VideoReader::VideoReader(std::unique_ptr<State> state) : s_(std::move(state)) {}
VideoReader::VideoReader(VideoReader&&) noexcept = default;
VideoReader& VideoReader::operator=(VideoReader&&) noexcept = default;
VideoReader::~VideoReader() = default;

const MediaInfo& VideoReader::info() const { return s_->info; }
const std::filesystem::path& VideoReader::path() const { return s_->path; }

Clip VideoReader::read_window(const WindowSpec& spec) { return detail::decode_window(*s_, spec); }

int64_t window_audio_samples(int num_frames, double fps, int sample_rate) {
  return std::llround(double(num_frames) * sample_rate / fps);
}

void set_ffmpeg_log_level(int level) { av_log_set_level(level); }

}  // namespace perceiver
