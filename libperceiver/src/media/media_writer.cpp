// MediaWriter and write_png: encode with libavcodec, mux with libavformat.
#include "media/media_writer.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <vector>

#include "media/ffmpeg_ptr.h"
#include "perceiver/error.h"

extern "C" {
#include <libavutil/channel_layout.h>
#include <libavutil/opt.h>
#include <libavutil/pixdesc.h>
}

namespace perceiver {
namespace {

using namespace detail;

AVPixelFormat pixel_format(const std::string& name) {
  const AVPixelFormat f = av_get_pix_fmt(name.c_str());
  PCV_CHECK(f != AV_PIX_FMT_NONE, "unknown pixel format '", name, "'");
  return f;
}

const AVCodec* find_encoder(const std::string& name) {
  const AVCodec* c = avcodec_find_encoder_by_name(name.c_str());
  PCV_CHECK(c, "FFmpeg has no encoder '", name, "'");
  return c;
}

// Planar float for encoders that take it (aac), else their first format (libopus: s16/flt).
AVSampleFormat audio_format(const AVCodec* c) {
  if (!c->sample_fmts) return AV_SAMPLE_FMT_FLTP;
  for (const AVSampleFormat* f = c->sample_fmts; *f != AV_SAMPLE_FMT_NONE; ++f)
    if (*f == AV_SAMPLE_FMT_FLTP || *f == AV_SAMPLE_FMT_FLT) return *f;
  return c->sample_fmts[0];
}

}  // namespace

struct MediaWriter::State {
  std::filesystem::path path;
  MediaWriterOptions opts;
  OutputFormatPtr fmt;
  CodecContextPtr video, audio;
  AVStream* video_stream = nullptr;  // owned by fmt
  AVStream* audio_stream = nullptr;
  SwsPtr sws;                        // RGB24 -> encoder pixel format
  SwrPtr swr;                        // interleaved float -> encoder sample format
  FramePtr rgb_frame;                // padded copy of the caller's RGB (swscale reads past row ends)
  FramePtr video_frame, audio_frame;
  PacketPtr packet;
  int64_t frames_written = 0, samples_written = 0;
  std::vector<float> pending;        // [frames, channels] audio not yet a full encoder frame
  int audio_frame_size = 1024;
  bool finished = false;

