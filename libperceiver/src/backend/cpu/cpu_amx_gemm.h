// The bf16 products' own kernel for CPUs with AMX (Intel Sapphire Rapids and later): tile
// matrix multiplies (TDPBF16PS) on operands packed into 1 KB tiles, float32 accumulation.
// Why our own: Debian 12's oneDNN (2.6) lays its B operand out afresh on every call and ran the
// attention's and linear layers' products at 500-1150 GFLOP/s on one core of a Sapphire Rapids,
// where PyTorch's oneDNN reaches twice that (bench/README.md, "On a CPU with AMX").
//
// Determinism: every element of C is one chain over K in 32-deep steps from k = 0, whatever the
// shape, strides or transposes of the call, so a product's bits depend on its values alone (the
// same values stored strided or packed, transposed or not, give the same C).
#pragma once

#include <cstdint>

#include "perceiver/backend.h"

namespace perceiver::cpu {

/// Whether amx_gemm_bf16 can run in this process: an x86-64 build, a CPU with AMX-TILE and
/// AMX-BF16, and a kernel that lets the process use the tile registers (Linux 5.16+; asked once).
bool amx_available();

/// C = alpha·op(A)·op(B) + beta·C on bf16 A and B (row-major as stored, leading dimensions lda and
/// ldb, as uint16_t) with float32 accumulation, on the calling thread. C is not read when beta is
/// 0. Only where amx_available().
void amx_gemm_bf16(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
                   int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace perceiver::cpu
