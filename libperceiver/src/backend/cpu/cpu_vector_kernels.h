// The vector kernels of cpu_isa.h, written once and compiled once per instruction-set level by
// cpu_isa_{baseline,v3,v4}.cpp, each of which defines PCV_ISA_NAMESPACE before including this.
// Include it nowhere else.
//
// One definition rule: a template or inline function compiled in two translation units with
// different -march flags is the same symbol with different machine code, and the linker keeps
// one copy for both, possibly the AVX-512 one on a CPU without it. So everything here has a
// name of its own per level: our kernels sit in an anonymous namespace, Eigen's namespace is
// renamed per level (the macro below, defined before Eigen is included), and nothing here
// instantiates std templates that live outside the inlined code (no std containers).
// tests/backend/check_isa_symbols.cmake checks the object files for symbols shared by levels.
//
// Determinism: row loops are independent per row; every reduction runs over shape-fixed blocks
// whose partials are combined in a fixed order (cpu_reduce.h), so results do not depend on the
// thread count.
#pragma once

#ifndef PCV_ISA_NAMESPACE
#error "define PCV_ISA_NAMESPACE (isa_baseline, isa_v3, isa_v4) before including cpu_vector_kernels.h"
#endif

#define PCV_ISA_CAT2(a, b) a##b
#define PCV_ISA_CAT(a, b) PCV_ISA_CAT2(a, b)
#define Eigen PCV_ISA_CAT(Eigen_, PCV_ISA_NAMESPACE)

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

#include <Eigen/Core>
#include <unsupported/Eigen/SpecialFunctions>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>
#include <type_traits>

#include "backend/cpu/cpu_bf16_avx512.h"  // bf16x16, bf16x32, denormal_lanes (v4)
#include "backend/cpu/cpu_bf16_round.h"
#include "backend/cpu/cpu_isa.h"
#include "backend/cpu/cpu_reduce.h"
#include "core/cpu_features.h"

namespace perceiver::cpu::PCV_ISA_NAMESPACE {
namespace {

template <class T>
using Column = Eigen::Array<T, Eigen::Dynamic, 1>;
template <class T>
using ConstColumnMap = Eigen::Map<const Column<T>>;

using detail::blocked_rows;
using detail::blocked_sum;
using detail::for_spans;
using detail::kLanes;
using detail::kRun;
using detail::lane_sum;
using detail::parallel_for;

constexpr int64_t kMinParallelElems = 1 << 14;
constexpr int64_t kBlock = 64;  // elements per fixed-size block: a multiple of every packet size
template <class T>
using Block = Eigen::Array<T, kBlock, 1>;

// f(r) for every row r, over the pool where the rows hold more than kMinParallelElems values (the
// fused embedding + LN_kv calls layer_norm_forward on 11-row blocks inside its own region).
template <class F>
void for_rows(int64_t rows, int64_t cols, F f) {
  parallel_for(rows, rows * cols > kMinParallelElems, f);
}

// ---- elementwise and reductions ---------------------------------------------------------------

template <class T>
void add(int64_t n, const T* a, const T* b, T* y) {
  for_spans(n, n > kMinParallelElems, [=](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) y[i] = a[i] + b[i];
  });
}

template <class T>
void axpy(int64_t n, T alpha, const T* x, T* y) {
  for_spans(n, n > kMinParallelElems, [=](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) y[i] += alpha * x[i];
  });
}

template <class T>
void scale(int64_t n, T alpha, T* x) {
  for_spans(n, n > kMinParallelElems, [=](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) x[i] *= alpha;
  });
}

template <class T>
void fill(int64_t n, T value, T* x) {
  for_spans(n, n > kMinParallelElems, [=](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) x[i] = value;
  });
}

// Double terms: these feed the loss and the gradient norm, which callers read to double precision.
template <class T>
double sum(int64_t n, const T* x) {
  return blocked_sum(n, [x](int64_t i) { return double(x[i]); });
}

template <class T>
double sum_squares(int64_t n, const T* x) {
  return blocked_sum(n, [x](int64_t i) { return double(x[i]) * double(x[i]); });
}

template <class T>
void bias_forward(int64_t rows, int64_t cols, const T* bias, T* y) {
  for_rows(rows, cols, [=](int64_t r) {
    for (int64_t c = 0; c < cols; ++c) y[r * cols + c] += bias[c];
  });
}

// Column partials in T over a row block (at most 1/64 of the rows), blocks added in double.
template <class T>
void bias_backward(int64_t rows, int64_t cols, const T* dy, T* dbias) {
  const double* total = blocked_rows<T>(rows, cols, rows * cols > kMinParallelElems,
                                               [=](int64_t r0, int64_t r1, T* part) {
                                                 for (int64_t r = r0; r < r1; ++r)
                                                   for (int64_t c = 0; c < cols; ++c) part[c] += dy[r * cols + c];
                                               });
  for (int64_t c = 0; c < cols; ++c) dbias[c] += T(total[c]);
}

