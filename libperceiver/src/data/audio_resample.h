// Audio -> mono float at a fixed rate (libswresample). Used by the video reader and for the
// libsndfile side files, so both paths downmix and resample identically.
#pragma once

#include <cstdint>
#include <vector>

#include "data/ffmpeg_ptr.h"

namespace perceiver::detail {

/// Downmixes to mono as the mean of all channels (so a full-scale stereo signal stays within
/// [-1, 1]) and resamples to out_rate float. Output sample k is the signal at time k / out_rate
/// after the first input sample: swresample compensates its filter delay, and flush() returns
/// the samples it still holds.
class MonoResampler {
 public:
  MonoResampler(const AVChannelLayout& in_layout, AVSampleFormat in_format, int in_rate, int out_rate);
  ~MonoResampler() { av_channel_layout_uninit(&in_layout_); }
  MonoResampler(const MonoResampler&) = delete;
  MonoResampler& operator=(const MonoResampler&) = delete;

  /// True when frames of this layout, format and rate can be pushed without reconfiguring.
  bool accepts(const AVFrame& frame) const;
  /// Appends the converted samples of `frame` to `out`.
  void push(const AVFrame& frame, std::vector<float>& out);
  /// Appends the converted samples of n interleaved input frames (input in in_format, packed).
  void push(const uint8_t* const* data, int n, std::vector<float>& out);
  /// Appends what the resampler still holds; call once at the end of the input.
  void flush(std::vector<float>& out);

 private:
  SwrPtr swr_;
  AVChannelLayout in_layout_{};
  AVSampleFormat in_format_;
  int in_rate_, out_rate_;
};

/// Mono float resampling of a whole buffer (for side files and tests).
std::vector<float> resample_mono(const float* in, int64_t n, int in_rate, int out_rate);

/// The same span of time in out_n samples instead of n (a clip's 48 kHz audio for a model with
/// another number of samples per frame): resample_mono at the rates n : out_n, cut or padded
/// with zeros to exactly out_n. Depends on the input only.
std::vector<float> resample_to_length(const float* in, int64_t n, int64_t out_n);

}  // namespace perceiver::detail
