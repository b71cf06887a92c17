// Normal(0, std²) test inputs from the project's own Philox stream (core/rng.h), shared by the
// backend suites so that each draws its inputs the same way.
#pragma once

#include <cstdint>
#include <vector>

#include "core/rng.h"

namespace perceiver {

inline std::vector<float> random_vec(int64_t n, uint64_t seed, float std = 1.0f) {
  RngStream rng(seed, RngPurpose::kTest);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = float(std * rng.normal());
  return v;
}

}  // namespace perceiver