// ---- layer norm ---------------------------------------------------------------------------------

// Mean and biased variance summed in double (lane_sum), elementwise work in T.
template <class T>
void layer_norm_forward(int64_t rows, int64_t cols, const T* x, const T* gamma, const T* beta, double eps, T* y,
                        T* mean, T* rstd) {
  for_rows(rows, cols, [=](int64_t r) {
    const T* xr = x + r * cols;
    const T mu = T(lane_sum(0, cols, [xr](int64_t c) { return xr[c]; }) / double(cols));
    const double var = lane_sum(0, cols, [xr, mu](int64_t c) { return (xr[c] - mu) * (xr[c] - mu); }) / double(cols);
    const T rs = T(1.0 / std::sqrt(var + eps));
    T* yr = y + r * cols;
    for (int64_t c = 0; c < cols; ++c) yr[c] = (xr[c] - mu) * rs * gamma[c] + beta[c];
    mean[r] = mu;
    rstd[r] = rs;
  });
}

// dx += rstd·(g − mean(g) − x̂·mean(g·x̂)) with g = dy·γ (spec §9); dγ += Σ dy·x̂; dβ += Σ dy.
// One pass over the rows: each row block computes its dx rows and its dγ, dβ partials (in T, as
// bias_backward's); the row means are summed in double.
template <class T>
void layer_norm_backward(int64_t rows, int64_t cols, const T* x, const T* gamma, const T* mean, const T* rstd,
                         const T* dy, T* dx, T* dgamma, T* dbeta) {
  const auto block = [=](int64_t r0, int64_t r1, T* part) {
    T* pg = part;         // Σ dy·x̂ per column
    T* pb = part + cols;  // Σ dy per column
    for (int64_t r = r0; r < r1; ++r) {
      const T *xr = x + r * cols, *dyr = dy + r * cols;
      const T mu = mean[r], rs = rstd[r];
      const auto xhat = [=](int64_t c) { return (xr[c] - mu) * rs; };
      const T mean_g = T(lane_sum(0, cols, [=](int64_t c) { return dyr[c] * gamma[c]; }) / double(cols));
      const T mean_gx = T(lane_sum(0, cols, [=](int64_t c) { return dyr[c] * gamma[c] * xhat(c); }) / double(cols));
      T* dxr = dx + r * cols;
      // dx, the partials and the inputs do not overlap; without this GCC keeps the loop scalar.
#pragma omp simd
      for (int64_t c = 0; c < cols; ++c) {
        const T xh = xhat(c);
        dxr[c] += rs * (dyr[c] * gamma[c] - mean_g - xh * mean_gx);
        pg[c] += dyr[c] * xh;
        pb[c] += dyr[c];
      }
    }
  };
  const double* total = blocked_rows<T>(rows, 2 * cols, rows * cols > kMinParallelElems, block);
  for (int64_t c = 0; c < cols; ++c) {
    dgamma[c] += T(total[c]);
    dbeta[c] += T(total[cols + c]);
  }
}

// ---- bf16 rounding ----------------------------------------------------------------------------

void to_bf16_n(int64_t n, const float* x, uint16_t* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = to_bf16(x[i]);
}

// ---- softmax and exp ------------------------------------------------------------------------------

// Calls f(i, m, xb) for the blocks [i, i+m) of x, xb holding the block (zero-padded to kBlock).
// Eigen evaluates an expression on an aligned fixed-size block with packets only; on a Map it
// would peel unaligned elements off with its scalar path (libm's exp, not its own), so results
// would depend on where the buffer happens to start (per-thread scratch, for one). Reductions use
// lane_sum, whose order is set by the indices alone, for the same reason.
// Whole blocks are copied in loops of a fixed count, which the compiler vectorises without
// remainder handling (exp_shifted_to: 0.37 -> 0.30 ns an element on one AVX-512 core).
template <class T, class F>
void for_blocks(int64_t n, const T* x, F f) {
  Block<T> xb;
  int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    for (int64_t j = 0; j < kBlock; ++j) xb[j] = x[i + j];
    f(i, kBlock, xb);
  }
  if (i == n) return;
  const int64_t m = n - i;
  xb.setZero();
  for (int64_t j = 0; j < m; ++j) xb[j] = x[i + j];
  f(i, m, xb);
}

