// Losses on CPU: L1 and MSE (mean over elements) and softmax cross-entropy (mean over rows).
// Backward kernels add weight · d(loss)/d(pred) into dpred (spec §9, "Losses").
#include <cmath>

#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_parallel.h"
#include "backend/cpu/cpu_reduce.h"
#include "perceiver/error.h"

namespace perceiver::cpu {

template <class T>
double l1_forward(int64_t n, const T* pred, const T* target) {
  PCV_CHECK(n > 0, "L1 loss over zero elements");
  return detail::blocked_sum(n, [&](int64_t i) { return std::abs(double(pred[i]) - double(target[i])); }) /
         double(n);
}

// sign(0) = 0, as torch.
template <class T>
void l1_backward(int64_t n, const T* pred, const T* target, double weight, T* dpred) {
  const T g = T(weight / double(n));
  detail::for_spans(n, n > (1 << 14), [=](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const T d = pred[i] - target[i];
      dpred[i] += d > T(0) ? g : (d < T(0) ? -g : T(0));
    }
  });
}

template <class T>
double mse_forward(int64_t n, const T* pred, const T* target) {
  PCV_CHECK(n > 0, "MSE loss over zero elements");
  return detail::blocked_sum(n, [&](int64_t i) {
           const double d = double(pred[i]) - double(target[i]);
           return d * d;
         }) /
         double(n);
}

template <class T>
void mse_backward(int64_t n, const T* pred, const T* target, double weight, T* dpred) {
  const T g = T(2.0 * weight / double(n));
  detail::for_spans(n, n > (1 << 14), [=](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) dpred[i] += g * (pred[i] - target[i]);
  });
}

namespace {
template <class T>
double row_logsumexp(int64_t cols, const T* x) {
  double m = x[0];
  for (int64_t c = 1; c < cols; ++c) m = std::max(m, double(x[c]));
  double s = 0.0;
  for (int64_t c = 0; c < cols; ++c) s += std::exp(double(x[c]) - m);
  return m + std::log(s);
}

void check_label(int64_t label, int64_t cols, int64_t row) {
  PCV_CHECK(label >= 0 && label < cols, "label ", label, " of example ", row,
            " is outside [0, ", cols, ")");
}
}  // namespace

template <class T>
double softmax_ce_forward(int64_t rows, int64_t cols, const T* logits, const int64_t* labels) {
  PCV_CHECK(rows > 0 && cols > 0, "cross-entropy over an empty batch");
  double total = 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    check_label(labels[r], cols, r);
    total += row_logsumexp(cols, logits + r * cols) - double(logits[r * cols + labels[r]]);
  }
  return total / double(rows);
}

// d/dlogits = (softmax − onehot) / rows · weight.
template <class T>
void softmax_ce_backward(int64_t rows, int64_t cols, const T* logits, const int64_t* labels,
                         double weight, T* dlogits) {
  const double g = weight / double(rows);
  for (int64_t r = 0; r < rows; ++r) {
    check_label(labels[r], cols, r);
    const T* x = logits + r * cols;
    const double lse = row_logsumexp(cols, x);
    for (int64_t c = 0; c < cols; ++c)
      dlogits[r * cols + c] += T(g * (std::exp(double(x[c]) - lse) - (c == labels[r] ? 1.0 : 0.0)));
  }
}

#define PCV_INSTANTIATE(T)                                                                       \
  template double l1_forward<T>(int64_t, const T*, const T*);                                    \
  template void l1_backward<T>(int64_t, const T*, const T*, double, T*);                         \
  template double mse_forward<T>(int64_t, const T*, const T*);                                   \
  template void mse_backward<T>(int64_t, const T*, const T*, double, T*);                        \
  template double softmax_ce_forward<T>(int64_t, int64_t, const T*, const int64_t*);             \
  template void softmax_ce_backward<T>(int64_t, int64_t, const T*, const int64_t*, double, T*);
PCV_INSTANTIATE(float)
PCV_INSTANTIATE(double)
#undef PCV_INSTANTIATE

}  // namespace perceiver::cpu
