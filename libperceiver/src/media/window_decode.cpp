// Decoding one window of a clip: seek to the keyframe at or before the first output time, decode
// forward (send/receive until EAGAIN, drain with a null packet at EOF, flush after each seek), pick
// source frames by timestamp and collect the audio of the same span.
//
// Frame selection (frame-rate resampling by timestamps): output frame i is at
//   t_i = start_s + i·stride/fps
// and shows the last source frame with pts <= t_i, i.e. the frame on screen at t_i. Times are
// compared as integers in the stream time base, so a 25 fps source read at 25 fps maps frame to
// frame exactly. Output times past the end of the last frame repeat it and are counted as padding.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

#include "media/audio_resample.h"
#include "media/reader_state.h"
#include "perceiver/error.h"

namespace perceiver::detail {
namespace {

constexpr int kMaxFrames = 100000;

double seconds(int64_t ts, AVRational tb) { return double(ts) * av_q2d(tb); }

void check_spec(const WindowSpec& w) {
  PCV_CHECK(w.num_frames >= 1 && w.num_frames <= kMaxFrames, "WindowSpec::num_frames must be in [1, ",
            kMaxFrames, "], got ", w.num_frames);
  PCV_CHECK(std::isfinite(w.fps) && w.fps > 0 && w.fps <= 1000, "WindowSpec::fps must be in (0, 1000], got ", w.fps);
  PCV_CHECK(w.stride >= 1, "WindowSpec::stride must be >= 1, got ", w.stride);
  PCV_CHECK(w.image_dim >= 0 && w.image_dim <= 8192, "WindowSpec::image_dim must be in [0, 8192], got ",
            w.image_dim);
  PCV_CHECK(std::isfinite(w.start_s) && w.start_s >= 0, "WindowSpec::start_s must be >= 0, got ", w.start_s);
  PCV_CHECK(!w.audio || (w.sample_rate >= 1000 && w.sample_rate <= 384000),
            "WindowSpec::sample_rate must be in [1000, 384000], got ", w.sample_rate);
}

// Picks, for each output time, the last decoded frame at or before it (see the file comment),
// and writes it to the clip as RGB.
class FrameSelector {
 public:
  FrameSelector(const ReaderState& s, std::vector<int64_t> targets, FrameConverter& conv, Clip& clip)
      : s_(s), targets_(std::move(targets)), conv_(conv), clip_(clip), held_(make_frame()) {
    const AVRational tb = s.fmt->streams[s.video_index]->time_base;
    frame_dur_ = std::max<int64_t>(1, std::llround(1.0 / (s.info.fps * av_q2d(tb))));
    frame_bytes_ = size_t(clip.height) * clip.width * 3;
  }

  bool done() const { return next_ == int(targets_.size()); }
  /// The first decoded frame came after the first output time: the seek landed too late.
  bool overshoot() const { return overshoot_; }

  void push(AVFrame& f) {
    check_frame(f);
    const int64_t pts = frame_pts(f);
    if (!has_held_) {
      // Output times before the first frame (a seek that overshot, or a stream whose first pts
      // is after 0) show that first frame.
      overshoot_ = pts > targets_[0];
      hold(f, pts);
      while (!done() && targets_[next_] < pts) emit(next_++, false);
      return;
    }
    while (!done() && targets_[next_] < pts) emit(next_++, false);
    hold(f, pts);
  }

  /// At end of stream: the last frame covers times up to its end; later times are padding.
  void finish() {
    PCV_CHECK(has_held_, "'", s_.path.string(), "': no video frame could be decoded");
    while (!done()) {
      const bool past_end = targets_[next_] >= held_pts_ + frame_dur_;
      emit(next_++, past_end);
    }
    PCV_CHECK(clip_.padded_frames < clip_.num_frames, "'", s_.path.string(), "': the window starts at ",
              seconds(targets_[0] - s_.origin, time_base()), " s, after the last frame (",
              seconds(held_pts_ - s_.origin, time_base()), " s)");
  }

 private:
  AVRational time_base() const { return s_.fmt->streams[s_.video_index]->time_base; }

  int64_t frame_pts(const AVFrame& f) {
    int64_t pts = f.best_effort_timestamp;
    if (pts == AV_NOPTS_VALUE) pts = has_held_ ? held_pts_ + frame_dur_ : s_.origin;
    return pts;
  }

