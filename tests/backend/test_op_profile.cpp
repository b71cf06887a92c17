// The op profiler (backend/profile/op_profile.h): the timed table computes exactly what the table
// it wraps computes, keeps a slot null where that table has none, and sums each call's time
// under its op and shape.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend/cpu/cpu_bf16.h"
#include "backend/cpu/cpu_kernels.h"
#include "backend/profile/op_profile.h"

namespace perceiver {
namespace {

// The CPU's table, each call "taking" 1.5 ms, so the sums are exact.
struct FixedTimer {
  static constexpr const char* kTitle = "test profile";
  static const KernelTable<float>& inner() { return cpu::kernel_table<float>(); }
  template <class F>
  static double time(void*, F&& call) {
    call();
    return 1.5;
  }
};

std::vector<float> ramp(size_t n, float step) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = std::sin(step * float(i + 1));
  return v;
}

const profile::OpTotals::Total* find(const std::vector<profile::OpTotals::Total>& rows, const std::string& key) {
  for (const auto& r : rows)
    if (r.key == key) return &r;
  return nullptr;
}

TEST(OpProfile, TimedTableComputesWhatItWrapsAndSumsByShape) {
  const KernelTable<float> timed = profile::timed_table<FixedTimer>();
  const KernelTable<float>& plain = cpu::kernel_table<float>();
  check_complete(timed, "timed cpu");

  const std::vector<float> a = ramp(3 * 5, 0.3f), b = ramp(5 * 4, 0.7f);
  std::vector<float> c_timed(3 * 4, 0.f), c_plain(3 * 4, 0.f);
  for (int i = 0; i < 2; ++i) {
    timed.gemm(nullptr, Transpose::kNo, Transpose::kNo, 3, 4, 5, 1.f, a.data(), 5, b.data(), 4, 1.f, c_timed.data(), 4);
    plain.gemm(nullptr, Transpose::kNo, Transpose::kNo, 3, 4, 5, 1.f, a.data(), 5, b.data(), 4, 1.f, c_plain.data(), 4);
  }
  EXPECT_EQ(c_timed, c_plain);

  const std::vector<float> x = ramp(6 * 8, 0.11f), gamma = ramp(8, 0.5f), beta = ramp(8, 0.9f);
  std::vector<float> y1(48), y2(48), m1(6), m2(6), r1(6), r2(6);
  timed.layer_norm_forward(nullptr, 6, 8, x.data(), gamma.data(), beta.data(), 1e-5, y1.data(), m1.data(), r1.data());
  plain.layer_norm_forward(nullptr, 6, 8, x.data(), gamma.data(), beta.data(), 1e-5, y2.data(), m2.data(), r2.data());
  EXPECT_EQ(y1, y2);
  EXPECT_EQ(r1, r2);

  AttentionDims d;
  d.batch = 1, d.heads = 2, d.nq = 3, d.nk = 4, d.dqk = 2, d.dv = 2, d.scale = 0.5, d.kv_chunk = 2;
  const std::vector<float> q = ramp(3 * 4, 0.2f), k = ramp(4 * 4, 0.4f), v = ramp(4 * 4, 0.6f);
  std::vector<float> o1(12), o2(12), s1(6), s2(6);
  timed.attention_forward(nullptr, d, q.data(), k.data(), v.data(), o1.data(), s1.data());
  plain.attention_forward(nullptr, d, q.data(), k.data(), v.data(), o2.data(), s2.data());
  EXPECT_EQ(o1, o2);
  EXPECT_EQ(s1, s2);

  double sum = 0;
  timed.sum(nullptr, 48, x.data(), &sum);
  double expect = 0;
  plain.sum(nullptr, 48, x.data(), &expect);
  EXPECT_EQ(sum, expect);

  const auto rows = profile::totals<FixedTimer>().rows();
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0].key, "gemm NN m=3 n=4 k=5");  // the largest total first
  EXPECT_EQ(rows[0].calls, 2);
  EXPECT_DOUBLE_EQ(rows[0].ms, 3.0);
  const auto* ln = find(rows, "layer_norm_forward 6x8");
  const auto* att = find(rows, "attention_forward B=1 H=2 nq=3 nk=4 streamed");
  const auto* s = find(rows, "sum");
  ASSERT_TRUE(ln && att && s);
  EXPECT_EQ(ln->calls, 1);
  EXPECT_DOUBLE_EQ(att->ms, 1.5);
}

// The optional bf16 storage ops are wrapped where the inner table has them, and stay null where
// it has none (a null slot is how a table says it lacks them).
struct Bf16Timer : FixedTimer {
  static const KernelTable<float>& inner() { return cpu::kernel_table_bf16(); }
};

TEST(OpProfile, OptionalOpsFollowTheInnerTable) {
  const KernelTable<float> fp32 = profile::timed_table<FixedTimer>();
  EXPECT_EQ(fp32.store_bf16, nullptr);
  EXPECT_EQ(fp32.gemm_stored_bf16, nullptr);
  const KernelTable<float> bf16 = profile::timed_table<Bf16Timer>();
  EXPECT_NE(bf16.store_bf16, nullptr);
  EXPECT_NE(bf16.load_bf16, nullptr);
  EXPECT_NE(bf16.gemm_stored_bf16, nullptr);
  EXPECT_NE(bf16.gemm, cpu::kernel_table_bf16().gemm);  // wrapped, not copied
}

}  // namespace
}  // namespace perceiver
