// Elementwise ops, reductions, bias, layer norm, softmax and GELU on CPU: the kernel-table entry
// points, which run the vector kernels of the instruction-set level chosen at start-up
// (cpu_isa.h; the kernels themselves are in cpu_vector_kernels.h).
#include "backend/cpu/cpu_isa.h"
#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_reduce.h"

namespace perceiver::cpu {

template <class T>
void add(int64_t n, const T* a, const T* b, T* y) {
  vector_kernels<T>().add(n, a, b, y);
}

template <class T>
void axpy(int64_t n, T alpha, const T* x, T* y) {
  vector_kernels<T>().axpy(n, alpha, x, y);
}

template <class T>
void scale(int64_t n, T alpha, T* x) {
  vector_kernels<T>().scale(n, alpha, x);
}

template <class T>
void fill(int64_t n, T value, T* x) {
  vector_kernels<T>().fill(n, value, x);
}

template <class T>
double sum(int64_t n, const T* x) {
  return vector_kernels<T>().sum(n, x);
}

template <class T>
double sum_squares(int64_t n, const T* x) {
  return vector_kernels<T>().sum_squares(n, x);
}

template <class T>
void bias_forward(int64_t rows, int64_t cols, const T* bias, T* y) {
  vector_kernels<T>().bias_forward(rows, cols, bias, y);
}

template <class T>
void bias_backward(int64_t rows, int64_t cols, const T* dy, T* dbias) {
  vector_kernels<T>().bias_backward(rows, cols, dy, dbias);
}

template <class T>
void layer_norm_forward(int64_t rows, int64_t cols, const T* x, const T* gamma, const T* beta, double eps, T* y,
                        T* mean, T* rstd) {
  vector_kernels<T>().layer_norm_forward(rows, cols, x, gamma, beta, eps, y, mean, rstd);
}

template <class T>
void layer_norm_backward(int64_t rows, int64_t cols, const T* x, const T* gamma, const T* mean, const T* rstd,
                         const T* dy, T* dx, T* dgamma, T* dbeta) {
  vector_kernels<T>().layer_norm_backward(rows, cols, x, gamma, mean, rstd, dy, dx, dgamma, dbeta);
}

template <class T>
void softmax_forward(int64_t rows, int64_t cols, const T* x, T* y) {
  vector_kernels<T>().softmax_forward(rows, cols, x, y);
}

template <class T>
void softmax_backward(int64_t rows, int64_t cols, const T* y, const T* dy, T* dx) {
  vector_kernels<T>().softmax_backward(rows, cols, y, dy, dx);
}

template <class T>
void gelu_forward(GeluKind kind, int64_t n, const T* x, T* y) {
  vector_kernels<T>().gelu_forward(kind, n, x, y);
}

template <class T>
void gelu_backward(GeluKind kind, int64_t n, const T* x, const T* dy, T* dx) {
  vector_kernels<T>().gelu_backward(kind, n, x, dy, dx);
}

template <class T>
void scale_columns(int64_t rows, int64_t cols, const T* x, const T* s, const T* b, T* y) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = x[r * cols + c] * s[c] + (b ? b[c] : T(0));
}

template <class T>
void column_dots(int64_t rows, int64_t cols, const T* a, const T* b, T* out) {
  const double* total = detail::blocked_rows<double>(rows, cols, true, [=](int64_t r0, int64_t r1, double* part) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = 0; c < cols; ++c) part[c] += double(a[r * cols + c]) * double(b[r * cols + c]);
  });
  for (int64_t c = 0; c < cols; ++c) out[c] += T(total[c]);
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
  template void gelu_backward<T>(GeluKind, int64_t, const T*, const T*, T*);                      \
  template void scale_columns<T>(int64_t, int64_t, const T*, const T*, const T*, T*);              \
  template void column_dots<T>(int64_t, int64_t, const T*, const T*, T*);
PCV_INSTANTIATE(float)
PCV_INSTANTIATE(double)
#undef PCV_INSTANTIATE

}  // namespace perceiver::cpu
