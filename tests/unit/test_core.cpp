// Errors, shapes, arenas, the parameter registry and its initialisers, and scratch memory.
#include <gtest/gtest.h>

#include <cmath>

#include "core/arena.h"
#include "core/params.h"
#include "core/scratch.h"
#include "perceiver/error.h"

namespace perceiver {
namespace {

TEST(Error, CheckNamesFileLineAndValue) {
  try {
    const int heads = 3;
    PCV_CHECK(heads == 2, "num_self_attention_heads ", heads, " does not divide 512");
    FAIL() << "no throw";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("test_core.cpp:"), std::string::npos) << what;
    EXPECT_NE(what.find("num_self_attention_heads 3 does not divide 512"), std::string::npos) << what;
  }
  EXPECT_THROW(PCV_ASSERT(1 + 1 == 3), Error);
  EXPECT_NO_THROW(PCV_CHECK(true, "never"));
}

TEST(Shape, BasicsAndChecks) {
  Shape s{2, 3, 4};
  EXPECT_EQ(s.rank(), 3);
  EXPECT_EQ(s.numel(), 24);
  EXPECT_EQ(s.rows(), 6);
  EXPECT_EQ(s.cols(), 4);
  EXPECT_EQ(s[-1], 4);
  EXPECT_EQ(s.str(), "[2,3,4]");
  EXPECT_THROW((Shape{1, 2, 3, 4, 5, 6, 7}), Error);
  EXPECT_THROW((Shape{2, -1}), Error);
}

TEST(Arena, AlignedZeroedAndPlanned) {
  Arena<float> a(100);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % 64, 0u);  // the cpu backend aligns to cache lines
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a.data()[i], 0.0f);
  ArenaPlan plan;
  EXPECT_EQ(plan.add("x", Shape{3}), 0);
  EXPECT_EQ(plan.add("y", Shape{5, 2}), 16);  // rows start 64-byte aligned
  EXPECT_EQ(plan.size(), 26);
  EXPECT_THROW(plan.at("z"), Error);
  PlannedArena<float> acts(plan);
  EXPECT_EQ(acts["y"].shape, (Shape{5, 2}));
  EXPECT_EQ(acts["y"].data - acts["x"].data, 16);
}

TEST(ParamRegistry, OffsetsNamesAndCounts) {
  ParamRegistry r;
  r.add({{"weight", Shape{4, 3}, ParamRole::kLinearWeight, 3}, {"bias", Shape{4}, ParamRole::kBias, 3}},
        "layer.");
  EXPECT_EQ(r.at("layer.weight").offset, 0);
  EXPECT_EQ(r.at("layer.bias").offset, 16);
  EXPECT_EQ(r.num_parameters(), 16);
  EXPECT_THROW(r.at("layer.gamma"), Error);
  EXPECT_THROW(r.add({"layer.bias", Shape{1}}), Error);
  EXPECT_FALSE(is_decayed(ParamRole::kBias));
  EXPECT_FALSE(is_decayed(ParamRole::kNormGain));
  EXPECT_TRUE(is_decayed(ParamRole::kEmbedding));
}

double std_of(ConstView<float> v) {
  double s = 0, s2 = 0;
  for (int64_t i = 0; i < v.numel(); ++i) s += v.data[i], s2 += double(v.data[i]) * v.data[i];
  const double m = s / v.numel();
  return std::sqrt(s2 / v.numel() - m * m);
}

TEST(ParamStore, InitialisersFollowTheScheme) {
  ParamRegistry r;
  r.add({"w", Shape{256, 400}, ParamRole::kLinearWeight, 400});
  r.add({"head", Shape{256, 400}, ParamRole::kHeadWeight, 400});
  r.add({"b", Shape{256}, ParamRole::kBias, 400});
  r.add({"g", Shape{256}, ParamRole::kNormGain, 0});
  r.add({"emb", Shape{256, 100}, ParamRole::kEmbedding, 0});
  ParamStore<float> hf(r), dm(r), hf2(r);
  hf.initialize(1, InitScheme::kHuggingFace);
  hf2.initialize(1, InitScheme::kHuggingFace);
  dm.initialize(1, InitScheme::kDeepMind);
  EXPECT_NEAR(std_of(hf.param("w")), 0.02, 0.001);
  EXPECT_NEAR(std_of(hf.param("emb")), 0.02, 0.001);
  EXPECT_EQ(hf.param("b").data[7], 0.0f);
  EXPECT_EQ(hf.param("g").data[7], 1.0f);
  EXPECT_NEAR(std_of(dm.param("w")), 1 / std::sqrt(400.0), 0.002);          // variance scaling
  EXPECT_NEAR(std_of(dm.param("head")), 0.8796 / std::sqrt(400.0), 0.002);  // hk.Linear default
  EXPECT_NEAR(std_of(dm.param("emb")), 0.8796 * 0.02, 0.001);
  for (int64_t i = 0; i < r.arena_size(); ++i) ASSERT_EQ(hf.params().data()[i], hf2.params().data()[i]);
}

