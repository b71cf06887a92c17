// float32 products through oneDNN's matmul (cpu_dnnl.h): every transpose, alpha, beta and leading
// dimension against a double reference; the backend's GEMM takes that path on CPUs with its JIT
// kernels and OpenBLAS for thin products.
#include <gtest/gtest.h>

#include <cblas.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_bf16.h"
#include "backend/cpu/cpu_dnnl.h"
#include "backend/cpu/cpu_isa.h"
#include "backend/cpu/cpu_kernels.h"
#include "perceiver/error.h"
#include "random_vec.h"

namespace perceiver::cpu {
namespace {

#define REQUIRE_DNNL() \
  if (dnnl_isa().empty()) GTEST_SKIP() << "this build has no oneDNN"

float at(const std::vector<float>& x, Transpose t, int64_t ld, int64_t r, int64_t c) {
  return t == Transpose::kNo ? x[size_t(r * ld + c)] : x[size_t(c * ld + r)];
}

TEST(CpuDnnl, Float32MatchesADoubleReference) {
  REQUIRE_DNNL();
  if (dnnl_isa().rfind("avx512", 0) != 0) GTEST_SKIP() << "oneDNN's float32 brgemm needs AVX-512 (" << dnnl_isa() << ")";
  const int64_t m = 37, n = 45, k = 70;
  int ran = 0;
  for (const int64_t pad : {0, 3})
  for (Transpose ta : {Transpose::kNo, Transpose::kYes})
    for (Transpose tb : {Transpose::kNo, Transpose::kYes})
      for (auto [alpha, beta] : {std::pair{1.0f, 0.0f}, {0.5f, 0.0f}, {1.0f, 1.0f}, {-2.0f, 0.25f}}) {
        const int64_t lda = (ta == Transpose::kNo ? k : m) + pad, ldb = (tb == Transpose::kNo ? n : k) + pad;
        const int64_t ldc = n + pad;
        const auto a = random_vec((ta == Transpose::kNo ? m : k) * lda, 1);
        const auto b = random_vec((tb == Transpose::kNo ? k : n) * ldb, 2);
        const auto c0 = random_vec(m * ldc, 3);
        std::vector<float> c = c0;
        if (!dnnl_matmul(MatmulInputs::kFloat32, ta, tb, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta,
                         c.data(), ldc)) {  // declined (oneDNN's own sgemm): C untouched
          ASSERT_EQ(c, c0);
          continue;
        }
        ++ran;
        double worst = 0;
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < ldc; ++j) {
            const float got = c[size_t(i * ldc + j)];
            if (j >= n) {  // the padding is not written
              ASSERT_EQ(got, c0[size_t(i * ldc + j)]) << i << "," << j;
              continue;
            }
            double want = beta * double(c0[size_t(i * ldc + j)]);
            for (int64_t p = 0; p < k; ++p) want += alpha * double(at(a, ta, lda, i, p)) * at(b, tb, ldb, p, j);
            worst = std::max(worst, std::abs(got - want));
          }
        EXPECT_LT(worst, 1e-4) << "ta " << int(ta) << " tb " << int(tb) << " alpha " << alpha << " beta " << beta;
      }
  EXPECT_GT(ran, 0) << "oneDNN declined every float32 combination";
}

// The backend's float32 GEMM is oneDNN's wherever dnnl_float32_products() (bitwise the same as a
// direct call), and OpenBLAS's for a thin product (the pixel postprocessor's N = 3). Which kernels
// run where: test_cpu_sgemm.cpp.
TEST(CpuDnnl, BackendGemmTakesTheChosenPath) {
  REQUIRE_DNNL();
  const std::string isa = dnnl_isa();
  const char* env = std::getenv("PERCEIVER_CPU_GEMM");
  const std::string asked = env ? env : "";
  EXPECT_EQ(dnnl_float32_products(),
            asked == "onednn" || (asked.empty() && active_isa() == Isa::kV4 && isa.rfind("avx512", 0) == 0))
      << isa;
  if (!dnnl_float32_products()) GTEST_SKIP() << "the float32 products run on other kernels here";
  for (const int64_t n : {int64_t(96), int64_t(3)}) {
    const int64_t m = 128, k = 64;
    const auto a = random_vec(m * k, 4), b = random_vec(n * k, 5);
    std::vector<float> got(size_t(m * n)), want(size_t(m * n));
    gemm_serial<float>(Transpose::kNo, Transpose::kYes, m, n, k, 1.0f, a.data(), k, b.data(), k, 0.0f, got.data(), n);
    const bool by_dnnl = n >= 16 && dnnl_matmul(MatmulInputs::kFloat32, Transpose::kNo, Transpose::kYes, m, n, k, 1.0f,
                                                a.data(), k, b.data(), k, 0.0f, want.data(), n);
    if (!by_dnnl)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(m), int(n), int(k), 1.0f, a.data(), int(k), b.data(),
                  int(k), 0.0f, want.data(), int(n));
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float))) << "n " << n;
  }
}

