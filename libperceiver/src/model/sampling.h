// The random draws of a training step, as pure functions of (seed, step, example) so that a
// resumed run and a data-parallel run reproduce them exactly (DESIGN.md #7).
#pragma once

#include <vector>

#include "model/decoder_queries.h"

namespace perceiver {

/// num_queries_image pixels and num_queries_audio audio patches, uniformly without replacement,
/// sorted; one set per step, shared by the batch and by every rank.
OutputPoints draw_output_points(const ModelConfig& cfg, uint64_t seed, int64_t step);

/// Input masks [B·M]: token t of example e is replaced by its modality's mask token with the
/// config's probability, from the stream (seed, kMask, step, e) with e = first_example + b.
std::vector<uint8_t> draw_masks(const ModelConfig& cfg, int64_t batch, uint64_t seed, int64_t step,
                                int64_t first_example, bool label_always_masked = false);

/// Every output point in `chunks` contiguous slices (the colab's chunked full decoding).
OutputPoints chunk_points(const ModelConfig& cfg, int64_t chunk, int64_t chunks);

}  // namespace perceiver
