// Philox against the Random123 known-answer vectors, and the properties the trainer relies on:
// streams are pure functions of their key, distinct keys give distinct streams, and the
// samplers are unbiased enough to be useful.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "core/rng.h"
#include "perceiver/error.h"

namespace perceiver {
namespace {

TEST(Philox, KnownAnswerVectors) {
  using A4 = std::array<uint32_t, 4>;
  EXPECT_EQ(philox4x32_10({0, 0, 0, 0}, {0, 0}), (A4{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(philox4x32_10({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
            (A4{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
            (A4{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(RngStream, SameKeySameNumbersDifferentKeyDifferentNumbers) {
  RngStream a(42, RngPurpose::kMask, 7, 1), b(42, RngPurpose::kMask, 7, 1);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(a.next_u32(), b.next_u32());
  const uint32_t first = RngStream(42, RngPurpose::kMask, 7, 1).next_u32();
  EXPECT_NE(first, RngStream(43, RngPurpose::kMask, 7, 1).next_u32());
  EXPECT_NE(first, RngStream(42, RngPurpose::kSubsample, 7, 1).next_u32());
  EXPECT_NE(first, RngStream(42, RngPurpose::kMask, 8, 1).next_u32());
  EXPECT_NE(first, RngStream(42, RngPurpose::kMask, 7, 2).next_u32());
}

TEST(RngStream, UniformAndNormalMoments) {
  RngStream rng(1, RngPurpose::kTest);
  const int n = 200000;
  double su = 0, sn = 0, sn2 = 0;
  for (int i = 0; i < n; ++i) {
    const double u = rng.uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    su += u;
    const double z = rng.normal();
    sn += z;
    sn2 += z * z;
  }
  EXPECT_NEAR(su / n, 0.5, 0.005);
  EXPECT_NEAR(sn / n, 0.0, 0.01);
  EXPECT_NEAR(sn2 / n, 1.0, 0.02);
}

TEST(RngStream, TruncatedNormalStaysInBoundsWithKnownStd) {
  RngStream rng(2, RngPurpose::kTest);
  double s2 = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const double z = rng.truncated_normal(2.0);
    ASSERT_LE(std::abs(z), 2.0);
    s2 += z * z;
  }
  EXPECT_NEAR(std::sqrt(s2 / n), 0.8796, 0.005);  // std of N(0,1) truncated to [-2, 2]
}

TEST(RngStream, BelowIsUniform) {
  RngStream rng(3, RngPurpose::kTest);
  std::vector<int> counts(7, 0);
  for (int i = 0; i < 70000; ++i) ++counts[rng.below(7)];
  for (int c : counts) EXPECT_NEAR(c, 10000, 400);
}

TEST(RngStream, SampleWithoutReplacementIsSortedDistinctInRange) {
  RngStream rng(4, RngPurpose::kTest);
  auto s = rng.sample_without_replacement(802816, 512);
  ASSERT_EQ(s.size(), 512u);
  EXPECT_TRUE(std::is_sorted(s.begin(), s.end()));
  EXPECT_EQ(std::set<int64_t>(s.begin(), s.end()).size(), 512u);
  EXPECT_GE(s.front(), 0);
  EXPECT_LT(s.back(), 802816);
  EXPECT_EQ(rng.sample_without_replacement(5, 5), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_THROW(rng.sample_without_replacement(3, 4), Error);
}

TEST(RngStream, PermutationIsAPermutation) {
  RngStream rng(5, RngPurpose::kTest);
  auto p = rng.permutation(1000);
  std::vector<int64_t> sorted = p;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(sorted[i], i);
  EXPECT_NE(p, sorted);
}

}  // namespace
}  // namespace perceiver
