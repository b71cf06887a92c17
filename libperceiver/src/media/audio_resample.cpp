// Mean-of-channels downmix and resampling with libswresample.
#include "media/audio_resample.h"

#include <algorithm>

#include "perceiver/error.h"

extern "C" {
#include <libavutil/channel_layout.h>
#include <libavutil/opt.h>
}

namespace perceiver::detail {
namespace {

constexpr int kMaxChannels = 64;

// Streams that only give a channel count get FFmpeg's default layout for that count.
AVChannelLayout usable_layout(const AVChannelLayout& in) {
  AVChannelLayout l{};
  if (in.order == AV_CHANNEL_ORDER_UNSPEC || in.nb_channels == 0)
    av_channel_layout_default(&l, std::max(1, in.nb_channels));
  else
    PCV_AV_CHECK(av_channel_layout_copy(&l, &in), "audio stream");
  return l;
}

}  // namespace

MonoResampler::MonoResampler(const AVChannelLayout& in_layout, AVSampleFormat in_format,
                             int in_rate, int out_rate)
    : in_format_(in_format), in_rate_(in_rate), out_rate_(out_rate) {
  PCV_CHECK(in_layout.nb_channels >= 1 && in_layout.nb_channels <= kMaxChannels,
            "audio has ", in_layout.nb_channels, " channels (supported: 1..", kMaxChannels, ")");
  PCV_CHECK(in_rate > 0 && in_rate <= 768000, "audio sample rate ", in_rate, " is out of range");
  PCV_CHECK(in_format != AV_SAMPLE_FMT_NONE, "audio has no sample format");
  in_layout_ = usable_layout(in_layout);
  AVChannelLayout mono = AV_CHANNEL_LAYOUT_MONO;
  SwrContext* raw = nullptr;
  PCV_AV_CHECK(swr_alloc_set_opts2(&raw, &mono, AV_SAMPLE_FMT_FLT, out_rate, &in_layout_, in_format,
                                   in_rate, 0, nullptr),
               "audio stream");
  swr_.reset(raw);
  // swresample's default stereo->mono matrix is 0.707·(L+R), which can exceed 1; use the mean.
  const int c = in_layout_.nb_channels;
  std::vector<double> matrix(size_t(c), 1.0 / c);
  PCV_AV_CHECK(swr_set_matrix(swr_.get(), matrix.data(), c), "audio stream");
  PCV_AV_CHECK(swr_init(swr_.get()), "audio stream");
}

bool MonoResampler::accepts(const AVFrame& f) const {
  AVChannelLayout l = usable_layout(f.ch_layout);
  const bool same = av_channel_layout_compare(&l, &in_layout_) == 0 && f.format == in_format_ &&
                    f.sample_rate == in_rate_;
  av_channel_layout_uninit(&l);
  return same;
}

void MonoResampler::push(const AVFrame& frame, std::vector<float>& out) {
  push(const_cast<const uint8_t* const*>(frame.extended_data), frame.nb_samples, out);
}

void MonoResampler::push(const uint8_t* const* data, int n, std::vector<float>& out) {
  const int capacity = swr_get_out_samples(swr_.get(), n);
  PCV_CHECK(capacity >= 0, "swr_get_out_samples failed");
  const size_t old = out.size();
  out.resize(old + size_t(capacity));
  uint8_t* dst = reinterpret_cast<uint8_t*>(out.data() + old);
  const int got = PCV_AV_CHECK(swr_convert(swr_.get(), &dst, capacity, const_cast<const uint8_t**>(data), n), "audio stream");
  out.resize(old + size_t(got));
}

void MonoResampler::flush(std::vector<float>& out) {
  for (;;) {
    const int capacity = std::max(swr_get_out_samples(swr_.get(), 0), 256);
    const size_t old = out.size();
    out.resize(old + size_t(capacity));
    uint8_t* dst = reinterpret_cast<uint8_t*>(out.data() + old);
    const int got = PCV_AV_CHECK(swr_convert(swr_.get(), &dst, capacity, nullptr, 0), "audio stream");
    out.resize(old + size_t(got));
    if (got == 0) return;
  }
}

std::vector<float> resample_mono(const float* in, int64_t n, int in_rate, int out_rate) {
  if (in_rate == out_rate) return std::vector<float>(in, in + n);
  AVChannelLayout mono = AV_CHANNEL_LAYOUT_MONO;
  MonoResampler r(mono, AV_SAMPLE_FMT_FLT, in_rate, out_rate);
  std::vector<float> out;
  out.reserve(size_t(double(n) * out_rate / in_rate) + 64);
  constexpr int64_t kChunk = 1 << 16;
  for (int64_t i = 0; i < n; i += kChunk) {
    const auto* p = reinterpret_cast<const uint8_t*>(in + i);
    r.push(&p, int(std::min(kChunk, n - i)), out);
  }
  r.flush(out);
  return out;
}

}  // namespace perceiver::detail