// f(j) for j < m (m ≤ kBlock): the store side of for_blocks, again a loop of a fixed count for a
// whole block.
template <class F>
void each_in_block(int64_t m, F f) {
  if (m == kBlock) {
    for (int64_t j = 0; j < kBlock; ++j) f(j);
  } else {
    for (int64_t j = 0; j < m; ++j) f(j);
  }
}
template <class T>
void store_block(const Block<T>& v, int64_t m, T* y) {
  each_in_block(m, [&](int64_t j) { y[j] = v[j]; });
}

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
// One e^x at two widths (exp16, exp8): the input clamp, log2(e), ln2 in two parts (Cody–Waite)
// and e^r's Taylor coefficients from r⁶ down, for Horner's scheme. Below kLow, just above
// ln(FLT_MIN) = −87.3365, e^x is 0: a result below float's normal range costs a microcode assist
// on Intel cores (the exp of x in [−200, −88] ran at 6.7 ns a value against 0.39 on a Sapphire
// Rapids core: 17x slower, for any row whose scores spread past 87 or that has a −inf mask),
// and the bf16 products treat such values as 0 anyway. kLow itself gives a normal 1.18e-38.
namespace exp_poly {
constexpr float kLow = -87.33f, kHigh = 89.0f, kLog2e = 1.44269504f;
constexpr float kLn2High = 0.693359375f, kLn2Low = -2.12194440e-4f;
constexpr float kTaylor[] = {1.0f / 720, 1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f};
}  // namespace exp_poly
#endif

#if defined(__AVX512F__)
// The lanes of a 16-float vector that hold values when `left` values remain (all from 16 on).
inline __mmask16 lanes_left(int64_t left) { return left >= 16 ? __mmask16(0xffff) : __mmask16((1u << left) - 1); }

// e^x on 16 floats in 14 arithmetic instructions, where Eigen's exp compiles to about 20 (30 in
// all), which AVX-512 issues on two ports: the attention's softmax was bound by them. x = n·ln2 + r
// (Cody–Waite, ln2 in two parts, |r| ≤ ln2/2), e^r by its Taylor polynomial to r⁶ (truncation
// below 2e-7 relative), and VSCALEFPS for 2ⁿ, which gives +inf past float's range and NaN for NaN.
// x is clamped first so that n stays finite (−inf would make r NaN) and no result is a denormal;
// lanes below the clamp are then 0 (kLow). min and max keep NaN as the second operand, and NaN
// is not below kLow.
inline __m512 exp16(__m512 x) {
  using namespace exp_poly;
  const __mmask16 live = _mm512_cmp_ps_mask(x, _mm512_set1_ps(kLow), _CMP_NLT_UQ);
  x = _mm512_min_ps(_mm512_set1_ps(kHigh), _mm512_max_ps(_mm512_set1_ps(kLow), x));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2High), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Low), r);
  __m512 p = _mm512_set1_ps(kTaylor[0]);
  for (int i = 1; i < 7; ++i) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kTaylor[i]));
  return _mm512_maskz_scalef_ps(live, p, n);
}
#endif

#if defined(__AVX2__) && defined(__FMA__) && !defined(__AVX512F__)
#define PCV_EXP8 1
// exp16's e^x on 8 floats for x86-64-v3: the same clamp (lanes below kLow 0), reduction and
// polynomial. AVX2 has no VSCALEFPS, so 2ⁿ is two factors 2^⌊n/2⌋·2^(n−⌊n/2⌋) built in the exponent
// bits: each is a normal float for n in [−126, 128], and their product overflows to +inf as e^x
// does. NaN stays NaN through r. Eigen's exp took about 5 ns an element on a Zen 3 core: a quarter
// of the latent self-attention's forward, and the softmax op at 27% of stream speed.
inline __m256 exp8(__m256 x) {
  using namespace exp_poly;
  const __m256 live = _mm256_cmp_ps(x, _mm256_set1_ps(kLow), _CMP_NLT_UQ);
  x = _mm256_min_ps(_mm256_set1_ps(kHigh), _mm256_max_ps(_mm256_set1_ps(kLow), x));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2High), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Low), r);
  __m256 p = _mm256_set1_ps(kTaylor[0]);
  for (int i = 1; i < 7; ++i) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kTaylor[i]));
  const __m256i ni = _mm256_cvtps_epi32(n), half = _mm256_srai_epi32(ni, 1), bias = _mm256_set1_epi32(127);
  const __m256 lo = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(half, bias), 23));
  const __m256 hi = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(ni, half), bias), 23));
  return _mm256_and_ps(live, _mm256_mul_ps(_mm256_mul_ps(p, lo), hi));
}

// The lanes of an 8-float vector that hold values when `left` values remain, as a maskload mask.
inline __m256i lanes_left8(int64_t left) {
  const __m256i index = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(int(std::min<int64_t>(left, 8))), index);
}