TEST(Scratch, ScopesReleaseAndMemoryIsReused) {
  Scratch<float> s(cpu_backend());
  float* first = nullptr;
  {
    ScratchScope<float> scope(s);
    auto a = s.take({10});
    first = a.data;
    a.data[0] = 5;
    auto b = s.take({1000});  // forces a second block: `a` stays valid
    EXPECT_EQ(a.data[0], 5);
    EXPECT_EQ(b.data[999], 0);
  }
  // Blocks were merged: the next pass fits in one and allocates nothing new.
  const int64_t reserved = s.reserved_bytes();
  {
    ScratchScope<float> scope(s);
    auto a = s.take({10});
    auto b = s.take({1000});
    EXPECT_EQ(a.data[0], 0);  // handed out zeroed
    EXPECT_EQ(b.data + 0, a.data + 16);
  }
  EXPECT_EQ(s.reserved_bytes(), reserved);
  (void)first;
}

TEST(Scratch, MergedBlockHoldsThePeakNotEveryBlock) {
  Scratch<float> s(cpu_backend());
  {
    ScratchScope<float> scope(s);
    s.take({1000});  // 1008 elements with alignment
    {
      ScratchScope<float> inner(s);
      s.take({10});  // does not fit: a second block, as large as the first (1008)
    }
    EXPECT_EQ(s.reserved_bytes(), 2 * 1008 * int64_t(sizeof(float)));
  }
  // At most 1008 + 16 elements were live at once: the merged block is that, not 2016.
  EXPECT_EQ(s.reserved_bytes(), (1008 + 16) * int64_t(sizeof(float)));
  {
    ScratchScope<float> scope(s);
    auto a = s.take({1000});
    auto b = s.take({10});
    EXPECT_EQ(b.data, a.data + 1008);  // the same takes fit in the one block
  }
  EXPECT_EQ(s.reserved_bytes(), (1008 + 16) * int64_t(sizeof(float)));
}

// The CPU backend, recording the ranges the scratch stack discards.
class DiscardRecorder : public Backend {
 public:
  std::string name() const override { return "discard-recorder"; }
  Buffer allocate(size_t bytes) override { return cpu_backend().allocate(bytes); }
  void zero(void* dst, size_t bytes) override { cpu_backend().zero(dst, bytes); }
  void discard(void* data, size_t bytes) override { discarded.push_back({static_cast<float*>(data), bytes}); }
  void copy_to_device(void* dst, const void* src, size_t bytes) override { cpu_backend().copy_to_device(dst, src, bytes); }
  void copy_to_host(void* dst, const void* src, size_t bytes) override { cpu_backend().copy_to_host(dst, src, bytes); }
  void synchronize() override {}
  const KernelTable<float>& kernels_f32() const override { return cpu_backend().kernels_f32(); }
  std::vector<std::pair<float*, size_t>> discarded;
};

// While the stack spans several blocks (it grows), the free top of a block it steps off and the
// blocks it steps back off are discarded (the first step's resident memory follows what is live);
// once merged into one block, nothing is.
TEST(Scratch, DiscardsWhatItStepsOffAndNothingOnceMerged) {
  DiscardRecorder backend;
  Scratch<float> s(backend);
  {
    ScratchScope<float> scope(s);
    const float* a = s.take({1000}).data;  // 1008 elements with alignment
    {
      ScratchScope<float> inner(s);
      s.take({10});  // does not fit: the first block's top (its last 0 elements) and a second block
      ASSERT_EQ(backend.discarded.size(), 0u);  // the first block was full: nothing to discard
      s.take({2000});  // nor does this: the second block's top after its 16, and a third block
      ASSERT_EQ(backend.discarded.size(), 1u);
      EXPECT_EQ(backend.discarded[0].second, (1008 - 16) * sizeof(float));
    }
    // Stepping back into the first block: the second and third are discarded whole.
    ASSERT_EQ(backend.discarded.size(), 3u);
    EXPECT_EQ(backend.discarded[1].second, 1008 * sizeof(float));
    EXPECT_EQ(backend.discarded[2].second, 2016 * sizeof(float));
    EXPECT_EQ(s.take({0}).data, a + 1008);  // the stack's top is back in the first block
  }
  backend.discarded.clear();
  {  // merged: the same takes fit in one block, and nothing is discarded
    ScratchScope<float> scope(s);
    s.take({1000});
    ScratchScope<float> inner(s);
    s.take({10});
    s.take({2000});
  }
  EXPECT_TRUE(backend.discarded.empty());
}

}  // namespace
}  // namespace perceiver
