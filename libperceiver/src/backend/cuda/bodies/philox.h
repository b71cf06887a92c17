// Philox4x32-10 (Salmon et al., SC'11) for device code, and the attention-dropout keep factor.
// The same function as core/rng.h's philox4x32_10 (test_cuda_bodies checks it word for word),
// written with scalars so the four words stay in registers.
#pragma once

#include "backend/cuda/bodies/hd.h"

namespace perceiver::cuda::body {

struct Philox4 {
  uint32_t w0, w1, w2, w3;
  /// Word i (0..3) without indexing an array (which would live in local memory).
  PCV_HD uint32_t word(int64_t i) const { return i == 0 ? w0 : i == 1 ? w1 : i == 2 ? w2 : w3; }
};

PCV_HD Philox4 philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0, uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t(0xD2511F53u) * c0, p1 = uint64_t(0xCD9E8D57u) * c2;
    const uint32_t hi0 = uint32_t(p0 >> 32), lo0 = uint32_t(p0), hi1 = uint32_t(p1 >> 32), lo1 = uint32_t(p1);
    const uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0, c1 = lo1, c2 = n2, c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return {c0, c1, c2, c3};
}

/// Attention dropout of one call (AttentionDims): element (i, j) of pair (b, h) is kept iff word
/// j%4 of philox({j/4, i, (example0 + b)·H + h, stream}, key) ≥ threshold = floor(p·2³²); a kept
/// element is scaled by 1/(1−p). `threshold` and `keep_scale` are computed on the host
/// (cuda_attention.cu) exactly as the CPU kernel computes them.
struct Dropout {
  uint32_t key0 = 0, key1 = 0, stream = 0, threshold = 0;
  float keep_scale = 1;
  int64_t example0 = 0, heads = 1;
  bool active = false;

  PCV_HD uint32_t pair(int64_t b, int64_t h) const { return uint32_t((example0 + b) * heads + h); }
  /// The block of 4 words that covers keys 4·(j/4) .. 4·(j/4)+3 of query row i.
  PCV_HD Philox4 block(uint32_t pair_id, int64_t i, int64_t j) const {
    return philox4x32_10(uint32_t(j >> 2), uint32_t(i), pair_id, stream, key0, key1);
  }
  PCV_HD float factor(const Philox4& w, int64_t j) const { return w.word(j & 3) >= threshold ? keep_scale : 0.f; }
  /// The factor of one element (four Philox words computed for one: kernels use block()).
  PCV_HD float factor_at(int64_t b, int64_t h, int64_t i, int64_t j) const {
    return active ? factor(block(pair(b, h), i, j), j) : 1.f;
  }
};

}  // namespace perceiver::cuda::body
