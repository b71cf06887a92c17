// A clip's audio in the model's number of samples (the loader's audio adaptation). Plain C++ in
// the core, so that a build without media (PERCEIVER_WITH_MEDIA=OFF) gives every clip exactly
// the input a build with media gives it.
#pragma once

#include <cstdint>
#include <vector>

namespace perceiver::detail {

/// The same span of time in out_n samples instead of n (a clip's 48 kHz audio for a model with
/// another number of samples per frame). Band-limited interpolation: output sample k is the
/// input at time k·n/out_n (in input samples) through a Kaiser-windowed sinc (β = 9, 16 zero
/// crossings each side) whose cutoff is 0.97 of the lower of the two Nyquist frequencies, with
/// its taps normalised to unit DC gain; samples outside the input count as zeros. n == out_n
/// copies. Computed in double; depends on the input only.
std::vector<float> resample_to_length(const float* in, int64_t n, int64_t out_n);

}  // namespace perceiver::detail
