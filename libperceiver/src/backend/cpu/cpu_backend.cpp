#include "backend/cpu/cpu_backend.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "backend/cpu/cpu_bf16.h"
#include "backend/cpu/cpu_gemm_tiling.h"
#include "backend/cpu/cpu_isa.h"
#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_parallel.h"
#include "backend/cpu/cpu_sgemm.h"
#include "backend/cpu/cpu_workspace.h"
#include "backend/profile/op_profile.h"
#include "core/blas.h"
#include "perceiver/error.h"
#include "perceiver/threads.h"

namespace perceiver::cpu {
namespace {

// Adapts a CPU kernel to the table's signature: the handle comes first and is ignored (host
// memory needs none); a kernel that returns its result writes it to the extra `out` argument.
template <auto Fn>
struct Entry;
template <class... A, void (*Fn)(A...)>
struct Entry<Fn> {
  static void call(void*, A... a) { Fn(a...); }
};
template <class... A, double (*Fn)(A...)>
struct Entry<Fn> {
  static void call(void*, A... a, double* out) { *out = Fn(a...); }
};

}  // namespace

template <class T>
const KernelTable<T>& kernel_table() {
  static const KernelTable<T> table = [] {
    KernelTable<T> t;
#define PCV_CPU_OP(op) t.op = Entry<&op<T>>::call;
    PCV_KERNEL_OPS(PCV_CPU_OP)
    PCV_CPU_OP(scale_columns)
    PCV_CPU_OP(column_dots)
    PCV_CPU_OP(attention_backward_key_sums)
    PCV_CPU_OP(embed_layer_norm_forward)
    PCV_CPU_OP(embed_norm_factors)
    PCV_CPU_OP(embed_factor_matrix)
#undef PCV_CPU_OP
    check_complete(t, "cpu");
    return t;
  }();
  return table;
}
template const KernelTable<float>& kernel_table<float>();
template const KernelTable<double>& kernel_table<double>();

const KernelTable<float>& kernel_table_bf16() {
  static const KernelTable<float> table = [] {
    KernelTable<float> t = kernel_table<float>();
    t.gemm = Entry<&gemm_bf16>::call;
    t.gemm_batched = Entry<&gemm_batched_bf16>::call;
    t.attention_forward = Entry<&attention_forward_bf16>::call;
    t.attention_backward = Entry<&attention_backward_bf16>::call;
    t.attention_backward_key_sums = Entry<&attention_backward_key_sums_bf16>::call;
    t.store_bf16 = Entry<&store_bf16>::call;  // and so the attention takes AttentionDims::kv_bf16
    t.load_bf16 = Entry<&load_bf16>::call;
    t.gemm_stored_bf16 = Entry<&gemm_stored_bf16>::call;
    return t;
  }();
  return table;
}

// How the float32 products' output tiles are cut (cpu_gemm_tiling.h).
std::string float32_tiles_summary() {
  const tiling::TileAlign align = tiling::float32_tile_align();
  if (own_sgemm() && align.rows)
    return ", row and column tiles one per thread (on multiples of " + std::to_string(align.rows) + " rows and " +
           std::to_string(align.cols) + " columns: whole register tiles; its bits do not depend on the tiling)";
  const auto part = [](int64_t align, const std::string& what) {
    return align ? what + " tiles one per thread (on multiples of " + std::to_string(align) + " " + what +
                       "s, where its kernels keep the bits)"
                 : what + " tiles by shape";
  };
  return ", " + part(align.rows, "row") + ", " + part(align.cols, "column");
}

CpuBackend::CpuBackend(Precision precision) : precision_(precision) { blas::init_blas(); }

std::string CpuBackend::describe() const {
  std::string s = "cpu: " + std::to_string(threads::num_threads()) + " compute thread(s); OpenBLAS kernels " +
                  blas::kernel_summary() + "; float32 products by " + float32_gemm_summary() + float32_tiles_summary() +
                  "; vector kernels " + cpu::isa_summary();
  if (precision_ == Precision::kBf16)
    s += "; bf16 products by " + bf16_products_kernel() + ", float32 accumulation and master weights";
  return s;
}

Buffer CpuBackend::allocate(size_t bytes) { return host_buffer(bytes); }

// Zeroing of 8 MB or more over the pool, 1 MB a task: the gradient arena is zeroed every step
// (79 MB at kinetics700) while the other threads would wait. One core of the 2-core Sapphire Rapids
// VM zeroed 80 MB at 13.5 GB/s, both cores at 22.8 (2026-12-03); below a few MB one core is as fast.
void CpuBackend::zero(void* dst, size_t bytes) {
  constexpr size_t kParallelBytes = size_t(8) << 20, kTaskBytes = size_t(1) << 20;
  if (bytes < kParallelBytes || omp_in_parallel()) {
    std::memset(dst, 0, bytes);
    return;
  }
  auto* p = static_cast<char*>(dst);
  const auto tasks = int64_t((bytes + kTaskBytes - 1) / kTaskBytes);
  detail::parallel_for(tasks, true, [=](int64_t t) {
    const size_t begin = size_t(t) * kTaskBytes;
    std::memset(p + begin, 0, std::min(kTaskBytes, bytes - begin));
  });
}
void CpuBackend::discard(void* data, size_t bytes) { discard_host(data, bytes); }
void CpuBackend::copy_to_device(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }
void CpuBackend::copy_to_host(void* dst, const void* src, size_t bytes) {
  std::memcpy(dst, src, bytes);
  even_out_thread_scratch();
}
void CpuBackend::synchronize() { even_out_thread_scratch(); }

namespace {

// PERCEIVER_CPU_PROFILE=1: each op's wall-clock time, summed by op and shape and printed at exit
// (backend/profile/op_profile.h). The ops are synchronous, so timing them costs ~nothing.
template <const KernelTable<float>& (*Inner)()>
struct WallClock {
  static constexpr const char* kTitle =
      Inner == &kernel_table_bf16
          ? "PERCEIVER_CPU_PROFILE: wall-clock time by op and shape, bf16 products, every step (warm-up included)"
          : "PERCEIVER_CPU_PROFILE: wall-clock time by op and shape, every step (warm-up included)";
  static const KernelTable<float>& inner() { return Inner(); }
  template <class F>
  static double time(void*, F&& call) {
    const auto t0 = std::chrono::steady_clock::now();
    call();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
};

template <const KernelTable<float>& (*Inner)()>
const KernelTable<float>& maybe_timed() {
  static const bool timed = profile::requested("PERCEIVER_CPU_PROFILE");
  if (!timed) return Inner();
  static const KernelTable<float> table = profile::timed_table<WallClock<Inner>>();
  return table;
}

}  // namespace

const KernelTable<float>& CpuBackend::kernels_f32() const {
  return precision_ == Precision::kBf16 ? maybe_timed<&kernel_table_bf16>() : maybe_timed<&kernel_table<float>>();
}
const KernelTable<double>* CpuBackend::kernels_f64() const { return &kernel_table<double>(); }

}  // namespace perceiver::cpu
