// Whole-model gradient checks in double on the tiny config (spec §10): every parameter,
// including padding rows, mask tokens, latents, the label query and weight-shared blocks,
// with the label mask probability at 0 and at 1, both reconstruction losses, and attention
// dropout in train mode (the masks are fixed by the key, so the loss is a deterministic function).
#include <gtest/gtest.h>

#include "grad/harness.h"
#include "model/loss.h"

namespace perceiver::testing {
namespace {

struct ModelCase {
  std::string name;
  int64_t num_blocks;
  double label_mask;  // 0: label visible, 1: always replaced by the mask token
  ReconLoss recon;
  int64_t image_mask_every = 0;  // > 0: mask every n-th image token (exercises mask.image)
  double dropout = 0;            // attention_probs_dropout_prob, in train mode
  friend void PrintTo(const ModelCase& c, std::ostream* os) { *os << c.name; }
};

class ModelGrad : public ::testing::TestWithParam<ModelCase> {};

TEST_P(ModelGrad, EveryParameter) {
  const ModelCase& mc = GetParam();
  ModelConfig cfg = model_config_from_yaml(std::string(PERCEIVER_SOURCE_DIR) + "/configs/tiny.yaml");
  cfg.num_blocks = mc.num_blocks;
  cfg.attention_probs_dropout_prob = mc.dropout;
  PerceiverNet<double> net(cfg, cpu_backend());
  if (mc.dropout > 0) net.context().mode = {true, 11, 3, 0};
  uint64_t seed = 100;
  for (const auto& e : net.store().registry().entries()) {
    const bool gain = e.spec.role == ParamRole::kNormGain;
    fill_normal(net.store().param(e.spec.name), ++seed, gain ? 0.1 : 0.3, gain ? 1.0 : 0.0);
  }
  const int64_t B = 2;
  std::vector<double> video(B * cfg.pixels() * 3), audio(B * cfg.audio_samples());
  fill_normal({video.data(), Shape{int64_t(video.size())}}, 1, 0.5, 0.5);
  fill_normal({audio.data(), Shape{int64_t(audio.size())}}, 2, 0.3);
  const int64_t labels[B] = {1, 4};
  std::vector<uint8_t> mask(B * cfg.input_tokens(), 0);
  const ModalityLayout lay(cfg);
  for (int64_t b = 0; b < B; ++b) {
    mask[b * cfg.input_tokens() + lay.label_begin] = mc.label_mask > 0.5;
    if (mc.image_mask_every)
      for (int64_t i = 0; i < lay.image_count; i += mc.image_mask_every) mask[b * cfg.input_tokens() + lay.image_begin + i] = 1;
  }
  OutputPoints pts{{3, 100, 257, 300, 444, 511}, {0, 2, 7}};
  LossConfig lc;
  lc.recon = mc.recon;
  lc.w_label = 0.5;  // larger than the paper's 1e-4 so the label path is checked at full precision
  auto loss = [&] {
    net.encode(video.data(), audio.data(), labels, B, mask);
    auto out = net.decode(pts);
    return compute_loss(net, lc, out, nullptr).total;
  };
  net.encode(video.data(), audio.data(), labels, B, mask);
  auto out = net.decode(pts);
  const DecoderOutputs<double> grads = net.output_grads();
  compute_loss(net, lc, out, &grads);
  net.store().zero_grad();
  net.backward(ConstView<double>(grads.image), ConstView<double>(grads.audio), ConstView<double>(grads.label));
  std::vector<GradTensor> tensors;
  for (const auto& e : net.store().registry().entries())
    tensors.push_back({e.spec.name, net.store().param(e.spec.name), net.store().grad(e.spec.name)});
  check_gradients(loss, tensors, {.max_elems = 8});
  // What the released config implies: with the label always masked, the one-hot path and the
  // label padding get exactly zero gradient (spec §3.5).
  const auto pad_label = net.store().grad("perceiver.input_preprocessor.padding.label");
  if (mc.label_mask > 0.5) {
    for (int64_t i = 0; i < pad_label.numel(); ++i) EXPECT_EQ(pad_label.data[i], 0.0);
  }
  const auto mask_label = net.store().grad("perceiver.input_preprocessor.mask.label");
  if (mc.label_mask < 0.5) {
    for (int64_t i = 0; i < mask_label.numel(); ++i) EXPECT_EQ(mask_label.data[i], 0.0);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Tiny, ModelGrad,
    ::testing::Values(ModelCase{"mse_label_visible", 1, 0.0, ReconLoss::kMse},
                      ModelCase{"mse_label_masked", 1, 1.0, ReconLoss::kMse},
                      ModelCase{"mse_two_blocks_shared_weights", 2, 0.0, ReconLoss::kMse, 3},
                      ModelCase{"l1_label_masked_image_masks", 1, 1.0, ReconLoss::kL1, 5},
                      ModelCase{"mse_two_blocks_attention_dropout", 2, 0.0, ReconLoss::kMse, 0, 0.3}),
    [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace perceiver::testing
