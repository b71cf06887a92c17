// The seam holds (DESIGN.md #4): the guarded backend makes its memory inaccessible outside its
// own ops and copies, so any host code that touches tensor data behind the backend's back
// crashes here. Training steps (every optimizer, gradient accumulation, clipping, dropout),
// evaluation and full reconstruction run on it and match the cpu backend bit for bit.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>

#include "core/rng.h"
#include "model/sampling.h"
#include "model/step.h"
#include "optim/optimizer.h"

namespace perceiver {
namespace {

ModelConfig tiny() {
  ModelConfig c = model_config_from_yaml(std::string(PERCEIVER_SOURCE_DIR) + "/configs/tiny.yaml");
  c.mask_prob_label = 0.5;
  c.mask_prob_image = 0.25;
  c.attention_probs_dropout_prob = 0.1;
  return c;
}

TEST(GuardedBackend, HostAccessOutsideItsOpsIsASegfault) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const auto backend = make_backend("guarded");
  Arena<float> a(*backend, 16);
  const float one[16] = {1.f};
  a.upload(one, 16);  // through the backend: fine
  EXPECT_EQ(a.to_host()[0], 1.f);
  EXPECT_DEATH({ std::printf("%f\n", double(a.data()[0])); }, "");
  EXPECT_DEATH({ a.data()[1] = 2.f; }, "");
}

TEST(GuardedBackend, OpsAndCopiesWork) {
  const auto backend = make_backend("guarded");
  EXPECT_FALSE(backend->host_accessible());
  Arena<float> a(*backend, 1000);
  Arena<double> out(*backend, 1);
  std::vector<float> host(1000);
  for (size_t i = 0; i < host.size(); ++i) host[i] = float(i % 7) - 3.f;
  a.upload(host.data(), host.size());
  const Kernels<float> k = backend->kernels<float>();
  k.scale(1000, 2.f, a.data());
  k.sum_squares(1000, a.data(), out.data());
  double expect = 0;
  for (float v : host) expect += 4.0 * v * v;
  EXPECT_EQ(out.to_host()[0], expect);
  EXPECT_EQ(a.to_host()[999], 2.f * host[999]);
}

TEST(BackendSeam, AMissingOpIsAnErrorNamingIt) {
  KernelTable<float> t = cpu_backend().kernels<float>().table();
  t.lamb_update = nullptr;
  t.gather_rows = nullptr;
  try {
    check_complete(t, "half-done");
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("'half-done'"), std::string::npos) << m;
    EXPECT_NE(m.find("gather_rows"), std::string::npos) << m;
    EXPECT_NE(m.find("lamb_update"), std::string::npos) << m;
  }
}

// Everything a few training steps and an evaluation leave behind, on the host.
struct Outcome {
  std::vector<double> losses, norms;
  std::vector<float> params, state, logits, video, audio;
};

Outcome train_and_evaluate(const std::string& device, const std::string& optimizer, int64_t micro_batches) {
  const ModelConfig c = tiny();
  const auto backend = make_backend(device);
  PerceiverNet<float> net(c, *backend);
  net.store().initialize(3, InitScheme::kHuggingFace);
  OptimizerOptions oo;
  oo.name = optimizer;
  oo.max_grad_norm = 0.05;  // small: clipping happens
  auto opt = make_optimizer(oo, net.store().registry(), *backend);
  const int64_t B = 3;
  RngStream rng(11, RngPurpose::kTest);
  std::vector<float> video(size_t(B * c.pixels() * 3)), audio(size_t(B * c.audio_samples()));
  std::vector<int64_t> labels(B);
  Arena<double> stats(*backend, size_t(micro_batches * kLossTermCount + kOptimStatCount));
  const LossConfig lc;
  Outcome o;
  for (int64_t step = 0; step < 3; ++step) {
    net.store().zero_grad();
    for (int64_t m = 0; m < micro_batches; ++m) {
      for (auto& v : video) v = float(rng.uniform());
      for (auto& v : audio) v = float(rng.normal() * 0.3);
      for (auto& l : labels) l = int64_t(rng.below(uint64_t(c.num_labels)));
      const int64_t first = m * B;
      enqueue_step(net, video.data(), audio.data(), labels.data(), B, draw_output_points(c, 5, step),
                   draw_masks(c, B, 5, step, first), lc, true, stats.data() + m * kLossTermCount,
                   TrainingMode{true, 5, step, first});
    }
    if (micro_batches > 1) net.context().k.scale(int64_t(net.store().grads().size()), 1.f / float(micro_batches),
                                                 net.store().grads().data());
    opt->enqueue_step(net.store(), 1e-2, stats.data() + micro_batches * kLossTermCount);
    const std::vector<double> host = stats.to_host();
    o.norms.push_back(opt->finish_step(host.data() + micro_batches * kLossTermCount).grad_norm);
    o.losses.insert(o.losses.end(), host.begin(), host.begin() + micro_batches * kLossTermCount);
  }
  o.params = net.store().params().to_host();
  for (const NamedTensor& t : opt->state_tensors()) {  // device views: copied by the backend
    const std::vector<float> v = download(*backend, ConstView<float>(t.view));
    o.state.insert(o.state.end(), v.begin(), v.end());
  }
  run_step(net, video.data(), audio.data(), labels.data(), B, draw_output_points(c, 5, 0),
           draw_masks(c, B, 5, 0, 0, true), lc, false, &o.logits);
  net.encode(video.data(), audio.data(), labels.data(), B, draw_masks(c, B, 5, 0, 0, true));
  std::vector<float> logits;
  decode_everything(net, 3, o.video, o.audio, logits);
  return o;
}

void expect_bitwise(const std::vector<float>& a, const std::vector<float>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  ASSERT_FALSE(a.empty()) << what;
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << what << " differ";
}

class GuardedTraining : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(GuardedTraining, BitwiseEqualToCpu) {
  const auto& [optimizer, micro] = GetParam();
  const Outcome cpu = train_and_evaluate("cpu", optimizer, micro);
  const Outcome guarded = train_and_evaluate("guarded", optimizer, micro);
  EXPECT_EQ(cpu.losses, guarded.losses);
  EXPECT_EQ(cpu.norms, guarded.norms);
  for (double n : cpu.norms) EXPECT_GT(n, 0.05) << "clipping was not exercised";
  expect_bitwise(cpu.params, guarded.params, "parameters");
  expect_bitwise(cpu.state, guarded.state, "optimizer state");
  expect_bitwise(cpu.logits, guarded.logits, "evaluation logits");
  expect_bitwise(cpu.video, guarded.video, "reconstructed video");
  expect_bitwise(cpu.audio, guarded.audio, "reconstructed audio");
}

INSTANTIATE_TEST_SUITE_P(Optimizers, GuardedTraining,
                         ::testing::Combine(::testing::Values("sgd", "adamw", "lamb"), ::testing::Values(1, 2)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_micro" + std::to_string(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace perceiver
