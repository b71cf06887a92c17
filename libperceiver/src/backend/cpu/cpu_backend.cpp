#include "backend/cpu/cpu_backend.h"

#include <cstdlib>
#include <cstring>

#include "backend/cpu/cpu_kernels.h"
#include "core/blas.h"
#include "perceiver/error.h"

namespace perceiver::cpu {

template <class T>
const KernelTable<T>& kernel_table() {
  static const KernelTable<T> table = [] {
    KernelTable<T> t;
    t.gemm = gemm<T>;
    t.gemm_batched = gemm_batched<T>;
    t.layer_norm_forward = layer_norm_forward<T>;
    t.layer_norm_backward = layer_norm_backward<T>;
    t.softmax_forward = softmax_forward<T>;
    t.softmax_backward = softmax_backward<T>;
    t.gelu_forward = gelu_forward<T>;
    t.gelu_backward = gelu_backward<T>;
    t.bias_forward = bias_forward<T>;
    t.bias_backward = bias_backward<T>;
    t.add = add<T>;
    t.axpy = axpy<T>;
    t.scale = scale<T>;
    t.fill = fill<T>;
    t.sum = sum<T>;
    t.sum_squares = sum_squares<T>;
    t.l1_forward = l1_forward<T>;
    t.l1_backward = l1_backward<T>;
    t.mse_forward = mse_forward<T>;
    t.mse_backward = mse_backward<T>;
    t.softmax_ce_forward = softmax_ce_forward<T>;
    t.softmax_ce_backward = softmax_ce_backward<T>;
    t.attention_forward = attention_forward<T>;
    t.attention_backward = attention_backward<T>;
    return t;
  }();
  return table;
}
template const KernelTable<float>& kernel_table<float>();
template const KernelTable<double>& kernel_table<double>();

CpuBackend::CpuBackend() { blas::init_blas(); }

Buffer CpuBackend::allocate(size_t bytes) {
  size_t rounded = (bytes + 63) / 64 * 64;
  void* p = rounded ? std::aligned_alloc(64, rounded) : nullptr;
  PCV_CHECK(p || !rounded, "cpu: out of memory allocating ", bytes, " bytes");
  return Buffer(p, bytes, [](void* q) { std::free(q); });
}

void CpuBackend::copy_to_device(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }
void CpuBackend::copy_to_host(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }

const KernelTable<float>& CpuBackend::kernels_f32() const { return kernel_table<float>(); }
const KernelTable<double>* CpuBackend::kernels_f64() const { return &kernel_table<double>(); }

}  // namespace perceiver::cpu