// exp_shifted_to in one pass: each pair of vectors (lanes 0-7 and 8-15 of lane_sum's 16) goes to
// its stores and into the sum, added in lane_sum's order (runs of kRun in float, each run into
// double lanes, then whole vectors, a last partial one's absent lanes as +0, the lanes in order),
// so the sum is the bits lane_sum gives on the stored values.
inline float exp_shifted_to_fused(int64_t n, const float* x, float shift, float* y) {
  static_assert(kLanes == 16, "two 8-float vectors per lane_sum step");
  const __m256 s = _mm256_set1_ps(shift);
  __m256d acc[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()};
  const auto add = [&](__m256 a, __m256 b) {
    acc[0] = _mm256_add_pd(acc[0], _mm256_cvtps_pd(_mm256_castps256_ps128(a)));
    acc[1] = _mm256_add_pd(acc[1], _mm256_cvtps_pd(_mm256_extractf128_ps(a, 1)));
    acc[2] = _mm256_add_pd(acc[2], _mm256_cvtps_pd(_mm256_castps256_ps128(b)));
    acc[3] = _mm256_add_pd(acc[3], _mm256_cvtps_pd(_mm256_extractf128_ps(b, 1)));
  };
  const auto exp_at = [&](int64_t i) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), s));
    _mm256_storeu_ps(y + i, e);
    return e;
  };
  int64_t i = 0;
  for (; i + kRun * kLanes <= n; i += kRun * kLanes) {
    __m256 a = _mm256_setzero_ps(), b = _mm256_setzero_ps();
    for (int v = 0; v < kRun; ++v) {
      a = _mm256_add_ps(a, exp_at(i + v * kLanes));
      b = _mm256_add_ps(b, exp_at(i + v * kLanes + 8));
    }
    add(a, b);
  }
  for (; i + kLanes <= n; i += kLanes) {
    const __m256 a = exp_at(i);
    add(a, exp_at(i + 8));
  }
  __m256 tail[2];
  for (int h = 0; h < 2; ++h, i += 8) {  // the last 0-15 values
    const __m256i m = lanes_left8(std::max<int64_t>(n - i, 0));
    tail[h] = _mm256_and_ps(_mm256_castsi256_ps(m), exp8(_mm256_sub_ps(_mm256_maskload_ps(x + i, m), s)));
    _mm256_maskstore_ps(y + i, m, tail[h]);
  }
  add(tail[0], tail[1]);
  alignas(32) double lanes[kLanes];
  for (int q = 0; q < 4; ++q) _mm256_store_pd(lanes + 4 * q, acc[q]);
  double sum = 0.0;
  for (const double l : lanes) sum += l;
  return float(sum);
}
#endif

// y[i] = e^(x[i] − shift) for i < n (y may be x).
template <class T>
void exp_shifted_values(int64_t n, const T* x, T shift, T* y) {
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, float>) {
    const __m512 s = _mm512_set1_ps(shift);
    for (int64_t i = 0; i < n; i += 16) {
      const __mmask16 m = lanes_left(n - i);
      _mm512_mask_storeu_ps(y + i, m, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), s)));
    }
    return;
  }
#elif defined(PCV_EXP8)
  if constexpr (std::is_same_v<T, float>) {
    const __m256 s = _mm256_set1_ps(shift);
    for (int64_t i = 0; i < n; i += 8) {
      const __m256i m = lanes_left8(n - i);
      _mm256_maskstore_ps(y + i, m, exp8(_mm256_sub_ps(_mm256_maskload_ps(x + i, m), s)));
    }
    return;
  }
#endif
  for_blocks(n, x, [=](int64_t i, int64_t m, const Block<T>& xb) { store_block<T>((xb - shift).exp(), m, y + i); });
}

// y[i] = exp(x[i] − shift) (y may be x); returns Σ y[i].
template <class T>
T exp_shifted_to(int64_t n, const T* x, T shift, T* y) {
#if defined(PCV_EXP8)
  if constexpr (std::is_same_v<T, float>) return exp_shifted_to_fused(n, x, shift, y);
#endif
  exp_shifted_values(n, x, shift, y);
  return T(lane_sum(0, n, [y](int64_t i) { return y[i]; }));
}

template <class T>
T exp_shifted(int64_t n, T shift, T* x) {
  return exp_shifted_to(n, x, shift, x);
}

#if defined(__AVX512F__)
// to_bf16_n with AVX512-BF16's VCVTNE2PS2BF16 where the CPU has it (to_bf16_kernel): 32 values an
// instruction (bf16x32, which redoes groups holding a denormal the integer way), the last ones 16
// at a time (bf16x16_cvt). One Zen 4 core: 0.05-0.08 against 0.09 ns a value with the values in L1
// or L2; the same from memory.
__attribute__((target("avx512bf16"))) inline void to_bf16_n_cvt(int64_t n, const float* x, uint16_t* y) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) _mm512_storeu_si512(y + i, bf16x32(_mm512_loadu_ps(x + i), _mm512_loadu_ps(x + i + 16)));
  for (; i < n; i += 16) {
    const __mmask16 m = lanes_left(n - i);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    _mm256_mask_storeu_epi16(y + i, m, bf16x16_cvt(v));
  }
}

