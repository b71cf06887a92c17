// Floating-point operations of a forward pass (spec §8; FLOPs = 2·MACs), and of a training step
// (≈ 3× forward: the backward pass costs two forward passes). Used by benchmarks to report
// achieved GFLOP/s; attention recomputation in the streamed kernel is not counted (useful work only).
// `folded_kv`: the work as run with the encoder's K/V projections folded into its queries and output
// (AttentionBlockConfig::fold_kv), less than the model as written, which the default counts.
#pragma once

#include <cstdint>

#include "perceiver/config.h"

namespace perceiver {

double forward_flops(const ModelConfig& cfg, int64_t batch, int64_t image_queries, int64_t audio_queries,
                     bool folded_kv = false);
inline double training_flops(const ModelConfig& cfg, int64_t batch, int64_t image_queries, int64_t audio_queries,
                             bool folded_kv = false) {
  return 3.0 * forward_flops(cfg, batch, image_queries, audio_queries, folded_kv);
}

}  // namespace perceiver
