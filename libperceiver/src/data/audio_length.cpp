// Windowed-sinc resampling of one clip's audio to another length. Output k sits at input time
// t_k = k·n/out_n; the fraction of t_k takes p = out_n / gcd(n, out_n) values, so the filter of
// each phase is computed once (when the table stays small) and reused.
#include "data/audio_length.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <numeric>

#include "perceiver/error.h"

namespace perceiver::detail {
namespace {

constexpr double kBeta = 9.0;        // Kaiser window shape
constexpr double kZeroCrossings = 16; // each side of the centre
constexpr double kCutoff = 0.97;     // of the lower Nyquist frequency
constexpr int64_t kMaxTableTaps = int64_t(1) << 22;  // 32 MiB of doubles

// Modified Bessel function of the first kind, order 0 (power series; converges fast for x ≤ 9).
double bessel_i0(double x) {
  double sum = 1, term = 1;
  const double q = x * x / 4;
  for (int k = 1; k < 64; ++k) {
    term *= q / (double(k) * double(k));
    sum += term;
    if (term < sum * 1e-17) break;
  }
  return sum;
}

struct Filter {
  double fc2;    // 2·cutoff in cycles per input sample: sinc zero crossings every 1/fc2 samples
  double half;   // half-width in input samples
  int64_t lo, taps;  // taps at input offsets m = lo .. lo + taps - 1 from floor(t)
  double i0_beta;

  Filter(int64_t n, int64_t out_n) {
    fc2 = kCutoff * std::min(1.0, double(out_n) / double(n));
    half = kZeroCrossings / fc2;
    const int64_t reach = int64_t(std::ceil(half));
    lo = -reach;
    taps = 2 * reach + 2;
    i0_beta = bessel_i0(kBeta);
  }

  // Taps for an output at fraction `frac` in [0, 1) past an input sample, normalised to sum 1.
  void weights(double frac, double* w) const {
    double sum = 0;
    for (int64_t j = 0; j < taps; ++j) {
      const double d = frac - double(lo + j);  // t - i
      double v = 0;
      if (std::abs(d) < half) {
        const double x = d / half;
        const double a = std::numbers::pi * fc2 * d;
        const double sinc = a == 0 ? 1.0 : std::sin(a) / a;
        v = fc2 * sinc * bessel_i0(kBeta * std::sqrt(std::max(0.0, 1 - x * x))) / i0_beta;
      }
      w[j] = v;
      sum += v;
    }
    for (int64_t j = 0; j < taps; ++j) w[j] /= sum;
  }
};

}  // namespace

std::vector<float> resample_to_length(const float* in, int64_t n, int64_t out_n) {
  PCV_CHECK(n > 0 && out_n > 0 && n <= INT32_MAX && out_n <= INT32_MAX, "resample_to_length: ", n, " -> ", out_n,
            " samples");
  if (n == out_n) return std::vector<float>(in, in + n);
  const Filter f(n, out_n);
  const int64_t g = std::gcd(n, out_n), phases = out_n / g;
  const bool table = phases * f.taps <= kMaxTableTaps;
  std::vector<double> w(size_t(table ? phases * f.taps : f.taps));
  std::vector<char> ready(size_t(table ? phases : 0), 0);
  std::vector<float> out(static_cast<size_t>(out_n));
  for (int64_t k = 0; k < out_n; ++k) {
    const int64_t pos = k * n;  // t_k·out_n: base sample pos / out_n, phase (pos % out_n) / g
    const int64_t base = pos / out_n, phase = (pos % out_n) / g;
    const double frac = double(phase) / double(phases);
    const double* taps = w.data();
    if (table) {
      taps = w.data() + phase * f.taps;
      if (!ready[size_t(phase)]) f.weights(frac, w.data() + phase * f.taps), ready[size_t(phase)] = 1;
    } else {
      f.weights(frac, w.data());
    }
    const int64_t first = base + f.lo;
    const int64_t j0 = std::max<int64_t>(0, -first), j1 = std::min<int64_t>(f.taps, n - first);
    double acc = 0;
    for (int64_t j = j0; j < j1; ++j) acc += taps[j] * double(in[first + j]);
    out[size_t(k)] = float(acc);
  }
  return out;
}

}  // namespace perceiver::detail