// The rounding of the kernels below that round each vector of results as they make it: bf16x16,
// or with kCvt bf16x16_cvt (AVX512-BF16), the same bits. Their kCvt forms are instantiated only
// inside the `with_cvt` entry points, which carry that target and inline everything (flatten),
// and which table() picks on CPUs that have it. The integer form's nine instructions cost about as
// much as the exp's own arithmetic: on one Sapphire Rapids core, 192 rows of 512 scores in L2,
// exp_shifted_bf16 took 29.5 against 40.8 us and score_grad 18.8 against 22.1 (2026-12-03).
template <bool kCvt>
inline __m256i round16(__m512 v) {
  if constexpr (kCvt) return bf16x16_cvt(v);
  else return bf16x16(v);
}
#define PCV_WITH_BF16_CVT __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16"), flatten))

// lane_sum's 16 double lanes on AVX-512: each vector of float terms widened into them, and their
// total in lane order.
struct DoubleLanes {
  __m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd();
  void add(__m512 v) {
    lo = _mm512_add_pd(lo, _mm512_cvtps_pd(_mm512_castps512_ps256(v)));
    hi = _mm512_add_pd(hi, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))));
  }
  float total() const {
    alignas(64) double lanes[kLanes];
    _mm512_store_pd(lanes, lo);
    _mm512_store_pd(lanes + 8, hi);
    double sum = 0.0;
    for (const double l : lanes) sum += l;
    return float(sum);
  }
};

// exp_shifted_bf16 in one pass over x (the generic form makes three): each vector of values goes
// from the exp to its float and bf16 stores and into the sum, which adds them in lane_sum's order
// (runs of kRun vectors in float, each run into double lanes, a last partial vector's absent lanes
// as +0, the lanes in order), so the sum is the same bits.
template <bool kCvt>
inline float exp_shifted_bf16_fused(int64_t n, const float* x, float shift, float* y, uint16_t* y16) {
  const __m512 s = _mm512_set1_ps(shift);
  DoubleLanes sum;
  int64_t i = 0;
  for (; i + kRun * kLanes <= n; i += kRun * kLanes) {
    __m512 run = _mm512_setzero_ps();
    for (int v = 0; v < kRun; ++v) {
      const __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i + v * kLanes), s));
      _mm512_storeu_ps(y + i + v * kLanes, e);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y16 + i + v * kLanes), round16<kCvt>(e));
      run = _mm512_add_ps(run, e);
    }
    sum.add(run);
  }
  for (; i < n; i += kLanes) {
    const __mmask16 m = lanes_left(n - i);
    const __m512 e = _mm512_maskz_mov_ps(m, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), s)));
    _mm512_mask_storeu_ps(y + i, m, e);
    _mm256_mask_storeu_epi16(y16 + i, m, round16<kCvt>(e));
    sum.add(e);
  }
  return sum.total();
}
#endif

// y[i] = exp(x[i] − shift) (y may be x) and its bf16 rounding y16[i]; returns Σ y[i].
template <class T>
T exp_shifted_bf16(int64_t n, const T* x, T shift, T* y, uint16_t* y16) {
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, float>) return exp_shifted_bf16_fused<false>(n, x, shift, y, y16);
#endif
  exp_shifted_values(n, x, shift, y);
  for (int64_t i = 0; i < n; ++i) y16[i] = to_bf16(float(y[i]));
  return T(lane_sum(0, n, [y](int64_t i) { return y[i]; }));
}

template <class T>
T max(int64_t n, const T* x) {
  return ConstColumnMap<T>(x, n).maxCoeff();
}

#if defined(__AVX512F__)
// score_grad on float data with ds16: each vector rounded as it is made, not in a second pass.
template <bool kCvt>
void score_grad_rounded(int64_t n, const float* p, float delta, float scale, float* ds, uint16_t* ds16) {
  const __m512 dv = _mm512_set1_ps(delta), sv = _mm512_set1_ps(scale);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = lanes_left(n - i);
    const __m512 v = _mm512_mul_ps(
        _mm512_mul_ps(_mm512_maskz_loadu_ps(m, p + i), _mm512_sub_ps(_mm512_maskz_loadu_ps(m, ds + i), dv)), sv);
    _mm512_mask_storeu_ps(ds + i, m, v);
    _mm256_mask_storeu_epi16(ds16 + i, m, round16<kCvt>(v));
  }
}
#endif

