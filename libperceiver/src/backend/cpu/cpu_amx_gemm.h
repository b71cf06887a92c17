// The bf16 products' own kernel for CPUs with AMX (Intel Sapphire Rapids and later): tile
// matrix multiplies (TDPBF16PS) on operands packed into 1 KB tiles, float32 accumulation.
// Why our own: Debian 12's oneDNN (2.6) ran the model's products at 500-1150 GFLOP/s on one core
// of a Sapphire Rapids, whose tile unit peaks near 3.5 TFLOP/s, and those with op(A) transposed
// at half our speed; which products run here is cpu_bf16.cpp's choice (bench/README.md, "On a
// CPU with AMX").
//
// Determinism: every element of C is one chain over K in 32-deep steps from k = 0, whatever the
// shape, strides or transposes of the call, so a product's bits depend on its values alone (the
// same values stored strided or packed, transposed or not, give the same C).
#pragma once

#include <cstdint>

#include "perceiver/backend.h"

namespace perceiver::cpu {

/// Whether amx_gemm_bf16 can run in this process: an x86-64 build, a CPU with AMX-TILE, AMX-BF16
/// and AVX512-BF16 (which rounds float operands as they are packed), and a kernel that lets the process use the tile registers (Linux 5.16+; asked once).
bool amx_available();

/// C = alpha·op(A)·op(B) + beta·C on bf16 A and B (row-major as stored, leading dimensions lda and
/// ldb, as uint16_t) with float32 accumulation, on the calling thread. C is not read when beta is
/// 0; with alpha = beta = 1 the sums start from C's values (C += op(A)·op(B) in one chain, as
/// float32 BLAS does). Only where amx_available().
void amx_gemm_bf16(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
                   int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc);

/// Whether amx_gemm_bf16 reads a bf16 A of depth k, stored as ta says with rows lda apart and
/// starting on a 64-byte boundary, in place (its rows are its tiles) rather than packing a copy.
bool amx_reads_a_in_place(Transpose ta, int64_t k, int64_t lda);

/// A B operand packed once for many products (the attention's key and value chunks): op(B) [k, n]
/// in tiles, column tiles `column_stride` values apart. sub() is the part from depth k0 and
/// column n0, both multiples of 32: a product over it of depth kk must end at a multiple of 32 or
/// at the packed operand's own depth (values past its end within a tile would enter the sums).
struct AmxPackedB {
  const uint16_t* tiles = nullptr;
  int64_t column_stride = 0;
  /// The operand of depth k that amx_pack_b writes (or wrote) at `tiles`.
  static AmxPackedB at(const uint16_t* tiles, int64_t k);
  AmxPackedB sub(int64_t k0, int64_t n0) const;
};
/// bf16 values amx_pack_b writes for op(B) [k, n].
int64_t amx_packed_b_size(int64_t k, int64_t n);
/// op(B) [k, n] (b as stored, row-major, leading dimension ldb, transposed as tb says) packed into
/// `out` (amx_packed_b_size values, 64-byte aligned); over the OpenMP pool where `parallel`.
AmxPackedB amx_pack_b(Transpose tb, int64_t k, int64_t n, const uint16_t* b, int64_t ldb, uint16_t* out,
                      bool parallel);
/// The same from float32 values, rounded to bf16 as they are packed (one pass, no rounded copy):
/// the tiles amx_pack_b writes for round_to_bf16's values (cpu_bf16.h).
AmxPackedB amx_pack_b(Transpose tb, int64_t k, int64_t n, const float* b, int64_t ldb, uint16_t* out, bool parallel);
/// amx_gemm_bf16 with B packed already: the same bits as amx_gemm_bf16 on its values.
void amx_gemm_bf16_packed_b(Transpose ta, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
                            int64_t lda, const AmxPackedB& b, float beta, float* c, int64_t ldc);
/// The same on float32 A, rounded to bf16 as its tiles are packed: the bits of the call on A's
/// rounded values. For an A that would not be read in place (transposed, or K not whole tiles) this
/// saves rounding it into a copy first.
void amx_gemm_bf16_packed_b(Transpose ta, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                            const AmxPackedB& b, float beta, float* c, int64_t ldc);

/// The tile unit's peak as our kernel drives it: four accumulator tiles from two A and two B tiles
/// (the eight tile registers), `iterations` steps of four TDPBF16PS (2·16·16·32 FLOP each), on
/// registers, on the calling thread (bench_fma_peak). Returns a value that depends on the sums.
/// Only where amx_available().
float amx_tile_chains(int64_t iterations);

}  // namespace perceiver::cpu
