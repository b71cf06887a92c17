#include "core/rng.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <set>

#include "perceiver/error.h"

namespace perceiver {
namespace {

constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;

inline void mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  uint64_t p = uint64_t(a) * b;
  hi = uint32_t(p >> 32);
  lo = uint32_t(p);
}

}  // namespace

std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    mulhilo(kMul0, c[0], hi0, lo0);
    mulhilo(kMul1, c[2], hi1, lo1);
    c = {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
    k[0] += kWeyl0;
    k[1] += kWeyl1;
  }
  return c;
}

uint32_t hash32(std::string_view s) {
  uint32_t h = 2166136261u;
  for (unsigned char ch : s) h = (h ^ ch) * 16777619u;
  return h;
}

// Counter words: [0] block index, [1] step low, [2] substream (rank or example, all 32 bits),
// [3] purpose (low 16 bits) and step bits 32..47 (high 16 bits).
RngStream::RngStream(uint64_t seed, RngPurpose purpose, uint64_t step, uint32_t substream)
    : key_{uint32_t(seed), uint32_t(seed >> 32)},
      counter_{0u, uint32_t(step), substream, (uint32_t(purpose) & 0xffffu) | (uint32_t(step >> 32) << 16)} {}

uint32_t RngStream::next_u32() {
  if (used_ == 4) {
    block_ = philox4x32_10(counter_, key_);
    PCV_CHECK(++counter_[0] != 0, "random stream exhausted (2^34 draws)");
    used_ = 0;
  }
  return block_[used_++];
}

uint64_t RngStream::next_u64() {
  uint64_t hi = next_u32();
  return (hi << 32) | next_u32();
}

double RngStream::uniform() { return double(next_u64() >> 11) * 0x1.0p-53; }

uint64_t RngStream::below(uint64_t n) {
  PCV_ASSERT(n > 0);
  // Lemire-style rejection: discard the top partial range so every value is equally likely.
  uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t x;
  do x = next_u64();
  while (x >= limit);
  return x % n;
}

double RngStream::normal() {
  double u1 = uniform(), u2 = uniform();
  if (u1 < 1e-300) u1 = 1e-300;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

double RngStream::truncated_normal(double bound) {
  for (;;) {
    double x = normal();
    if (std::abs(x) <= bound) return x;
  }
}

std::vector<int64_t> RngStream::sample_without_replacement(int64_t n, int64_t k) {
  PCV_CHECK(k >= 0 && k <= n, "cannot draw ", k, " distinct values from ", n);
  std::set<int64_t> chosen;
  for (int64_t j = n - k; j < n; ++j) {
    int64_t t = int64_t(below(uint64_t(j) + 1));
    chosen.insert(chosen.count(t) ? j : t);
  }
  return {chosen.begin(), chosen.end()};
}

std::vector<int64_t> RngStream::permutation(int64_t n) {
  std::vector<int64_t> p(n);
  for (int64_t i = 0; i < n; ++i) p[i] = i;
  for (int64_t i = n - 1; i > 0; --i) std::swap(p[i], p[below(uint64_t(i) + 1)]);
  return p;
}

}  // namespace perceiver
