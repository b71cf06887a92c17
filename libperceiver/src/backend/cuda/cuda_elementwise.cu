// Elementwise ops, bias, GELU, the sums, and the helpers of the GEMM wrapper (bf16 operand
// copies, beta·C for empty products). Grid-stride loops: any grid gives the same results.
#include <string>

#include "backend/cuda/bodies/pointwise.h"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_launch.h"
#include "backend/cuda/cuda_reduce.cuh"

namespace perceiver::cuda {
namespace {

// One kernel for every unary/binary elementwise op: y[i] = f(i).
template <class F>
__global__ void map_kernel(int64_t n, F f) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) f(i);
}

template <class F>
void map(void* h, int64_t n, F f, const char* what) {
  if (n <= 0) return;
  map_kernel<<<grid_for(n), kThreads, 0, handle_of(h).stream>>>(n, f);
  PCV_CUDA_CHECK_LAUNCH(what);
}

struct AddOp {
  const float *a, *b;
  float* y;
  __device__ void operator()(int64_t i) const { y[i] = a[i] + b[i]; }
};
struct AxpyOp {
  float alpha;
  const float* x;
  float* y;
  __device__ void operator()(int64_t i) const { y[i] += alpha * x[i]; }
};
struct ScaleOp {
  float alpha;
  float* x;
  __device__ void operator()(int64_t i) const { x[i] *= alpha; }
};
struct FillOp {
  float value;
  float* x;
  __device__ void operator()(int64_t i) const { x[i] = value; }
};
struct GeluOp {
  bool erf_form;
  const float* x;
  float* y;
  __device__ void operator()(int64_t i) const { y[i] = body::gelu(erf_form, x[i]); }
};
struct GeluBackOp {
  bool erf_form;
  const float *x, *dy;
  float* dx;
  __device__ void operator()(int64_t i) const { dx[i] += dy[i] * body::gelu_derivative(erf_form, x[i]); }
};
struct BiasOp {
  int64_t cols;
  const float* bias;
  float* y;
  __device__ void operator()(int64_t i) const { y[i] += bias[i % cols]; }
};

struct ValueOf {
  const float* x;
  __device__ double operator()(int64_t i) const { return double(x[i]); }
};
struct SquareOf {
  const float* x;
  __device__ double operator()(int64_t i) const { return double(x[i]) * double(x[i]); }
};
struct ColumnOf {
  int64_t cols;
  const float* dy;
  __device__ double operator()(int64_t r, int64_t c) const { return double(dy[r * cols + c]); }
};

__global__ void to_bf16_kernel(int64_t batch, int64_t rows, int64_t cols, const float* src, int64_t ld,
                               int64_t stride, __nv_bfloat16* dst) {
  const int64_t n = batch * rows * cols;
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const int64_t b = i / (rows * cols), r = (i / cols) % rows, c = i % cols;
    dst[i] = __float2bfloat16_rn(src[b * stride + r * ld + c]);
  }
}

__global__ void scale_matrix_kernel(int64_t batch, int64_t rows, int64_t cols, float beta, float* c, int64_t ldc,
                                    int64_t stride) {
  const int64_t n = batch * rows * cols;
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    float& x = c[(i / (rows * cols)) * stride + ((i / cols) % rows) * ldc + i % cols];
    x = beta == 0.f ? 0.f : beta * x;
  }
}

__global__ void probe_kernel(int* x) {
  if (x) *x = 1;
}

}  // namespace

void add(void* h, int64_t n, const float* a, const float* b, float* y) { map(h, n, AddOp{a, b, y}, "add"); }
void axpy(void* h, int64_t n, float alpha, const float* x, float* y) { map(h, n, AxpyOp{alpha, x, y}, "axpy"); }
void scale(void* h, int64_t n, float alpha, float* x) { map(h, n, ScaleOp{alpha, x}, "scale"); }
void fill(void* h, int64_t n, float value, float* x) { map(h, n, FillOp{value, x}, "fill"); }

void copy(void* h, int64_t n, const float* x, float* y) {
  if (n > 0) PCV_CUDA_CHECK(cudaMemcpyAsync(y, x, size_t(n) * sizeof(float), cudaMemcpyDeviceToDevice, handle_of(h).stream));
}

void gelu_forward(void* h, GeluKind kind, int64_t n, const float* x, float* y) {
  map(h, n, GeluOp{kind == GeluKind::kErf, x, y}, "gelu_forward");
}
void gelu_backward(void* h, GeluKind kind, int64_t n, const float* x, const float* dy, float* dx) {
  map(h, n, GeluBackOp{kind == GeluKind::kErf, x, dy, dx}, "gelu_backward");
}

void bias_forward(void* h, int64_t rows, int64_t cols, const float* bias, float* y) {
  map(h, rows * cols, BiasOp{cols, bias, y}, "bias_forward");
}
void bias_backward(void* h, int64_t rows, int64_t cols, const float* dy, float* dbias) {
  column_sum(handle_of(h), rows, cols, ColumnOf{cols, dy}, dbias, "bias_backward");
}

void sum(void* h, int64_t n, const float* x, double* out) { blocked_sum(handle_of(h), n, ValueOf{x}, 1.0, out, "sum"); }
void sum_squares(void* h, int64_t n, const float* x, double* out) {
  blocked_sum(handle_of(h), n, SquareOf{x}, 1.0, out, "sum_squares");
}

void convert_to_bf16(cudaStream_t stream, int64_t batch, int64_t rows, int64_t cols, const float* src, int64_t ld,
                     int64_t stride, void* dst) {
  const int64_t n = batch * rows * cols;
  if (n == 0) return;
  to_bf16_kernel<<<grid_for(n), kThreads, 0, stream>>>(batch, rows, cols, src, ld, stride,
                                                      static_cast<__nv_bfloat16*>(dst));
  PCV_CUDA_CHECK_LAUNCH("to_bf16_kernel");
}

void scale_matrix(cudaStream_t stream, int64_t batch, int64_t rows, int64_t cols, float beta, float* c, int64_t ldc,
                  int64_t stride) {
  const int64_t n = batch * rows * cols;
  if (n == 0 || beta == 1.f) return;
  scale_matrix_kernel<<<grid_for(n), kThreads, 0, stream>>>(batch, rows, cols, beta, c, ldc, stride);
  PCV_CUDA_CHECK_LAUNCH("scale_matrix_kernel");
}

void check_kernel_image(const char* gpu_name, int major, int minor) {
  cudaFuncAttributes attr{};
  const cudaError_t e = cudaFuncGetAttributes(&attr, probe_kernel);
  if (e == cudaSuccess) return;
  cudaGetLastError();
  PCV_FAIL("device 'cuda': this build has no kernels for ", gpu_name, " (compute capability ", major, ".", minor,
           "): ", cudaGetErrorName(e), " (", cudaGetErrorString(e), "). HINT: the CUDA backend is built for ",
           "CMAKE_CUDA_ARCHITECTURES (86;90 by default: A10G, H100); reconfigure with -DCMAKE_CUDA_ARCHITECTURES=",
           major, minor);
}

}  // namespace perceiver::cuda