template <class T>
void score_grad(int64_t n, const T* p, T delta, T scale, T* ds, uint16_t* ds16) {
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, float>) {
    if (ds16) return score_grad_rounded<false>(n, p, delta, scale, ds, ds16);
  }
#endif
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) ds[i] = p[i] * (ds[i] - delta) * scale;
  if (!ds16) return;
  for (int64_t i = 0; i < n; ++i) ds16[i] = to_bf16(float(ds[i]));
}

template <class T>
void key_dot_terms(int64_t n, const T* p, const T* ds, const T* s, T delta, T inv_scale, T* ks) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) ks[i] += ds[i] * (s[i] + T(1)) * inv_scale + delta * p[i];
}

template <class T>
double dot(int64_t n, const T* w, const T* x) {
  return lane_sum(0, n, [=](int64_t i) { return w[i] * x[i]; });
}

#if defined(__AVX512F__)
// key_sums_row on float data in one pass over the row: P is never stored, and each run's two sums
// follow lane_sum's order from the run's first key (runs of kRun vectors in float, then double
// lanes; a last partial vector's absent lanes as +0; the lanes in order).
template <bool kCvt>
class KeySumsRowFused {
 public:
  explicit KeySumsRowFused(const KeySumsRow<float>& r)
      : r_(r), lse_(_mm512_set1_ps(r.lse)), delta_(_mm512_set1_ps(r.delta)), scale_(_mm512_set1_ps(r.scale)),
        inv_scale_(_mm512_set1_ps(r.inv_scale)) {}

  void run() {
    int64_t j = 0;
    for (int64_t u = 0; u < r_.run_count; ++u) {
      const int64_t j0 = r_.runs[3 * u], j1 = r_.runs[3 * u + 1], g = r_.runs[3 * u + 2];
      if (j < j0) segment(j, j0, nullptr);
      float out[2];
      segment(j0, j1, out);
      r_.sums[g] += out[0];
      r_.sums[r_.groups + g] += out[1];
      j = j1;
    }
    if (j < r_.n) segment(j, r_.n, nullptr);
  }

 private:
  // Keys [i, i + 16) (those in m): dS and the key terms stored; returns P and dS, ±0 off m (P is 0
  // there, so dS is too).
  void values(int64_t i, __mmask16 m, __m512& p, __m512& d) const {
    const __m512 s = _mm512_maskz_loadu_ps(m, r_.s + i);
    p = _mm512_maskz_mov_ps(m, exp16(_mm512_sub_ps(s, lse_)));
    d = _mm512_mul_ps(_mm512_mul_ps(p, _mm512_sub_ps(_mm512_maskz_loadu_ps(m, r_.ds + i), delta_)), scale_);
    _mm512_mask_storeu_ps(r_.ds + i, m, d);
    if (r_.ds16) _mm256_mask_storeu_epi16(r_.ds16 + i, m, round16<kCvt>(d));
    const __m512 term = _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_add_ps(s, _mm512_set1_ps(1.0f))), inv_scale_,
                                        _mm512_mul_ps(delta_, p));
    _mm512_mask_storeu_ps(r_.ks + i, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, r_.ks + i), term));
  }
  // Keys [j0, j1); with `out`, their sums of w·dS and w·P.
  void segment(int64_t j0, int64_t j1, float* out) const {
    DoubleLanes sd, sp;
    __m512 p, d;
    int64_t i = j0;
    for (; i + kRun * kLanes <= j1; i += kRun * kLanes) {
      __m512 rd = _mm512_setzero_ps(), rp = _mm512_setzero_ps();
      for (int v = 0; v < kRun; ++v) {
        values(i + v * kLanes, __mmask16(0xffff), p, d);
        if (!out) continue;
        const __m512 w = _mm512_loadu_ps(r_.w + i + v * kLanes);
        rd = _mm512_add_ps(rd, _mm512_mul_ps(w, d));
        rp = _mm512_add_ps(rp, _mm512_mul_ps(w, p));
      }
      if (out) sd.add(rd), sp.add(rp);
    }
    for (; i < j1; i += kLanes) {
      const __mmask16 m = lanes_left(j1 - i);
      values(i, m, p, d);
      if (!out) continue;
      const __m512 w = _mm512_maskz_loadu_ps(m, r_.w + i);
      sd.add(_mm512_mul_ps(w, d));
      sp.add(_mm512_mul_ps(w, p));
    }
    if (out) out[0] = sd.total(), out[1] = sp.total();
  }

  const KeySumsRow<float>& r_;
  const __m512 lse_, delta_, scale_, inv_scale_;
};
#endif

