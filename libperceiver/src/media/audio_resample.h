// Audio -> mono float at a fixed rate (libswresample). Used by the video reader and for the
// libsndfile side files, so both paths downmix and resample identically. (The loader's
// adaptation of a clip's audio to the model's length is the core's: data/audio_length.h.)
#pragma once

#include <cstdint>
#include <vector>

#include "media/ffmpeg_ptr.h"

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

}  // namespace perceiver::detail
