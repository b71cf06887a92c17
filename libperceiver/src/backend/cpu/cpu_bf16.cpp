// bf16 products on the CPU through oneDNN's matmul (see cpu_bf16.h for what is bf16 and why).
#include "backend/cpu/cpu_bf16.h"

#include <omp.h>

#include <map>
#include <tuple>
#include <unordered_map>

#include "backend/cpu/cpu_gemm_tiling.h"
#include "backend/cpu/cpu_isa.h"
#include "backend/cpu/cpu_workspace.h"
#include "perceiver/error.h"

#ifdef PCV_USE_DNNL
#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace perceiver::cpu {

namespace {

// A row-major float matrix [rows, cols] (leading dimension ld) into packed bf16 [rows, cols], as
// stored: a transposed operand stays transposed, and the product reads it through its strides.
void pack_bf16(int64_t rows, int64_t cols, const float* x, int64_t ld, uint16_t* out, bool parallel) {
#pragma omp parallel for schedule(static) if (parallel && rows * cols >= (int64_t(1) << 16))
  for (int64_t r = 0; r < rows; ++r) {
    vector_kernels<float>().to_bf16(cols, x + r * ld, out + r * cols);
  }
}

// Stored extent of op(X) [rows, cols]: [rows, cols], or [cols, rows] when transposed.
struct Stored {
  int64_t rows, cols;
};
Stored stored(Transpose t, int64_t rows, int64_t cols) { return t == Transpose::kNo ? Stored{rows, cols} : Stored{cols, rows}; }

// C = alpha·op(A)·op(B) + beta·C on bf16 A and B stored row-major with leading dimensions lda,
// ldb (transposed as ta, tb say), single-threaded.
void matmul_packed(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
                   int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc);

// Both operands rounded to bf16 into this thread's scratch, each as stored.
struct Packed {
  const uint16_t *a, *b;
  int64_t lda, ldb;
};
Packed pack_operands(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                     const float* b, int64_t ldb, bool parallel) {
  const Stored sa = stored(ta, m, k), sb = stored(tb, k, n);
  auto* a16 = static_cast<uint16_t*>(thread_scratch(Slot::kBf16A, size_t(m * k) * 2));
  auto* b16 = static_cast<uint16_t*>(thread_scratch(Slot::kBf16B, size_t(k * n) * 2));
  pack_bf16(sa.rows, sa.cols, a, lda, a16, parallel);
  pack_bf16(sb.rows, sb.cols, b, ldb, b16, parallel);
  return {a16, b16, sa.cols, sb.cols};
}

}  // namespace

void gemm_bf16_serial(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                      int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (tiling::trivial(m, n, k, beta, c, ldc)) return;
  const Packed p = pack_operands(ta, tb, m, n, k, a, lda, b, ldb, false);
  matmul_packed(ta, tb, m, n, k, alpha, p.a, p.lda, p.b, p.ldb, beta, c, ldc);
}

void gemm_bf16(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
               int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m * n * k < tiling::kMinParallelMacs) return gemm_bf16_serial(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  if (tiling::trivial(m, n, k, beta, c, ldc)) return;
  // Round each operand once, then the same pieces as float32 (cpu_gemm_tiling.h); no piece is
  // empty or has k == 0 once the whole product is not trivial.
  const Packed p = pack_operands(ta, tb, m, n, k, a, lda, b, ldb, true);
  tiling::split(matmul_packed, ta, tb, m, n, k, alpha, p.a, p.lda, p.b, p.ldb, beta, c, ldc);
}

void gemm_batched_bf16(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                       int64_t lda, int64_t stride_a, const float* b, int64_t ldb, int64_t stride_b, float beta,
                       float* c, int64_t ldc, int64_t stride_c, int64_t batch) {
  tiling::batched(gemm_bf16_serial, gemm_bf16, ta, tb, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b, beta, c, ldc,
                  stride_c, batch);
}

#ifdef PCV_USE_DNNL

namespace {

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// One single-threaded matmul per shape, kept per thread (the shapes of a step are few).
struct Matmul {
  dnnl::matmul prim;
  dnnl::memory::desc a, b, c;
  size_t scratchpad_bytes = 0;
};

using Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, float, float>;

Matmul make_matmul(const Key& key) {
  const auto [ta, tb, m, n, k, lda, ldb, ldc, alpha, beta] = key;
  using dt = dnnl::memory::data_type;
  using dims = dnnl::memory::dims;
  Matmul mm;
  mm.a = dnnl::memory::desc({m, k}, dt::bf16, ta ? dims{1, lda} : dims{lda, 1});
  mm.b = dnnl::memory::desc({k, n}, dt::bf16, tb ? dims{1, ldb} : dims{ldb, 1});
  mm.c = dnnl::memory::desc({m, n}, dt::f32, {ldc, 1});
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  if (beta != 0.0f) {
    dnnl::post_ops ops;
    ops.append_sum(beta);
    attr.set_post_ops(ops);
  }
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(mm.a, mm.b, mm.c), attr, engine());
  mm.scratchpad_bytes = pd.scratchpad_desc().get_size();
  mm.prim = dnnl::matmul(pd);
  return mm;
}

// Runs on the calling thread: oneDNN's OpenMP region inside ours (or with one thread) gets a team
// of one. The primitives are made on this thread, for one thread.
void matmul_packed(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
                   int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  thread_local std::map<Key, Matmul> cache;
  thread_local dnnl::stream stream(engine());
  const Key key{ta == Transpose::kYes, tb == Transpose::kYes, m, n, k, lda, ldb, ldc, alpha, beta};
  auto it = cache.find(key);
  if (it == cache.end()) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(1);  // sizes the primitive's work split for the one thread that runs it
    it = cache.emplace(key, make_matmul(key)).first;
    omp_set_num_threads(saved);
  }
  const Matmul& mm = it->second;
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, dnnl::memory(mm.a, engine(), const_cast<uint16_t*>(a))},
                                              {DNNL_ARG_WEIGHTS, dnnl::memory(mm.b, engine(), const_cast<uint16_t*>(b))},
                                              {DNNL_ARG_DST, dnnl::memory(mm.c, engine(), c)}};
  if (mm.scratchpad_bytes) {
    const dnnl::memory::desc pad({int64_t(mm.scratchpad_bytes)}, dnnl::memory::data_type::u8, {1});
    args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(pad, engine(), thread_scratch(Slot::kBf16Scratchpad, mm.scratchpad_bytes)));
  }
  mm.prim.execute(stream, args);
}

}  // namespace

std::string bf16_products_isa() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    default: return "";
  }
}

bool bf16_products_available(std::string* why) {
  if (!bf16_products_isa().empty()) return true;
  if (why)
    *why = "this CPU has neither AVX512-BF16 nor AMX (or ONEDNN_MAX_CPU_ISA caps them), so bf16 products would be "
           "emulated and slower than float32";
  return false;
}

#else  // no oneDNN in this build

namespace {
void matmul_packed(Transpose, Transpose, int64_t, int64_t, int64_t, float, const uint16_t*, int64_t, const uint16_t*,
                   int64_t, float, float*, int64_t) {
  PCV_FAIL("bf16 products: this build has no oneDNN (PERCEIVER_WITH_DNNL=OFF)");
}
}  // namespace

std::string bf16_products_isa() { return ""; }

bool bf16_products_available(std::string* why) {
  if (why)
    *why = "this build has no oneDNN (configure with -DPERCEIVER_WITH_DNNL=ON; Debian package libdnnl-dev)";
  return false;
}

#endif

}  // namespace perceiver::cpu