  void open_video();
  void open_audio();
  void encode(AVCodecContext* ctx, AVStream* st, const AVFrame* frame);
  void encode_audio_frame(const float* samples, int n);
};

void MediaWriter::State::open_video() {
  const std::string p = path.string();
  const AVCodec* codec = find_encoder(opts.video_codec);
  video.reset(avcodec_alloc_context3(codec));
  PCV_CHECK(video, "avcodec_alloc_context3: out of memory");
  video->width = opts.width, video->height = opts.height;
  video->time_base = AVRational{1, opts.fps};
  video->framerate = AVRational{opts.fps, 1};
  video->pix_fmt = pixel_format(opts.pixel_format);
  if (opts.gop > 0) video->gop_size = opts.gop;
  if (opts.deterministic) video->thread_count = 1, video->flags |= AV_CODEC_FLAG_BITEXACT;
  if (fmt->oformat->flags & AVFMT_GLOBALHEADER) video->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
  AVDictionary* d = nullptr;
  av_dict_set_int(&d, "crf", opts.crf, 0);
  av_dict_set(&d, "preset", opts.preset.c_str(), 0);  // libx264
  av_dict_set(&d, "deadline", "realtime", 0);         // libvpx: fast, for test clips
  av_dict_set(&d, "cpu-used", "8", 0);
  // libx264's AVX-512 macroblock-tree code reads memory it never wrote, so with mbtree on the
  // same frames can encode to different bytes (tests/data/test_synthetic.cpp shows it).
  if (opts.deterministic) av_dict_set(&d, "mbtree", "0", 0);
  if (opts.video_codec.find("vpx") != std::string::npos) video->bit_rate = 0;  // constant quality
  const int ret = avcodec_open2(video.get(), codec, &d);
  av_dict_free(&d);
  PCV_AV_CHECK(ret, p);
  video_stream = avformat_new_stream(fmt.get(), nullptr);
  PCV_CHECK(video_stream, "avformat_new_stream: out of memory");
  video_stream->time_base = video->time_base;
  PCV_AV_CHECK(avcodec_parameters_from_context(video_stream->codecpar, video.get()), p);
  sws.reset(sws_getContext(opts.width, opts.height, AV_PIX_FMT_RGB24, opts.width, opts.height,
                           video->pix_fmt, SWS_BICUBIC, nullptr, nullptr, nullptr));
  PCV_CHECK(sws, "sws_getContext: cannot convert rgb24 to ", opts.pixel_format);
  rgb_frame = make_frame();
  rgb_frame->format = AV_PIX_FMT_RGB24;
  rgb_frame->width = opts.width, rgb_frame->height = opts.height;
  PCV_AV_CHECK(av_frame_get_buffer(rgb_frame.get(), 0), p);
  video_frame = make_frame();
  video_frame->format = video->pix_fmt;
  video_frame->width = opts.width, video_frame->height = opts.height;
  PCV_AV_CHECK(av_frame_get_buffer(video_frame.get(), 0), p);
}

void MediaWriter::State::open_audio() {
  const std::string p = path.string();
  const AVCodec* codec = find_encoder(opts.audio_codec);
  audio.reset(avcodec_alloc_context3(codec));
  PCV_CHECK(audio, "avcodec_alloc_context3: out of memory");
  av_channel_layout_default(&audio->ch_layout, opts.audio_channels);
  audio->sample_rate = opts.sample_rate;
  audio->sample_fmt = audio_format(codec);
  audio->bit_rate = opts.audio_bitrate;
  audio->time_base = AVRational{1, opts.sample_rate};
  if (opts.deterministic) audio->thread_count = 1, audio->flags |= AV_CODEC_FLAG_BITEXACT;
  if (fmt->oformat->flags & AVFMT_GLOBALHEADER) audio->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
  PCV_AV_CHECK(avcodec_open2(audio.get(), codec, nullptr), p);
  // PCM encoders take any frame size (frame_size 0); others need exactly frame_size samples.
  audio_frame_size = audio->frame_size > 0 ? audio->frame_size : 1024;
  audio_stream = avformat_new_stream(fmt.get(), nullptr);
  PCV_CHECK(audio_stream, "avformat_new_stream: out of memory");
  audio_stream->time_base = audio->time_base;
  PCV_AV_CHECK(avcodec_parameters_from_context(audio_stream->codecpar, audio.get()), p);
  SwrContext* raw = nullptr;
  PCV_AV_CHECK(swr_alloc_set_opts2(&raw, &audio->ch_layout, audio->sample_fmt, opts.sample_rate,
                                   &audio->ch_layout, AV_SAMPLE_FMT_FLT, opts.sample_rate, 0, nullptr),
               p);
  swr.reset(raw);
  PCV_AV_CHECK(swr_init(swr.get()), p);
  audio_frame = make_frame();
}

// Sends one frame (nullptr drains) and writes every packet the encoder returns.
void MediaWriter::State::encode(AVCodecContext* ctx, AVStream* st, const AVFrame* frame) {
  const std::string p = path.string();
  PCV_AV_CHECK(avcodec_send_frame(ctx, frame), p);
  for (;;) {
    const int ret = avcodec_receive_packet(ctx, packet.get());
    if (ret == AVERROR(EAGAIN) || ret == AVERROR_EOF) return;
    PCV_AV_CHECK(ret, p);
    // libx264 leaves durations at 0; the mp4 muxer then drops the last frame from the edit list.
    if (packet->duration == 0 && ctx->codec_type == AVMEDIA_TYPE_VIDEO) packet->duration = 1;
    av_packet_rescale_ts(packet.get(), ctx->time_base, st->time_base);
    packet->stream_index = st->index;
    PCV_AV_CHECK(av_interleaved_write_frame(fmt.get(), packet.get()), p);  // unrefs the packet
  }
}

void MediaWriter::State::encode_audio_frame(const float* samples, int n) {
  AVFrame* f = audio_frame.get();
  av_frame_unref(f);
  f->format = audio->sample_fmt;
  f->sample_rate = audio->sample_rate;
  f->nb_samples = n;
  PCV_AV_CHECK(av_channel_layout_copy(&f->ch_layout, &audio->ch_layout), path.string());
  PCV_AV_CHECK(av_frame_get_buffer(f, 0), path.string());
  const auto* in = reinterpret_cast<const uint8_t*>(samples);
  PCV_AV_CHECK(swr_convert(swr.get(), f->extended_data, n, &in, n), path.string());
  f->pts = samples_written;
  samples_written += n;
  encode(audio.get(), audio_stream, f);
}

MediaWriter MediaWriter::create(const std::filesystem::path& path, const MediaWriterOptions& opts) {
  PCV_CHECK(opts.width > 0 && opts.height > 0 && opts.fps > 0, "MediaWriterOptions: bad size or fps");
  PCV_CHECK(opts.audio_channels >= 0 && opts.audio_channels <= 8, "MediaWriterOptions: bad audio_channels");
  auto s = std::make_unique<State>();
  s->path = path;
  s->opts = opts;
  const std::string p = path.string();
  AVFormatContext* raw = nullptr;
  begin_av_log_capture();
  PCV_AV_CHECK(avformat_alloc_output_context2(&raw, nullptr, nullptr, p.c_str()), p);
  s->fmt.reset(raw);
  if (opts.deterministic) s->fmt->flags |= AVFMT_FLAG_BITEXACT;
  s->packet = make_packet();
  s->open_video();
  if (opts.audio_channels > 0) s->open_audio();
  if (!(s->fmt->oformat->flags & AVFMT_NOFILE))
    PCV_AV_CHECK(avio_open(&s->fmt->pb, p.c_str(), AVIO_FLAG_WRITE), p);
  PCV_AV_CHECK(avformat_write_header(s->fmt.get(), nullptr), p);
  return MediaWriter(std::move(s));
}

MediaWriter::MediaWriter(std::unique_ptr<State> s) : s_(std::move(s)) {}
MediaWriter::MediaWriter(MediaWriter&&) noexcept = default;
MediaWriter& MediaWriter::operator=(MediaWriter&&) noexcept = default;
MediaWriter::~MediaWriter() = default;

void MediaWriter::write_frame(const uint8_t* rgb) {
  PCV_CHECK(!s_->finished, "write_frame after finish() on '", s_->path.string(), "'");
  AVFrame* f = s_->video_frame.get();
  // The encoder may still reference the previous frame's buffers.
  PCV_AV_CHECK(av_frame_make_writable(f), s_->path.string());
  // swscale's SIMD loads read up to 16 bytes past the end of a row; reading them from the
  // caller's tightly packed buffer would be out of bounds and make the output depend on
  // whatever follows it. The padded copy keeps output a function of the input alone.
  AVFrame* in = s_->rgb_frame.get();
  const size_t row = size_t(s_->opts.width) * 3;
  for (int y = 0; y < s_->opts.height; ++y) std::memcpy(in->data[0] + ptrdiff_t(y) * in->linesize[0], rgb + y * row, row);
  sws_scale(s_->sws.get(), in->data, in->linesize, 0, s_->opts.height, f->data, f->linesize);
  f->pts = s_->frames_written++;
  s_->encode(s_->video.get(), s_->video_stream, f);
}

void MediaWriter::write_audio(const float* samples, int64_t frames) {
  PCV_CHECK(!s_->finished, "write_audio after finish() on '", s_->path.string(), "'");
  PCV_CHECK(s_->audio, "write_audio on '", s_->path.string(), "', which has no audio track");
  const int c = s_->opts.audio_channels, n = s_->audio_frame_size;
  s_->pending.insert(s_->pending.end(), samples, samples + frames * c);
  size_t used = 0;
  while (s_->pending.size() - used >= size_t(n) * c) {
    s_->encode_audio_frame(s_->pending.data() + used, n);
    used += size_t(n) * c;
  }
  s_->pending.erase(s_->pending.begin(), s_->pending.begin() + std::ptrdiff_t(used));
}

void MediaWriter::finish() {
  State& s = *s_;
  PCV_CHECK(!s.finished, "finish() called twice on '", s.path.string(), "'");
  if (s.audio && !s.pending.empty()) {
    // A short last frame where the encoder allows it; otherwise pad with silence.
    const int c = s.opts.audio_channels;
    int n = int(s.pending.size() / size_t(c));
    const auto caps = s.audio->codec->capabilities;
    if (!(caps & (AV_CODEC_CAP_SMALL_LAST_FRAME | AV_CODEC_CAP_VARIABLE_FRAME_SIZE))) {
      s.pending.resize(size_t(s.audio_frame_size) * c, 0.0f);
      n = s.audio_frame_size;
    }
    s.encode_audio_frame(s.pending.data(), n);
    s.pending.clear();
  }
  s.encode(s.video.get(), s.video_stream, nullptr);
  if (s.audio) s.encode(s.audio.get(), s.audio_stream, nullptr);
  PCV_AV_CHECK(av_write_trailer(s.fmt.get()), s.path.string());
  if (!(s.fmt->oformat->flags & AVFMT_NOFILE)) PCV_AV_CHECK(avio_closep(&s.fmt->pb), s.path.string());
  s.finished = true;
}

void write_png(const std::filesystem::path& path, const uint8_t* rgb, int width, int height) {
  const std::string p = path.string();
  PCV_CHECK(width > 0 && height > 0, "write_png: bad size ", width, "x", height);
  const AVCodec* codec = avcodec_find_encoder(AV_CODEC_ID_PNG);
  PCV_CHECK(codec, "FFmpeg has no PNG encoder");
  CodecContextPtr ctx(avcodec_alloc_context3(codec));
  PCV_CHECK(ctx, "avcodec_alloc_context3: out of memory");
  ctx->width = width, ctx->height = height;
  ctx->pix_fmt = AV_PIX_FMT_RGB24;
  ctx->time_base = AVRational{1, 1};
  ctx->flags |= AV_CODEC_FLAG_BITEXACT;
  PCV_AV_CHECK(avcodec_open2(ctx.get(), codec, nullptr), p);
  FramePtr frame = make_frame();
  frame->format = AV_PIX_FMT_RGB24;
  frame->width = width, frame->height = height;
  PCV_AV_CHECK(av_frame_get_buffer(frame.get(), 0), p);
  for (int y = 0; y < height; ++y)
    std::memcpy(frame->data[0] + ptrdiff_t(y) * frame->linesize[0], rgb + size_t(y) * width * 3, size_t(width) * 3);
  PCV_AV_CHECK(avcodec_send_frame(ctx.get(), frame.get()), p);
  PCV_AV_CHECK(avcodec_send_frame(ctx.get(), nullptr), p);
  PacketPtr pkt = make_packet();
  PCV_AV_CHECK(avcodec_receive_packet(ctx.get(), pkt.get()), p);
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(pkt->data), pkt->size);
  PCV_CHECK(out.good(), "cannot write '", p, "'");
}

}  // namespace perceiver