// oneDNN 2.6's own JIT sgemm points the stack register at a heap buffer (oneDNN issue #4845), so
// a signal handled during it writes its frame into the heap: the trainer's SIGTERM stop then
// aborted in glibc ("corrupted size vs. prev_size") in about 3 of 20 runs. Here a timer signal with
// a handler hits this thread every 20 us while products that oneDNN gives to that sgemm and others
// run, float32 and bf16 (the tiny trainer model's shapes), with the heap in use around them;
// a corrupted heap aborts the test at the next free.
void on_timer(int) {}

TEST(CpuDnnl, SignalsDuringProductsLeaveTheHeapIntact) {
  REQUIRE_DNNL();
  struct sigaction action {}, saved {};
  action.sa_handler = on_timer;
  sigemptyset(&action.sa_mask);
  ASSERT_EQ(0, sigaction(SIGRTMIN, &action, &saved));
  sigevent event{};
  event.sigev_notify = SIGEV_THREAD_ID;
  event.sigev_signo = SIGRTMIN;
  event._sigev_un._tid = int(gettid());  // glibc 2.36 has no sigev_notify_thread_id
  timer_t timer;
  ASSERT_EQ(0, timer_create(CLOCK_MONOTONIC, &event, &timer));
  const itimerspec every_20us{{0, 20000}, {0, 20000}};
  ASSERT_EQ(0, timer_settime(timer, 0, &every_20us, nullptr));
  // oneDNN 2.6 gives float32 products whose rows are padded (a leading dimension above the row's
  // length, as for a view into a wider tensor) to its sgemm, dense ones to brgemm.
  struct Shape { Transpose ta, tb; int64_t m, n, k, pad; float alpha, beta; };
  const Shape shapes[] = {{Transpose::kNo, Transpose::kYes, 126, 64, 139, 0, 0.125f, 0.0f},
                          {Transpose::kYes, Transpose::kNo, 64, 139, 126, 3, 1.0f, 1.0f},
                          {Transpose::kNo, Transpose::kNo, 126, 64, 139, 3, 1.0f, 1.0f},
                          {Transpose::kNo, Transpose::kYes, 139, 16, 16, 0, 1.0f, 0.0f},
                          {Transpose::kNo, Transpose::kYes, 256, 200, 200, 0, 1.0f, 0.0f}};
  const auto a = random_vec(260 * 260, 6), b = random_vec(260 * 260, 7);
  const std::vector<uint16_t> a16(a.size(), 0x3f80), b16(b.size(), 0x3f80);  // bf16 ones
  std::vector<float> c(260 * 260);
  const bool bf16 = !bf16_products_isa().empty();  // where --precision bf16 runs
  int64_t ran = 0, declined = 0;
  for (int round = 0; round < 400; ++round)
    for (const Shape& s : shapes) {
      std::vector<float> neighbour(size_t(1 + round % 7) * 1000, 1.0f);  // heap traffic around the product
      const int64_t lda = (s.ta == Transpose::kNo ? s.k : s.m) + s.pad;
      const int64_t ldb = (s.tb == Transpose::kNo ? s.n : s.k) + s.pad, ldc = s.n + s.pad;
      declined += !dnnl_matmul(MatmulInputs::kFloat32, s.ta, s.tb, s.m, s.n, s.k, s.alpha, a.data(), lda, b.data(),
                               ldb, s.beta, c.data(), ldc);
      if (!bf16) continue;
      ran += dnnl_matmul(MatmulInputs::kBf16, s.ta, s.tb, s.m, s.n, s.k, s.alpha, a16.data(), lda, b16.data(), ldb,
                         0.0f, c.data(), ldc);
      ASSERT_EQ(c[0], s.alpha * float(s.k));  // the bf16 product of ones
    }
  timer_delete(timer);
  sigaction(SIGRTMIN, &saved, nullptr);
  EXPECT_EQ(ran, bf16 ? 400 * 5 : 0) << "the bf16 products all run";
  EXPECT_GT(declined, 0) << "no float32 shape here goes to oneDNN's sgemm any more: pick one that does";
}

}  // namespace
}  // namespace perceiver::cpu
