#include "model/sampling.h"

#include "core/rng.h"
#include "model/preprocessor.h"

namespace perceiver {

OutputPoints draw_output_points(const ModelConfig& c, uint64_t seed, int64_t step) {
  RngStream rng(seed, RngPurpose::kSubsample, uint64_t(step));
  OutputPoints pts;
  pts.image = rng.sample_without_replacement(c.pixels(), c.num_queries_image);
  pts.audio = rng.sample_without_replacement(c.audio_tokens(), c.num_queries_audio);
  return pts;
}

std::vector<uint8_t> draw_masks(const ModelConfig& c, int64_t B, uint64_t seed, int64_t step, int64_t first_example,
                                bool label_always_masked) {
  const ModalityLayout lay(c);
  const int64_t M = c.input_tokens();
  std::vector<uint8_t> mask(B * M, 0);
  auto draw = [](RngStream& rng, double p) { return p >= 1.0 || (p > 0.0 && rng.bernoulli(p)); };
  for (int64_t b = 0; b < B; ++b) {
    RngStream rng(seed, RngPurpose::kMask, uint64_t(step), uint32_t(first_example + b));
    uint8_t* m = mask.data() + b * M;
    for (int64_t i = 0; i < lay.audio_count; ++i) m[lay.audio_begin + i] = draw(rng, c.mask_prob_audio);
    for (int64_t i = 0; i < lay.image_count; ++i) m[lay.image_begin + i] = draw(rng, c.mask_prob_image);
    m[lay.label_begin] = label_always_masked || draw(rng, c.mask_prob_label);
  }
  return mask;
}

OutputPoints chunk_points(const ModelConfig& c, int64_t chunk, int64_t chunks) {
  PCV_CHECK(chunks > 0 && chunk >= 0 && chunk < chunks, "chunk ", chunk, " of ", chunks);
  auto range = [&](int64_t total) {
    const int64_t begin = total * chunk / chunks, end = total * (chunk + 1) / chunks;
    std::vector<int64_t> v;
    for (int64_t i = begin; i < end; ++i) v.push_back(i);
    return v;
  };
  return {range(c.pixels()), range(c.audio_tokens())};
}

}  // namespace perceiver
