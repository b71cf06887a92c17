// The public Model API: deterministic training draws, data-parallel equivalence of the draws,
// chunked full-output reconstruction, weight round trips, and a short run that learns.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "core/rng.h"
#include "perceiver/model.h"

namespace perceiver {
namespace {

ModelConfig tiny() { return model_config_from_yaml(std::string(PERCEIVER_SOURCE_DIR) + "/configs/tiny.yaml"); }

struct Data {
  std::vector<float> video, audio;
  std::vector<int64_t> labels;
  BatchView batch(int64_t first = 0, int64_t n = -1) const {
    const int64_t B = int64_t(labels.size());
    if (n < 0) n = B - first;
    const int64_t v = int64_t(video.size()) / B, a = int64_t(audio.size()) / B;
    return {video.data() + first * v, audio.data() + first * a, labels.data() + first, n};
  }
};

Data random_data(const ModelConfig& c, int64_t B, uint64_t seed) {
  RngStream rng(seed, RngPurpose::kTest);
  Data d{std::vector<float>(B * c.pixels() * 3), std::vector<float>(B * c.audio_samples()), std::vector<int64_t>(B)};
  for (auto& x : d.video) x = float(rng.uniform());
  for (auto& x : d.audio) x = float(rng.normal() * 0.3);
  for (auto& l : d.labels) l = int64_t(rng.below(uint64_t(c.num_labels)));
  return d;
}

TEST(ModelApi, TrainStepIsDeterministicPerStep) {
  ModelConfig c = tiny();
  c.mask_prob_label = 0.5;
  c.mask_prob_image = 0.2;
  Model a(c, 1), b(c, 1);
  const Data d = random_data(c, 3, 2);
  const auto la = a.train_step(d.batch(), 5), lb = b.train_step(d.batch(), 5);
  EXPECT_EQ(la.total, lb.total);
  for (size_t i = 0; i < a.gradients().size(); ++i) ASSERT_EQ(a.gradients()[i], b.gradients()[i]);
  EXPECT_NE(a.evaluate_loss(d.batch(), 6).total, la.total);  // another step draws other points
}

// Two half batches with their example offsets reproduce the full batch: the mean of their
// gradients equals the full batch's (what data-parallel training relies on).
TEST(ModelApi, HalfBatchesReproduceTheFullBatch) {
  ModelConfig c = tiny();
  c.mask_prob_label = 0.5;
  c.mask_prob_audio = 0.3;
  const Data d = random_data(c, 4, 3);
  Model full(c, 7), half(c, 7);
  full.train_step(d.batch(), 2);
  half.train_step(d.batch(0, 2), 2, {}, 0);
  half.train_step(d.batch(2, 2), 2, {}, 2);
  double worst = 0, scale = 0;
  for (size_t i = 0; i < full.gradients().size(); ++i) {
    worst = std::max(worst, double(std::abs(full.gradients()[i] - 0.5f * half.gradients()[i])));
    scale = std::max(scale, double(std::abs(full.gradients()[i])));
  }
  EXPECT_LT(worst, 1e-5 * std::max(1.0, scale));
}

// Attention dropout (attention_probs_dropout_prob) acts in train_step only: a training step
// differs from the same step without dropout, while evaluate_loss and classify do not; the
// masks are keyed by (seed, step, example), so a step replays exactly (resume) and half batches
// with their example offsets still reproduce the full batch (data parallel).
TEST(ModelApi, AttentionDropoutActsInTrainStepOnly) {
  ModelConfig plain = tiny();
  plain.mask_prob_label = 0.5;
  ModelConfig drop = plain;
  drop.attention_probs_dropout_prob = 0.3;
  Model a(plain, 1), b(drop, 1), b2(drop, 1);
  const Data d = random_data(plain, 4, 2);
  const auto la = a.train_step(d.batch(), 5), lb = b.train_step(d.batch(), 5), lb2 = b2.train_step(d.batch(), 5);
  EXPECT_NE(la.total, lb.total);
  EXPECT_EQ(lb.total, lb2.total);
  size_t differ = 0;
  for (size_t i = 0; i < a.gradients().size(); ++i) {
    differ += a.gradients()[i] != b.gradients()[i];
    ASSERT_EQ(b.gradients()[i], b2.gradients()[i]) << "a dropout step does not replay";
  }
  EXPECT_GT(differ, a.gradients().size() / 2);
  b2.zero_grad();
  EXPECT_NE(b2.train_step(d.batch(), 6).total, lb.total);  // another step, other masks and points
  // Eval paths: no dropout, bitwise equal to the model without it.
  EXPECT_EQ(a.evaluate_loss(d.batch(), 5).total, b.evaluate_loss(d.batch(), 5).total);
  const auto ca = a.classify(d.batch()), cb = b.classify(d.batch());
  for (size_t i = 0; i < ca.size(); ++i) ASSERT_EQ(ca[i], cb[i]);
  // Data parallel: two half batches with offsets 0 and 2 reproduce the full batch's gradient.
  Model half(drop, 1);
  half.train_step(d.batch(0, 2), 5, {}, 0);
  half.train_step(d.batch(2, 2), 5, {}, 2);
  double worst = 0, scale = 0;
  for (size_t i = 0; i < b.gradients().size(); ++i) {
    worst = std::max(worst, double(std::abs(b.gradients()[i] - 0.5f * half.gradients()[i])));
    scale = std::max(scale, double(std::abs(b.gradients()[i])));
  }
  EXPECT_LT(worst, 1e-5 * std::max(1.0, scale));
}

TEST(ModelApi, ChunkedReconstructionEqualsOnePass) {
  const ModelConfig c = tiny();
  Model m(c, 3);
  const Data d = random_data(c, 2, 4);
  const Reconstruction one = m.reconstruct(d.batch(), 1), many = m.reconstruct(d.batch(), 7);
  ASSERT_EQ(one.video.size(), size_t(2 * c.pixels() * 3));
  ASSERT_EQ(one.audio.size(), size_t(2 * c.audio_samples()));
  for (size_t i = 0; i < one.video.size(); ++i) ASSERT_NEAR(one.video[i], many.video[i], 1e-5) << i;
  for (size_t i = 0; i < one.audio.size(); ++i) ASSERT_NEAR(one.audio[i], many.audio[i], 1e-5) << i;
  for (size_t i = 0; i < one.label_logits.size(); ++i) ASSERT_NEAR(one.label_logits[i], many.label_logits[i], 1e-5);
  // More chunks than points run as one point of the larger modality per pass (before, a million
  // chunks ran a million decoder passes, nearly all of them empty).
  const Reconstruction most = m.reconstruct(d.batch(), 1000000);
  for (size_t i = 0; i < one.video.size(); ++i) ASSERT_NEAR(one.video[i], most.video[i], 1e-5) << i;
  for (size_t i = 0; i < one.audio.size(); ++i) ASSERT_NEAR(one.audio[i], most.audio[i], 1e-5) << i;
  const auto logits = m.classify(d.batch());
  ASSERT_EQ(logits.size(), size_t(2 * c.num_labels));
  for (size_t i = 0; i < logits.size(); ++i) EXPECT_NEAR(logits[i], one.label_logits[i], 1e-5);
}

TEST(ModelApi, WeightsRoundTripThroughBothFormats) {
  const ModelConfig c = tiny();
  const auto dir = std::filesystem::path(PERCEIVER_BINARY_DIR) / "fixtures" / "model_api";
  std::filesystem::create_directories(dir);
  Model a(c, 11), b(c, 12), h(c, 13);
  a.save_weights((dir / "w.safetensors").string());
  a.save_weights((dir / "w.h5").string());
  b.load_weights((dir / "w.safetensors").string());
  h.load_weights((dir / "w.h5").string());
  for (size_t i = 0; i < a.parameters().size(); ++i) {
    ASSERT_EQ(a.parameters()[i], b.parameters()[i]);
    ASSERT_EQ(a.parameters()[i], h.parameters()[i]);
  }
  EXPECT_THROW(b.load_weights((dir / "missing.safetensors").string()), Error);
  // A name that picks no format is refused, naming it (it used to be written as HDF5).
  const auto stray = dir / "w.bin";
  std::filesystem::remove(stray);
  try {
    a.save_weights(stray.string());
    ADD_FAILURE() << "save_weights took " << stray;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'" + stray.string() + "': the name must end in .safetensors, .h5 or .hdf5"),
              std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(stray));
  a.save_weights((dir / "w.hdf5").string());
  h.load_weights((dir / "w.hdf5").string());
  for (size_t i = 0; i < a.parameters().size(); ++i) ASSERT_EQ(a.parameters()[i], h.parameters()[i]);
}

// A bad batch is one clear error from every entry point, before anything is sized from it.
TEST(ModelApi, BadBatchesAreClearErrors) {
  const ModelConfig c = tiny();
  Model m(c, 3);
  Data d = random_data(c, 2, 4);
  for (const int64_t size : {int64_t(0), int64_t(-3)}) {
    BatchView b = d.batch();
    b.size = size;
    for (int entry = 0; entry < 4; ++entry) {
      try {
        if (entry == 0) m.train_step(b, 0);
        if (entry == 1) m.evaluate_loss(b, 0);
        if (entry == 2) m.classify(b);
        if (entry == 3) m.reconstruct(b);
        ADD_FAILURE() << "entry " << entry << " took a batch of size " << size;
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("batch needs video, audio, labels and a positive size"), std::string::npos)
            << "entry " << entry << ", size " << size << ": " << e.what();
      }
    }
  }
  d.labels[1] = c.num_labels;
  try {
    m.train_step(d.batch(), 0);
    ADD_FAILURE() << "a label outside the classes was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("label " + std::to_string(c.num_labels) + " of example 1 is outside [0, " +
                                            std::to_string(c.num_labels) + ")"), std::string::npos) << e.what();
  }
}

// Plain SGD (DeepMind init, lr 0.1) on one fixed batch of the tiny config with the label visible:
// the model can learn to copy the label, so cross-entropy must fall far; the reconstruction of
// random noise cannot go below its noise floor, so the total only has to fall.
TEST(ModelApi, ShortTrainingLowersTheLoss) {
  ModelConfig c = tiny();
  c.mask_prob_label = 0.0;
  Model m(c, 5, InitScheme::kDeepMind);
  const Data d = random_data(c, 4, 6);
  LossConfig lc;
  lc.w_label = 1.0;
  const LossValues first = m.evaluate_loss(d.batch(), 0, lc);
  for (int step = 0; step < 100; ++step) {
    m.zero_grad();
    m.train_step(d.batch(), step, lc);
    auto p = m.parameters();
    auto g = m.gradients();
    for (size_t i = 0; i < p.size(); ++i) p[i] -= 0.1f * g[i];
  }
  const LossValues last = m.evaluate_loss(d.batch(), 0, lc);
  EXPECT_LT(last.total, 0.9 * first.total) << "loss " << first.total << " -> " << last.total;
  EXPECT_LT(last.label, 0.3 * first.label) << "label CE " << first.label << " -> " << last.label;
}

}  // namespace
}  // namespace perceiver
