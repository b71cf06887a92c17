// Elementwise ops, bias, reductions, layer norm, softmax and GELU on CPU.
// Rows are independent, so row loops run in parallel; column sums use cpu_reduce.h.
#include <cmath>
#include <numbers>
#include <type_traits>

#include <Eigen/Core>
#include <unsupported/Eigen/SpecialFunctions>

#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_reduce.h"

namespace perceiver::cpu {
namespace {

template <class T>
using RowVec = Eigen::Map<Eigen::Array<T, 1, Eigen::Dynamic>>;
template <class T>
using ConstRowVec = Eigen::Map<const Eigen::Array<T, 1, Eigen::Dynamic>>;

constexpr int64_t kMinParallelElems = 1 << 14;

}  // namespace

template <class T>
void add(int64_t n, const T* a, const T* b, T* y) {
#pragma omp parallel for schedule(static) if (n > kMinParallelElems)
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

template <class T>
void axpy(int64_t n, T alpha, const T* x, T* y) {
#pragma omp parallel for schedule(static) if (n > kMinParallelElems)
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

template <class T>
void scale(int64_t n, T alpha, T* x) {
#pragma omp parallel for schedule(static) if (n > kMinParallelElems)
  for (int64_t i = 0; i < n; ++i) x[i] *= alpha;
}

template <class T>
void fill(int64_t n, T value, T* x) {
#pragma omp parallel for schedule(static) if (n > kMinParallelElems)
  for (int64_t i = 0; i < n; ++i) x[i] = value;
}

template <class T>
double sum(int64_t n, const T* x) {
  return detail::blocked_sum(n, [&](int64_t i) { return double(x[i]); });
}

template <class T>
double sum_squares(int64_t n, const T* x) {
  return detail::blocked_sum(n, [&](int64_t i) { return double(x[i]) * double(x[i]); });
}

template <class T>
void bias_forward(int64_t rows, int64_t cols, const T* bias, T* y) {
  ConstRowVec<T> b(bias, cols);
#pragma omp parallel for schedule(static) if (rows * cols > kMinParallelElems)
  for (int64_t r = 0; r < rows; ++r) RowVec<T>(y + r * cols, cols) += b;
}

template <class T>
void bias_backward(int64_t rows, int64_t cols, const T* dy, T* dbias) {
  detail::blocked_column_sum(rows, cols, [&](int64_t r, int64_t c) { return double(dy[r * cols + c]); },
                             dbias);
}

// Layer norm: mean and biased variance accumulated in double, stored as T.
template <class T>
void layer_norm_forward(int64_t rows, int64_t cols, const T* x, const T* gamma, const T* beta,
                        double eps, T* y, T* mean, T* rstd) {
#pragma omp parallel for schedule(static) if (rows * cols > kMinParallelElems)
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * cols;
    double s = 0.0;
    for (int64_t c = 0; c < cols; ++c) s += xr[c];
    const double mu = s / double(cols);
    double v = 0.0;
    for (int64_t c = 0; c < cols; ++c) v += (xr[c] - mu) * (xr[c] - mu);
    const double rs = 1.0 / std::sqrt(v / double(cols) + eps);
    T* yr = y + r * cols;
    for (int64_t c = 0; c < cols; ++c) yr[c] = T((xr[c] - mu) * rs) * gamma[c] + beta[c];
    mean[r] = T(mu);
    rstd[r] = T(rs);
  }
}

// dx = rstd·(g − mean(g) − x̂·mean(g·x̂)) with g = dy·γ (spec §9); dγ += Σ dy·x̂; dβ += Σ dy.
template <class T>
void layer_norm_backward(int64_t rows, int64_t cols, const T* x, const T* gamma, const T* mean,
                         const T* rstd, const T* dy, T* dx, T* dgamma, T* dbeta) {
#pragma omp parallel for schedule(static) if (rows * cols > kMinParallelElems)
  for (int64_t r = 0; r < rows; ++r) {
    const T *xr = x + r * cols, *dyr = dy + r * cols;
    const double mu = mean[r], rs = rstd[r];
    double mean_g = 0.0, mean_gx = 0.0;
    for (int64_t c = 0; c < cols; ++c) {
      const double g = double(dyr[c]) * gamma[c], xh = (xr[c] - mu) * rs;
      mean_g += g;
      mean_gx += g * xh;
    }
    mean_g /= double(cols);
    mean_gx /= double(cols);
    T* dxr = dx + r * cols;
    for (int64_t c = 0; c < cols; ++c) {
      const double g = double(dyr[c]) * gamma[c], xh = (xr[c] - mu) * rs;
      dxr[c] += T(rs * (g - mean_g - xh * mean_gx));
    }
  }
  detail::blocked_column_sum(
      rows, cols,
      [&](int64_t r, int64_t c) { return double(dy[r * cols + c]) * ((x[r * cols + c] - double(mean[r])) * double(rstd[r])); },
      dgamma);
  bias_backward(rows, cols, dy, dbeta);
}

template <class T>
void softmax_forward(int64_t rows, int64_t cols, const T* x, T* y) {
#pragma omp parallel for schedule(static) if (rows * cols > kMinParallelElems)
  for (int64_t r = 0; r < rows; ++r) {
    ConstRowVec<T> xr(x + r * cols, cols);
    RowVec<T> yr(y + r * cols, cols);
    yr = (xr - xr.maxCoeff()).exp();
    yr /= yr.sum();
  }
}

template <class T>
void softmax_backward(int64_t rows, int64_t cols, const T* y, const T* dy, T* dx) {
#pragma omp parallel for schedule(static) if (rows * cols > kMinParallelElems)
  for (int64_t r = 0; r < rows; ++r) {
    ConstRowVec<T> yr(y + r * cols, cols), dyr(dy + r * cols, cols);
    const T dot = (yr * dyr).sum();
    RowVec<T>(dx + r * cols, cols) += yr * (dyr - dot);
  }
}

// GELU, both flavours (spec §2.1, §9).
namespace {
constexpr double kSqrt2OverPi = 0.7978845608028654;  // √(2/π)
constexpr double kGeluCubic = 0.044715;

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
  return T(0.5) * (T(1) + t) +
         T(0.5) * x * (T(1) - t * t) * T(kSqrt2OverPi) * (T(1) + T(3 * kGeluCubic) * x * x);
}
}  // namespace

// float: Eigen's vectorised erf/tanh/exp, in fixed chunks (libm's scalar erf was 10-25x slower
// than PyTorch's GELU, bench_ops). double (gradient checks) keeps the scalar reference above.
namespace {
constexpr int64_t kGeluChunk = 4096;
using FloatArray = Eigen::Array<float, Eigen::Dynamic, 1>;

void gelu_forward_chunk(GeluKind kind, int64_t n, const float* xp, float* yp) {
  Eigen::Map<const FloatArray> x(xp, n);
  Eigen::Map<FloatArray> y(yp, n);
  if (kind == GeluKind::kErf) {
    y = 0.5f * x * (1.0f + (x * float(std::numbers::sqrt2 / 2)).erf());
  } else {
    y = 0.5f * x * (1.0f + (float(kSqrt2OverPi) * (x + float(kGeluCubic) * x.cube())).tanh());
  }
}

void gelu_backward_chunk(GeluKind kind, int64_t n, const float* xp, const float* dyp, float* dxp) {
  Eigen::Map<const FloatArray> x(xp, n), dy(dyp, n);
  Eigen::Map<FloatArray> dx(dxp, n);
  if (kind == GeluKind::kErf) {
    const float inv_sqrt_2pi = float(0.5 * std::numbers::inv_sqrtpi * std::numbers::sqrt2);
    dx += dy * (0.5f * (1.0f + (x * float(std::numbers::sqrt2 / 2)).erf()) + x * (-0.5f * x.square()).exp() * inv_sqrt_2pi);
  } else {
    const FloatArray t = (float(kSqrt2OverPi) * (x + float(kGeluCubic) * x.cube())).tanh();
    dx += dy * (0.5f * (1.0f + t) +
                0.5f * x * (1.0f - t.square()) * float(kSqrt2OverPi) * (1.0f + float(3 * kGeluCubic) * x.square()));
  }
}
}  // namespace

template <class T>
void gelu_forward(GeluKind kind, int64_t n, const T* x, T* y) {
  if constexpr (std::is_same_v<T, float>) {
    const int64_t chunks = (n + kGeluChunk - 1) / kGeluChunk;
#pragma omp parallel for schedule(static) if (n > kMinParallelElems)
    for (int64_t c = 0; c < chunks; ++c)
      gelu_forward_chunk(kind, std::min(kGeluChunk, n - c * kGeluChunk), x + c * kGeluChunk, y + c * kGeluChunk);
  } else {
#pragma omp parallel for schedule(static) if (n > kMinParallelElems)
    for (int64_t i = 0; i < n; ++i) y[i] = gelu_value(kind, x[i]);
  }
}

template <class T>
void gelu_backward(GeluKind kind, int64_t n, const T* x, const T* dy, T* dx) {
  if constexpr (std::is_same_v<T, float>) {
    const int64_t chunks = (n + kGeluChunk - 1) / kGeluChunk;
#pragma omp parallel for schedule(static) if (n > kMinParallelElems)
    for (int64_t c = 0; c < chunks; ++c)
      gelu_backward_chunk(kind, std::min(kGeluChunk, n - c * kGeluChunk), x + c * kGeluChunk, dy + c * kGeluChunk,
                          dx + c * kGeluChunk);
  } else {
#pragma omp parallel for schedule(static) if (n > kMinParallelElems)
    for (int64_t i = 0; i < n; ++i) dx[i] += dy[i] * gelu_derivative(kind, x[i]);
  }
}

#define PCV_INSTANTIATE(T)                                                                        \
  template void add<T>(int64_t, const T*, const T*, T*);                                          \
  template void axpy<T>(int64_t, T, const T*, T*);                                                \
  template void scale<T>(int64_t, T, T*);                                                         \
  template void fill<T>(int64_t, T, T*);                                                         \
  template double sum<T>(int64_t, const T*);                                                      \
  template double sum_squares<T>(int64_t, const T*);                                              \
  template void bias_forward<T>(int64_t, int64_t, const T*, T*);                                  \
  template void bias_backward<T>(int64_t, int64_t, const T*, T*);                                 \
  template void layer_norm_forward<T>(int64_t, int64_t, const T*, const T*, const T*, double, T*, \
                                      T*, T*);                                                    \
  template void layer_norm_backward<T>(int64_t, int64_t, const T*, const T*, const T*, const T*,  \
                                       const T*, T*, T*, T*);                                     \
  template void softmax_forward<T>(int64_t, int64_t, const T*, T*);                               \
  template void softmax_backward<T>(int64_t, int64_t, const T*, const T*, T*);                    \
  template void gelu_forward<T>(GeluKind, int64_t, const T*, T*);                                 \
  template void gelu_backward<T>(GeluKind, int64_t, const T*, const T*, T*);
PCV_INSTANTIATE(float)
PCV_INSTANTIATE(double)
#undef PCV_INSTANTIATE

}  // namespace perceiver::cpu