template <class T>
void key_sums_row(const KeySumsRow<T>& r) {
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, float>) return KeySumsRowFused<false>(r).run();
#endif
  exp_shifted_to(r.n, r.s, r.lse, r.p);
  score_grad(r.n, r.p, r.delta, r.scale, r.ds, r.ds16);
  key_dot_terms(r.n, r.p, r.ds, r.s, r.delta, r.inv_scale, r.ks);
  for (int64_t u = 0; u < r.run_count; ++u) {
    const int64_t j0 = r.runs[3 * u], len = r.runs[3 * u + 1] - j0, g = r.runs[3 * u + 2];
    r.sums[g] += T(dot(len, r.w + j0, r.ds + j0));
    r.sums[r.groups + g] += T(dot(len, r.w + j0, r.p + j0));
  }
}

template <class T>
void softmax_forward(int64_t rows, int64_t cols, const T* x, T* y) {
  for_rows(rows, cols, [=](int64_t r) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    const T total = exp_shifted_to(cols, xr, ConstColumnMap<T>(xr, cols).maxCoeff(), yr);
    // y / total, but 0 where that would fall below the normal range: making a denormal costs a
    // microcode assist on Intel cores, and rows whose scores spread past ~87 have many (the peaked
    // bench_ops row ran 2x slower for them). The divisions see no operand below `tiny`.
    const T tiny = std::numeric_limits<T>::min() * total;
    for (int64_t c = 0; c < cols; ++c) {
      const T v = yr[c], q = std::max(v, tiny) / total;
      yr[c] = v < tiny ? T(0) : q;
    }
  });
}

// dx += y ⊙ (dy − Σ dy ⊙ y), the dot product summed in double.
template <class T>
void softmax_backward(int64_t rows, int64_t cols, const T* y, const T* dy, T* dx) {
  for_rows(rows, cols, [=](int64_t r) {
    const T *yr = y + r * cols, *dyr = dy + r * cols;
    const T dot = T(lane_sum(0, cols, [=](int64_t c) { return yr[c] * dyr[c]; }));
    T* dxr = dx + r * cols;
    for (int64_t c = 0; c < cols; ++c) dxr[c] += yr[c] * (dyr[c] - dot);
  });
}

// ---- GELU (spec §2.1, §9) -------------------------------------------------------------------------

constexpr double kSqrt2OverPi = 0.7978845608028654;  // √(2/π)
constexpr double kGeluCubic = 0.044715;

// Scalar reference, for double (gradient checks): Eigen vectorises erf for float only.
template <class T>
T gelu_value(GeluKind kind, T x) {
  if (kind == GeluKind::kErf) return T(0.5) * x * (T(1) + std::erf(x * T(std::numbers::sqrt2 / 2)));
  const T u = T(kSqrt2OverPi) * (x + T(kGeluCubic) * x * x * x);
  return T(0.5) * x * (T(1) + std::tanh(u));
}

template <class T>
T gelu_derivative(GeluKind kind, T x) {
  if (kind == GeluKind::kErf) {
    const T cdf = T(0.5) * (T(1) + std::erf(x * T(std::numbers::sqrt2 / 2)));
    const T pdf = std::exp(T(-0.5) * x * x) * T(0.5 * std::numbers::inv_sqrtpi * std::numbers::sqrt2);
    return cdf + x * pdf;
  }
  const T u = T(kSqrt2OverPi) * (x + T(kGeluCubic) * x * x * x);
  const T t = std::tanh(u);
  return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * T(kSqrt2OverPi) * (T(1) + T(3 * kGeluCubic) * x * x);
}

// float: Eigen's vectorised erf/tanh/exp (libm's scalar erf was 10-25x slower than PyTorch's
// GELU in bench_ops), block by block (for_blocks says why).
Block<float> gelu_block(GeluKind kind, const Block<float>& x) {
  if (kind == GeluKind::kErf) return 0.5f * x * (1.0f + (x * float(std::numbers::sqrt2 / 2)).erf());
  return 0.5f * x * (1.0f + (float(kSqrt2OverPi) * (x + float(kGeluCubic) * x.cube())).tanh());
}

Block<float> gelu_derivative_block(GeluKind kind, const Block<float>& x) {
  if (kind == GeluKind::kErf) {
    const float inv_sqrt_2pi = float(0.5 * std::numbers::inv_sqrtpi * std::numbers::sqrt2);
    return 0.5f * (1.0f + (x * float(std::numbers::sqrt2 / 2)).erf()) + x * (-0.5f * x.square()).exp() * inv_sqrt_2pi;
  }
  const Block<float> t = (float(kSqrt2OverPi) * (x + float(kGeluCubic) * x.cube())).tanh();
  return 0.5f * (1.0f + t) +
         0.5f * x * (1.0f - t.square()) * float(kSqrt2OverPi) * (1.0f + float(3 * kGeluCubic) * x.square());
}

