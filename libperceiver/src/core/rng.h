// Counter-based random numbers (Philox4x32-10, Salmon et al., SC'11).
// A stream is a pure function of (seed, purpose, step, substream) and a position, so any step
// can be replayed after a resume without saving generator state; the substream (a rank, or a
// global example index) keeps ranks and examples from sharing draws (DESIGN.md #7).
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

namespace perceiver {

/// What a stream is used for; part of its key so that purposes never overlap.
enum class RngPurpose : uint32_t {
  kInit = 1,       // parameter initialisation (step = hash of the parameter name)
  kMask = 2,       // multimodal input masking
  kSubsample = 3,  // decoder output points
  kShuffle = 4,    // data sampler (step = epoch)
  kDropout = 5,
  kAugment = 6,    // data augmentation (crop, flip)
  kTest = 100,     // tests and benchmarks
};

/// One Philox4x32-10 block: 4 random words from a 128-bit counter and a 64-bit key.
std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);

/// FNV-1a, used to turn names into stream keys.
uint32_t hash32(std::string_view s);

class RngStream {
 public:
  RngStream(uint64_t seed, RngPurpose purpose, uint64_t step = 0, uint32_t substream = 0);

  uint32_t next_u32();
  uint64_t next_u64();
  /// Uniform in [0, 1) with 53 random bits.
  double uniform();
  /// Uniform integer in [0, n), without modulo bias.
  uint64_t below(uint64_t n);
  /// Standard normal (Box-Muller on two uniforms; one value per call for simplicity).
  double normal();
  /// Standard normal truncated to [-bound, bound] by rejection.
  double truncated_normal(double bound = 2.0);
  bool bernoulli(double p) { return uniform() < p; }

  /// k distinct integers from [0, n), sorted ascending (Floyd's algorithm; O(k log k)).
  std::vector<int64_t> sample_without_replacement(int64_t n, int64_t k);
  /// A uniformly random permutation of [0, n) (Fisher-Yates).
  std::vector<int64_t> permutation(int64_t n);

 private:
  std::array<uint32_t, 2> key_;
  std::array<uint32_t, 4> counter_;
  std::array<uint32_t, 4> block_{};
  int used_ = 4;  // words of block_ already handed out
};

}  // namespace perceiver
