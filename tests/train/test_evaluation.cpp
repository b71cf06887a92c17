// Evaluation metrics: PSNR against known values, top-k with ties. (The media evaluation writes
// are tested with the media component: test_reconstruction_media.cpp.)
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "perceiver/error.h"
#include "train/evaluation.h"

namespace perceiver {
namespace {

TEST(Psnr, KnownValues) {
  const std::vector<float> target = {0.0f, 0.25f, 0.5f, 1.0f};
  std::vector<float> pred = target;
  for (float& x : pred) x += 0.125f;  // exact in float: mse = 1/64
  EXPECT_NEAR(psnr(pred.data(), target.data(), 4), 10.0 * std::log10(64.0), 1e-12);
  EXPECT_NEAR(psnr(pred.data(), target.data(), 4, 2.0), 10.0 * std::log10(4.0 * 64.0), 1e-12);
  // mse = 0.01 → 20 dB at peak 1 (float rounding of 0.1 aside).
  const std::vector<float> zeros(100, 0.0f), tenths(100, 0.1f);
  EXPECT_NEAR(psnr(tenths.data(), zeros.data(), 100), 20.0, 1e-6);
}

TEST(Psnr, IdenticalIsCappedAt100AndNanPropagates) {
  const std::vector<float> a = {0.1f, 0.2f, 0.3f};
  EXPECT_EQ(psnr(a.data(), a.data(), 3), 100.0);
  std::vector<float> b = a;
  b[0] = std::nextafter(b[0], 1.0f);  // tiny mse: would be > 100 dB
  EXPECT_EQ(psnr(b.data(), a.data(), 3), 100.0);
  b[1] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(psnr(b.data(), a.data(), 3)));
  EXPECT_THROW(psnr(a.data(), a.data(), 0), Error);
}

// Which clips a run of the evaluation reconstructs: the loop of evaluate() over the clips.
std::vector<int64_t> reconstructed(int64_t want, int64_t total) {
  std::vector<int64_t> taken;
  for (int64_t i = 0; i < total; ++i)
    if (take_for_reconstruction(i, int64_t(taken.size()), want, total)) taken.push_back(i);
  return taken;
}

TEST(ReconstructionClips, SpreadOverTheSetNotTheFirstClass) {
  // The demo's validation set: 8 classes x 4 clips, sorted by class. 4 reconstructions take
  // one clip of every second class, 8 one of every class.
  EXPECT_EQ(reconstructed(4, 32), (std::vector<int64_t>{0, 8, 16, 24}));
  EXPECT_EQ(reconstructed(8, 32), (std::vector<int64_t>{0, 4, 8, 12, 16, 20, 24, 28}));
  EXPECT_EQ(reconstructed(3, 10), (std::vector<int64_t>{0, 4, 7}));
  EXPECT_EQ(reconstructed(1, 5), (std::vector<int64_t>{0}));
  EXPECT_EQ(reconstructed(5, 5), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_TRUE(reconstructed(0, 5).empty());
  // A clip that could not be read shifts the later ones: the next clip after the gap is taken.
  EXPECT_TRUE(take_for_reconstruction(9, 1, 4, 32));
  EXPECT_FALSE(take_for_reconstruction(7, 1, 4, 32));
}

TEST(TopK, CountsHitsAndTiesFavourTheLabel) {
  // Row 0: [1, 2, 2, 0]; row 1: all equal; row 2: a NaN elsewhere does not outrank the label.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> logits = {1, 2, 2, 0, /**/ 5, 5, 5, 5, /**/ nan, 0, 3, 1};
  auto hits = [&](std::vector<int64_t> labels, int64_t k) {
    return topk_hits(logits.data(), labels.data(), 3, 4, k);
  };
  EXPECT_EQ(hits({1, 3, 2}, 1), 3);  // tie at the top counts for both tied labels
  EXPECT_EQ(hits({2, 0, 3}, 1), 2);  // label 3 of row 2 has one greater logit
  EXPECT_EQ(hits({0, 0, 3}, 1), 1);  // label 0 of row 0 has two greater logits
  EXPECT_EQ(hits({0, 0, 3}, 2), 2);
  EXPECT_EQ(hits({0, 0, 3}, 3), 3);
  EXPECT_EQ(hits({3, 0, 1}, 4), 3);  // k = L: everything is a hit
  EXPECT_EQ(hits({0, 0, 0}, 5), 2);  // NaN label logit: a miss whatever k
  std::vector<int64_t> bad = {0, 4, 0};
  EXPECT_THROW(topk_hits(logits.data(), bad.data(), 3, 4, 1), Error);
}

}  // namespace
}  // namespace perceiver