  void check_frame(const AVFrame& f) const {
    const std::string& path = s_.path.string();
    PCV_CHECK(f.width <= s_.opts.max_width && f.height <= s_.opts.max_height, "'", path,
              "': a frame is ", f.width, "x", f.height, ", over the limit of ", s_.opts.max_width, "x",
              s_.opts.max_height);
    PCV_CHECK(conv_.image_dim() > 0 || (f.width == clip_.width && f.height == clip_.height), "'", path,
              "': the frame size changed mid-stream (", f.width, "x", f.height, "), which needs image_dim > 0");
    PCV_CHECK(!s_.opts.reject_corrupt || (!(f.flags & AV_FRAME_FLAG_CORRUPT) && f.decode_error_flags == 0),
              "'", path, "': the decoder flagged the frame at ",
              seconds(f.best_effort_timestamp - s_.origin, time_base()), " s as corrupt");
  }

  void hold(AVFrame& f, int64_t pts) {
    av_frame_unref(held_.get());
    av_frame_move_ref(held_.get(), &f);
    held_pts_ = pts;
    held_out_ = -1;
    has_held_ = true;
  }

  // A source frame used for several output times (upsampling, padding) is converted once.
  void emit(int i, bool padding) {
    uint8_t* dst = clip_.video.data() + size_t(i) * frame_bytes_;
    if (held_out_ >= 0)
      std::memcpy(dst, clip_.video.data() + size_t(held_out_) * frame_bytes_, frame_bytes_);
    else
      conv_.convert(*held_, dst), held_out_ = i;
    clip_.frame_times[size_t(i)] = seconds(held_pts_ - s_.origin, time_base());
    clip_.padded_frames += padding ? 1 : 0;
  }

  const ReaderState& s_;
  std::vector<int64_t> targets_;  // [T] output times in the video time base
  FrameConverter& conv_;
  Clip& clip_;
  FramePtr held_;                 // the latest decoded frame not yet passed by the output times
  int64_t held_pts_ = 0, frame_dur_ = 1;
  int held_out_ = -1;             // output index held_ was converted into, -1 if not yet
  bool has_held_ = false, overshoot_ = false;
  int next_ = 0;                  // first output time without a frame
  size_t frame_bytes_ = 0;
};

// Collects mono audio at the output rate from the first decoded audio frame on, and cuts the
// window [start_s, start_s + n / rate) out of it. The decoded stream is taken as continuous from
// its first frame's pts (gaps in the timestamps are not filled). Only the window's samples are
// kept: what comes before it is dropped as it arrives, so a window far after the first decoded
// audio (a sparse keyframe index, or crafted timestamps) costs decode time, bounded by the
// timeout, but never memory beyond the window plus one frame.
class AudioCollector {
 public:
  AudioCollector(const ReaderState& s, double start_s, int64_t n, int rate)
      : s_(s), start_s_(start_s), n_(n), rate_(rate) {}

  bool done() const { return started_ && base_ + int64_t(buf_.size()) >= std::max<int64_t>(0, offset_) + n_; }
  /// The decoded audio began too close to (or after) the window start for the decoder to have
  /// warmed up (MDCT overlap, Opus seek pre-roll): an earlier seek gives exact samples.
  bool late_start() const { return started_ && first_s_ > start_s_ - s_.audio_preroll_s + 1e-3; }

  void push(AVFrame& f) {
    PCV_CHECK(!s_.opts.reject_corrupt || f.decode_error_flags == 0, "'", s_.path.string(),
              "': the decoder flagged an audio frame as corrupt");
    if (!started_) start(f);
    if (!resampler_->accepts(f)) {  // the stream changed layout or rate: keep going continuously
      resampler_->flush(buf_);
      resampler_.emplace(f.ch_layout, AVSampleFormat(f.format), f.sample_rate, rate_);
    }
    resampler_->push(f, buf_);
    drop_before_window();
  }

  void finish(Clip& clip) {
    if (resampler_) resampler_->flush(buf_);
    drop_before_window();
    clip.audio.assign(size_t(n_), 0.0f);
    clip.padded_samples = 0;
    for (int64_t k = 0; k < n_; ++k) {
      const int64_t src = offset_ + k - base_;
      if (started_ && src >= 0 && src < int64_t(buf_.size()))
        clip.audio[size_t(k)] = buf_[size_t(src)];
      else
        ++clip.padded_samples;
    }
  }

