// Which kernels run the CPU backend's float32 products, and our own for x86-64-v3 CPUs.
//
// By the level the vector kernels run at (cpu_isa.h, itself chosen from the CPU's features):
//  - x86-64-v4 (AVX-512): oneDNN's brgemm (cpu_dnnl.h; OpenBLAS for the shapes it declines, and for
//    all where the build has no oneDNN);
//  - x86-64-v3 (AVX2 + FMA): OpenBLAS for whole products, our own kernel (below) for the
//    attention's (cpu_attention.cpp): pieces of a few hundred rows whose operands are in cache,
//    where ours ran at 1.03-1.30x OpenBLAS's speed on the Zen 3 EPYC here. On whole products,
//    whose operands come from memory in a step, ours ran at 0.86-0.96x (OpenBLAS packs them
//    faster; bench/dev_own_gemm.cpp --cold);
//  - the baseline (SSE2, arm64): OpenBLAS.
// PERCEIVER_CPU_GEMM=openblas|onednn|own runs all of them on one set instead (own needs AVX2 and
// FMA; onednn AVX-512 and a build with oneDNN; each refused with a clear error where it cannot).
//
// Our kernel (cpu_isa_v3_sgemm.cpp) computes every element of C as one chain of fused multiply-adds
// over p = 0 .. k-1 in order, starting from beta·C (or 0), with alpha folded into A: its bits do
// not depend on where a tile of C starts, how large it is, how the kernel blocks the product, or
// whether B was packed beforehand. So output tiles on it may follow the thread count in rows and
// in columns (cpu_gemm_tiling.h).
#pragma once

#include <cstdint>
#include <string>

#include "perceiver/backend.h"

namespace perceiver::cpu {

enum class Float32Gemm { kOpenBlas, kOneDnn, kOwnAvx2 };

/// The kernels of the float32 products outside the attention (PERCEIVER_CPU_GEMM, else by level).
Float32Gemm float32_gemm();

/// "OpenBLAS, the attention's by our AVX2 kernel (6x16 register tiles)", "oneDNN (avx512_core,
/// brgemm) and OpenBLAS for the rest", ...: for the start-up line.
std::string float32_gemm_summary();

/// A float32 product on the calling thread, as cblas_sgemm (row-major).
using SerialSgemm = void (*)(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                             int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

/// op(B) [depth, n] packed once for many products on our kernel (a row-tiled product's B, the
/// attention's key and value chunks): depth blocks of block_depth (the last the rest), each in
/// panels of 16 columns (zero past n), `columns` = n rounded up to 16.
struct OwnPackedB {
  const float* panels = nullptr;
  int64_t depth = 0, columns = 0, block_depth = 0;
};

/// Our kernel's entry points.
struct OwnGemm {
  SerialSgemm gemm;
  /// Floats that pack_b writes for op(B) [k, n].
  int64_t (*packed_b_size)(int64_t k, int64_t n);
  /// op(B) [k, n] (b row-major as stored, transposed as tb says) packed into `out` (64-byte
  /// aligned); over the OpenMP pool where `parallel`.
  OwnPackedB (*pack_b)(Transpose tb, int64_t k, int64_t n, const float* b, int64_t ldb, float* out, bool parallel);
  /// gemm on columns [n0, n0 + n) and depths [k0, k0 + k) of a packed B: bitwise gemm on its values.
  /// n0 a multiple of 16, k0 of its block_depth.
  void (*gemm_packed_b)(Transpose ta, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                        const OwnPackedB& b, int64_t k0, int64_t n0, float beta, float* c, int64_t ldc);
};

/// Our kernel where it runs the products outside the attention (float32_gemm() is kOwnAvx2), else null.
const OwnGemm* own_gemm();
/// Its gemm, or null.
SerialSgemm own_sgemm();
/// Our kernel where it runs the attention's products (x86-64-v3 unless PERCEIVER_CPU_GEMM names
/// other kernels; PERCEIVER_CPU_GEMM=own), else null.
const OwnGemm* own_attention_gemm();

/// Our kernel's row and column alignments that keep whole register tiles in each output tile (any
/// alignment keeps the bits; these keep the work).
constexpr int64_t kOwnGemmRows = 6, kOwnGemmCols = 16;

#if defined(__x86_64__)
namespace isa_v3 {
/// C = alpha·op(A)·op(B) + beta·C on the calling thread, row-major, as cblas_sgemm (C is not read
/// when beta is 0; A and B are not read when alpha or k is 0). Needs AVX2 and FMA. The rest: OwnGemm.
void sgemm(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
int64_t packed_b_size(int64_t k, int64_t n);
OwnPackedB pack_b(Transpose tb, int64_t k, int64_t n, const float* b, int64_t ldb, float* out, bool parallel);
void sgemm_packed_b(Transpose ta, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                    const OwnPackedB& b, int64_t k0, int64_t n0, float beta, float* c, int64_t ldc);
}  // namespace isa_v3
#endif

}  // namespace perceiver::cpu