template <class T>
void gelu_forward(GeluKind kind, int64_t n, const T* x, T* y) {
  for_spans(n, n > kMinParallelElems, [=](int64_t c, int64_t end) {
    if constexpr (std::is_same_v<T, float>) {
      for_blocks(end - c, x + c, [=](int64_t i, int64_t k, const Block<float>& xb) {
        store_block<float>(gelu_block(kind, xb), k, y + c + i);
      });
    } else {
      for (int64_t i = c; i < end; ++i) y[i] = gelu_value(kind, x[i]);
    }
  });
}

template <class T>
void gelu_backward(GeluKind kind, int64_t n, const T* x, const T* dy, T* dx) {
  for_spans(n, n > kMinParallelElems, [=](int64_t c, int64_t end) {
    if constexpr (std::is_same_v<T, float>) {
      for_blocks(end - c, x + c, [=](int64_t i, int64_t k, const Block<float>& xb) {
        const Block<float> d = gelu_derivative_block(kind, xb);
        const float* g = dy + c + i;
        float* out = dx + c + i;
        each_in_block(k, [&](int64_t j) { out[j] += g[j] * d[j]; });
      });
    } else {
      for (int64_t i = c; i < end; ++i) dx[i] += dy[i] * gelu_derivative(kind, x[i]);
    }
  });
}

// The level's to_bf16: VCVTNE2PS2BF16 at v4 where the CPU also has AVX512-BF16 (Zen 4, Cooper
// Lake, Sapphire Rapids; not Skylake-X or Ice Lake), the integer form elsewhere. The same bits.
using ToBf16 = void (*)(int64_t, const float*, uint16_t*);
inline ToBf16 to_bf16_kernel() {
#if defined(__AVX512F__)
  if (host_cpu_features().avx512_bf16) return to_bf16_n_cvt;
#endif
  return to_bf16_n;
}

#if defined(__AVX512F__)
// The kernels that round as they go, in their forms with VCVTNEPS2BF16 (round16).
PCV_WITH_BF16_CVT float exp_shifted_bf16_with_cvt(int64_t n, const float* x, float shift, float* y, uint16_t* y16) {
  return exp_shifted_bf16_fused<true>(n, x, shift, y, y16);
}
PCV_WITH_BF16_CVT void score_grad_with_cvt(int64_t n, const float* p, float delta, float scale, float* ds,
                                           uint16_t* ds16) {
  if (!ds16) return score_grad<float>(n, p, delta, scale, ds, ds16);
  score_grad_rounded<true>(n, p, delta, scale, ds, ds16);
}
PCV_WITH_BF16_CVT void key_sums_row_with_cvt(const KeySumsRow<float>& r) { KeySumsRowFused<true>(r).run(); }
#undef PCV_WITH_BF16_CVT
#endif

// The level's kernels that round to bf16 as they go, each one its `with_cvt` form at v4 where the
// CPU has AVX512-BF16 (as to_bf16_kernel): the same bits.
template <class T>
void pick_rounding_kernels(VectorKernels<T>& k) {
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, float>) {
    if (!host_cpu_features().avx512_bf16) return;
    k.exp_shifted_bf16 = exp_shifted_bf16_with_cvt;
    k.score_grad = score_grad_with_cvt;
    k.key_sums_row = key_sums_row_with_cvt;
  }
#endif
  (void)k;
}

}  // namespace

template <class T>
VectorKernels<T> table() {
  VectorKernels<T> k{.add = add<T>,
          .axpy = axpy<T>,
          .scale = scale<T>,
          .fill = fill<T>,
          .sum = sum<T>,
          .sum_squares = sum_squares<T>,
          .bias_forward = bias_forward<T>,
          .bias_backward = bias_backward<T>,
          .layer_norm_forward = layer_norm_forward<T>,
          .layer_norm_backward = layer_norm_backward<T>,
          .softmax_forward = softmax_forward<T>,
          .softmax_backward = softmax_backward<T>,
          .gelu_forward = gelu_forward<T>,
          .gelu_backward = gelu_backward<T>,
          .exp_shifted = exp_shifted<T>,
          .exp_shifted_to = exp_shifted_to<T>,
          .to_bf16 = to_bf16_kernel(),
          .max = max<T>,
          .exp_shifted_bf16 = exp_shifted_bf16<T>,
          .score_grad = score_grad<T>,
          .key_dot_terms = key_dot_terms<T>,
          .dot = dot<T>,
          .key_sums_row = key_sums_row<T>};
  pick_rounding_kernels(k);
  return k;
}
template VectorKernels<float> table<float>();
template VectorKernels<double> table<double>();

}  // namespace perceiver::cpu::PCV_ISA_NAMESPACE