 private:
  void start(const AVFrame& f) {
    const AVStream* ast = s_.fmt->streams[s_.audio_index];
    const AVStream* vst = s_.fmt->streams[s_.video_index];
    // pts, not best_effort_timestamp: only pts is moved past the samples the decoder skips
    // (encoder delay, e.g. Opus pre-skip), so it is the time of the first sample we get.
    const int64_t pts = f.pts != AV_NOPTS_VALUE ? f.pts : f.best_effort_timestamp;
    PCV_CHECK(pts != AV_NOPTS_VALUE, "'", s_.path.string(), "': audio without timestamps");
    first_s_ = seconds(pts, ast->time_base) - seconds(s_.origin, vst->time_base);
    // Clamped so that absurd timestamps cannot overflow the conversion (2^53 samples is far
    // beyond any file: the window is then simply never reached).
    constexpr double kLimit = 9007199254740992.0;
    offset_ = std::llround(std::clamp((start_s_ - first_s_) * rate_, -kLimit, kLimit));
    resampler_.emplace(f.ch_layout, AVSampleFormat(f.format), f.sample_rate, rate_);
    started_ = true;
  }

  // Forgets the samples before the window's first one.
  void drop_before_window() {
    const int64_t drop = std::min<int64_t>(std::max<int64_t>(0, offset_ - base_), int64_t(buf_.size()));
    if (drop == 0) return;
    buf_.erase(buf_.begin(), buf_.begin() + drop);
    base_ += drop;
  }

