// float <-> bfloat16 bits. `static` on purpose: the per-level vector kernels (cpu_isa_*.cpp)
// include this too, and an inline function with external linkage would be one symbol that the
// linker could take from the AVX-512 object for every level (tests/backend/check_isa_symbols).
#pragma once

#include <cstdint>
#include <cstring>

namespace perceiver::cpu {

/// Round to nearest even (NaN stays NaN, quiet), as oneDNN and PyTorch do.
static inline uint16_t to_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  return uint16_t((u & 0x7fffffffu) > 0x7f800000u ? (u >> 16) | 0x40u : rounded);
}

static inline float from_bf16(uint16_t x) {
  const uint32_t u = uint32_t(x) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace perceiver::cpu
