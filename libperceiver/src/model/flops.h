// Floating-point operations of a forward pass (spec §8; FLOPs = 2·MACs), and of a training step
// (≈ 3× forward: the backward pass costs two forward passes). Used by benchmarks to report
// achieved GFLOP/s; attention recomputation in the streamed kernel is not counted (useful work only).
// `folded_kv`: the work as run with the encoder's K/V projections folded into its queries and output
// (AttentionBlockConfig::fold_kv), less than the model as written, which the default counts.
// `summed_input_grad` (folded only): a backward that gives the encoder's input gradient as group
// sums only (KvGradGroups), without its two products over the inputs (dSᵀ·Q and Pᵀ·dO).
// `kv_factor_width` (folded only; 0: none): the folded attention run over the inputs' factors of
// that width instead of their C channels (NetOptions::factor_kv_inputs), plus the products that
// take its queries and output to and from them; `kv_factor_columns`: the columns its products
// over the inputs ran over, averaged over the input rows (0: the width).
#pragma once

#include <cstdint>

#include "perceiver/config.h"

namespace perceiver {

double forward_flops(const ModelConfig& cfg, int64_t batch, int64_t image_queries, int64_t audio_queries,
                     bool folded_kv = false, int64_t kv_factor_width = 0, double kv_factor_columns = 0);
double training_flops(const ModelConfig& cfg, int64_t batch, int64_t image_queries, int64_t audio_queries,
                      bool folded_kv = false, bool summed_input_grad = false, int64_t kv_factor_width = 0,
                      double kv_factor_columns = 0);

}  // namespace perceiver