  const ReaderState& s_;
  double start_s_;
  int64_t n_;
  int rate_;
  bool started_ = false;
  double first_s_ = 0;        // time of the first decoded sample
  // Sample indices count from the first decoded sample.
  int64_t offset_ = 0;        // the window's first sample (< 0: the audio starts late)
  int64_t base_ = 0;          // buf_[0]
  std::vector<float> buf_;    // mono samples at rate_ from base_ on
  std::optional<MonoResampler> resampler_;
};

// Sends one packet (nullptr drains the decoder at EOF) and hands every frame to `sink` until the
// decoder wants more input or the sink returns false.
template <class Sink>
void decode_packet(ReaderState& s, AVCodecContext& dec, const AVPacket* pkt, Sink&& sink) {
  const char* kind = dec.codec_type == AVMEDIA_TYPE_VIDEO ? "video" : "audio";
  int ret = avcodec_send_packet(&dec, pkt);
  if (ret == AVERROR_EOF) return;  // already drained
  if (ret < 0 && ret != AVERROR(EAGAIN)) {
    if (!s.opts.reject_corrupt) return;  // skip the packet, keep decoding
    throw_av_error(__FILE__ ":" PCV_STRINGIFY(__LINE__), std::string("avcodec_send_packet (") + kind + ")",
                   ret, s.path.string());
  }
  AVFrame* f = s.frame.get();
  for (;;) {
    ret = avcodec_receive_frame(&dec, f);
    if (ret == AVERROR(EAGAIN) || ret == AVERROR_EOF) return;
    if (ret < 0) {
      if (!s.opts.reject_corrupt) return;
      throw_av_error(__FILE__ ":" PCV_STRINGIFY(__LINE__), std::string("avcodec_receive_frame (") + kind + ")",
                     ret, s.path.string());
    }
    const bool more = sink(*f);
    av_frame_unref(f);
    if (!more) return;
  }
}

void check_deadline(const ReaderState& s) {
  PCV_CHECK(!s.deadline->expired(), "decoding '", s.path.string(), "' timed out after ", s.opts.timeout_s,
            " s (ReaderOptions::timeout_s)");
}

// Frames more than a second before the window are only needed as references for later frames:
// the decoder skips the non-reference ones (AVDISCARD_NONREF), which saves a good part of the
// decode between a sparse keyframe and the window. The margin keeps the frame on screen at the
// window start (the last one at or before it) decoded even in variable-frame-rate video.
void set_skip(AVCodecContext& dec, const AVPacket& pkt, int64_t skip_before) {
  const bool early = pkt.pts != AV_NOPTS_VALUE && pkt.pts < skip_before;
  dec.skip_frame = early ? AVDISCARD_NONREF : AVDISCARD_DEFAULT;
}

void read_packets(ReaderState& s, FrameSelector& video, AudioCollector* audio, int64_t skip_before) {
  AVPacket* pkt = s.packet.get();
  auto video_sink = [&](AVFrame& f) { video.push(f); return !video.done(); };
  auto audio_sink = [&](AVFrame& f) { audio->push(f); return !audio->done(); };
  for (;;) {
    check_deadline(s);
    if (video.done() && (!audio || audio->done())) return;
    av_packet_unref(pkt);
    const int ret = av_read_frame(s.fmt.get(), pkt);
    if (ret == AVERROR_EOF) break;
    if (ret < 0) {
      check_deadline(s);
      throw_av_error(__FILE__ ":" PCV_STRINGIFY(__LINE__), "av_read_frame", ret, s.path.string());
    }
    if (pkt->stream_index == s.video_index && !video.done()) {
      set_skip(*s.video, *pkt, skip_before);
      decode_packet(s, *s.video, pkt, video_sink);
    }
    else if (audio && pkt->stream_index == s.audio_index && !audio->done())
      decode_packet(s, *s.audio, pkt, audio_sink);
  }
  av_packet_unref(pkt);
  s.video->skip_frame = AVDISCARD_DEFAULT;
  if (!video.done()) decode_packet(s, *s.video, nullptr, video_sink);
  if (audio && !audio->done()) decode_packet(s, *s.audio, nullptr, audio_sink);
}

// Seeks every stream to the keyframe at or before `pts` (video time base) and flushes the
// decoders, which also resets them after a drain.
void seek(ReaderState& s, int64_t pts) {
  begin_av_log_capture();
  PCV_AV_CHECK(av_seek_frame(s.fmt.get(), s.video_index, pts, AVSEEK_FLAG_BACKWARD), s.path.string());
  avcodec_flush_buffers(s.video.get());
  if (s.audio) avcodec_flush_buffers(s.audio.get());
}

FrameConverter& converter_for(ReaderState& s, const WindowSpec& spec) {
  if (!s.converter || s.converter->image_dim() != spec.image_dim || s.converter->filter() != spec.filter)
    s.converter = std::make_unique<FrameConverter>(spec.image_dim, spec.filter);
  return *s.converter;
}

Clip empty_clip(const ReaderState& s, const WindowSpec& spec, const FrameConverter& conv) {
  Clip clip;
  clip.num_frames = spec.num_frames;
  clip.height = conv.out_height(s.info.height);
  clip.width = conv.out_width(s.info.width);
  clip.video.resize(size_t(spec.num_frames) * clip.height * clip.width * 3);
  clip.frame_times.resize(size_t(spec.num_frames));
  return clip;
}

std::vector<int64_t> target_times(const ReaderState& s, const WindowSpec& spec) {
  const AVRational tb = s.fmt->streams[s.video_index]->time_base;
  std::vector<int64_t> t(size_t(spec.num_frames));
  for (int i = 0; i < spec.num_frames; ++i)
    t[size_t(i)] = s.origin + std::llround((spec.start_s + double(i) * spec.stride / spec.fps) / av_q2d(tb));
  return t;
}

}  // namespace

Clip decode_window(ReaderState& s, const WindowSpec& spec) {
  check_spec(spec);
  s.deadline->start(s.opts.timeout_s);
  FrameConverter& conv = converter_for(s, spec);
  const std::vector<int64_t> targets = target_times(s, spec);
  const int64_t n_audio = spec.audio ? window_audio_samples(spec.num_frames, spec.fps, spec.sample_rate) : 0;
  // Seek to the window start; if that lands after the window (a sparse or wrong index) or the
  // audio starts late (containers that seek by video keyframe position, like Matroska), seek
  // again a second earlier, and finally from the start of the stream.
  const int64_t one_second = std::llround(1.0 / av_q2d(s.fmt->streams[s.video_index]->time_base));
  const int64_t seeks[3] = {targets[0], targets[0] - one_second, s.origin};
  for (int attempt = 0;; ++attempt) {
    const int64_t seek_pts = std::max(seeks[attempt], s.origin);
    const bool last = seek_pts <= s.origin || attempt == 2;
    Clip clip = empty_clip(s, spec, conv);
    FrameSelector video(s, targets, conv, clip);
    std::optional<AudioCollector> audio;
    if (spec.audio && s.audio) audio.emplace(s, spec.start_s, n_audio, spec.sample_rate);
    seek(s, seek_pts);
    read_packets(s, video, audio ? &*audio : nullptr, targets[0] - one_second);
    if (!last && (video.overshoot() || (audio && audio->late_start()))) continue;
    video.finish();
    if (audio) {
      audio->finish(clip);
    } else if (spec.audio) {
      clip.audio.assign(size_t(n_audio), 0.0f);
      clip.padded_samples = n_audio;
    }
    return clip;
  }
}

}  // namespace perceiver::detail
