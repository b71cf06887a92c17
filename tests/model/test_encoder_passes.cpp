// Forward-only encoder passes (Pass::kForwardOnly): they plan and write none of what only
// backward reads (the streamed cross-attention's kept scores), give the latents of a training
// pass bitwise, and a backward after one still gives the gradients (it recomputes the scores).
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "core/rng.h"
#include "model/perceiver_core.h"

namespace perceiver {
namespace {

// The cpu backend, counting the bytes of its live allocations.
class CountingBackend final : public Backend {
 public:
  std::string name() const override { return "counting-cpu"; }
  Buffer allocate(size_t bytes) override {
    auto held = std::make_shared<Buffer>(cpu_->allocate(bytes));
    in_use_ += int64_t(bytes);
    return Buffer(held->data(), bytes, [this, held, bytes](void*) { in_use_ -= int64_t(bytes); });
  }
  void zero(void* dst, size_t bytes) override { cpu_->zero(dst, bytes); }
  void discard(void* data, size_t bytes) override { cpu_->discard(data, bytes); }
  void copy_to_device(void* dst, const void* src, size_t bytes) override { cpu_->copy_to_device(dst, src, bytes); }
  void copy_to_host(void* dst, const void* src, size_t bytes) override { cpu_->copy_to_host(dst, src, bytes); }
  void synchronize() override { cpu_->synchronize(); }
  bool host_accessible() const override { return true; }
  void* handle() const override { return cpu_->handle(); }
  bool keeps_attention_scores() const override { return cpu_->keeps_attention_scores(); }
  const KernelTable<float>& kernels_f32() const override { return cpu_->kernels_f32(); }
  const KernelTable<double>* kernels_f64() const override { return cpu_->kernels_f64(); }
  int64_t in_use() const { return in_use_; }

 private:
  std::unique_ptr<Backend> cpu_ = make_backend("cpu");
  int64_t in_use_ = 0;
};

constexpr int64_t kB = 2, kLatents = 16, kD = 32, kM = 300, kC = 24;

// One cross-attention (streamed in K/V chunks of 64, LN_kv and K/V projections in 96-row
// chunks, scores kept) and one self-attention layer.
EncoderConfig encoder_config() {
  EncoderConfig e;
  e.num_latents = kLatents, e.d_latents = kD;
  e.cross.cross = true, e.cross.q_dim = kD, e.cross.kv_dim = kC;
  e.cross.kv_chunk = 64, e.cross.kv_row_chunk = 96, e.cross.keep_scores = true;
  e.self.cross = false, e.self.q_dim = kD, e.self.heads = 2;
  return e;
}

struct Fixture {
  CountingBackend backend;
  PerceiverEncoder<float> encoder{encoder_config(), "enc."};
  ParamStore<float> store;
  Context<float> ctx{backend};
  std::vector<float> x = std::vector<float>(size_t(kB * kM * kC));

  Fixture() {
    ParamRegistry r;
    r.add(encoder.param_specs());
    store = ParamStore<float>(backend, std::move(r));
    RngStream rng(7, RngPurpose::kTest);
    for (size_t i = 0; i < store.params().size(); ++i) store.params().data()[i] = float(rng.normal() * 0.3);
    for (float& v : x) v = float(rng.normal());
  }
  std::vector<float> forward(Pass pass) {
    const ConstView<float> z = encoder.forward(store, ConstView<float>{x.data(), Shape{kB, kM, kC}}, ctx, pass);
    return {z.data, z.data + z.numel()};
  }
  // The parameter gradients and the input gradient of sum(z · w) for fixed weights w.
  std::vector<float> backward() {
    std::vector<float> dz(size_t(kB * kLatents * kD)), dx(x.size());
    RngStream rng(9, RngPurpose::kTest);
    for (float& v : dz) v = float(rng.normal());
    store.zero_grad();
    encoder.backward(store, ConstView<float>{dz.data(), Shape{kB, kLatents, kD}},
                     [&](int64_t row0, ConstView<float> rows) {
                       std::copy(rows.data, rows.data + rows.numel(), dx.begin() + row0 * kC);
                     },
                     ctx);
    std::vector<float> g(store.grads().data(), store.grads().data() + store.grads().size());
    g.insert(g.end(), dx.begin(), dx.end());
    return g;
  }
};

TEST(EncoderPasses, ForwardOnlyPlansNoScoresAndGivesTheSameLatents) {
  Fixture f;
  const std::vector<float> z_train = f.forward(Pass::kWithBackward);
  const int64_t with_scores = f.backend.in_use();
  const std::vector<float> z_eval = f.forward(Pass::kForwardOnly);
  const int64_t without = f.backend.in_use();
  // The saved state loses exactly the B·Nq·Nk scores (every size here is a multiple of the
  // arena's 16-element alignment).
  EXPECT_EQ(with_scores - without, kB * kLatents * kM * int64_t(sizeof(float)));
  ASSERT_EQ(z_train.size(), z_eval.size());
  for (size_t i = 0; i < z_train.size(); ++i) ASSERT_EQ(z_train[i], z_eval[i]) << "latent " << i;
  // A training pass plans them again.
  f.forward(Pass::kWithBackward);
  EXPECT_EQ(f.backend.in_use(), with_scores);
}

TEST(EncoderPasses, BackwardAfterAForwardOnlyPassRecomputesTheScores) {
  Fixture f;
  f.forward(Pass::kWithBackward);
  const std::vector<float> kept = f.backward();
  f.forward(Pass::kForwardOnly);
  const std::vector<float> recomputed = f.backward();
  ASSERT_EQ(kept.size(), recomputed.size());
  double worst = 0, scale = 0;
  for (size_t i = 0; i < kept.size(); ++i) {
    worst = std::max(worst, double(std::abs(kept[i] - recomputed[i])));
    scale = std::max(scale, double(std::abs(kept[i])));
  }
  EXPECT_GT(scale, 0.1);
  EXPECT_LT(worst, 2e-5 * scale) << "largest gradient " << scale;
}

}  // namespace
}  // namespace perceiver
