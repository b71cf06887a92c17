// Our float32 GEMM for x86-64-v3 CPUs (AVX2 + FMA), compiled with -march=x86-64-v3; cpu_sgemm.h
// says when it runs and what it guarantees of the bits.
//
// BLIS's structure (Van Zee and van de Geijn, "BLIS: A Framework for Rapidly Instantiating BLAS
// Functionality", 2015): a block of op(B) packed into panels of 16 columns, a block of op(A) into
// panels of 6 rows, and a micro-kernel that keeps a 6 x 16 tile of C in 12 registers over the
// depth while the B panel (16 KB at the 256-deep blocks) stays in L1 and the A block in L2.
//
// Why our own: on the Zen 3 EPYC here OpenBLAS 0.3.21's kernels ran the step's products at 70-80%
// of the FMA peak (one core), and GCC's code for the same 6 x 16 tile from intrinsics at 74-79% even
// with both operands in L1; the micro-kernel's loop written in assembly runs at 97% there
// (92.4 of 95 GFLOP/s), so the loop is assembly and the rest is C++.
#if defined(__x86_64__)
#include <immintrin.h>

#include <cstring>

#include "backend/cpu/cpu_parallel.h"
#include "backend/cpu/cpu_sgemm.h"
#include "backend/cpu/cpu_workspace.h"

namespace perceiver::cpu::isa_v3 {
namespace {

constexpr int64_t kMr = kOwnGemmRows, kNr = kOwnGemmCols;
// Blocks: 384 deep (a B panel of 24 KB and an A panel of 9 KB share L1), 144 rows of A (216 KB,
// in L2). On 2 threads of the Zen 3 EPYC, against 256 and 72, the decoder's 1025x1026x1026
// products ran 0.83-0.93x OpenBLAS's speed instead of 0.95-1.01x (fewer passes over C);
// bench/dev_own_gemm.cpp.
constexpr int64_t kKc = 384;
constexpr int64_t kMc = 144;
constexpr int64_t kNc = 2048;  // columns of a B block: 2 MB

// No std::min: a template instantiated here would be a symbol the ISA levels share
// (check_isa_symbols.cmake).
int64_t least(int64_t a, int64_t b) { return a < b ? a : b; }
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

// ---- the micro-kernel: C[6 x 16] (+)= A panel · B panel over k ----
// ymm0-11 hold the tile (row i in ymm(2i), ymm(2i+1)), ymm12-13 a row of the B panel, ymm14-15 the
// broadcast A values (two, alternating, so that consecutive broadcasts do not wait on each other).
#define PCV_SGEMM_STEP(OA, OB)                                                                        \
  "vmovaps " #OB "(%[b]), %%ymm12\n\t"                                                                 \
  "vmovaps " #OB "+32(%[b]), %%ymm13\n\t"                                                              \
  "vbroadcastss " #OA "(%[a]), %%ymm14\n\t"                                                            \
  "vfmadd231ps %%ymm12, %%ymm14, %%ymm0\n\t"                                                           \
  "vfmadd231ps %%ymm13, %%ymm14, %%ymm1\n\t"                                                           \
  "vbroadcastss " #OA "+4(%[a]), %%ymm15\n\t"                                                          \
  "vfmadd231ps %%ymm12, %%ymm15, %%ymm2\n\t"                                                           \
  "vfmadd231ps %%ymm13, %%ymm15, %%ymm3\n\t"                                                           \
  "vbroadcastss " #OA "+8(%[a]), %%ymm14\n\t"                                                          \
  "vfmadd231ps %%ymm12, %%ymm14, %%ymm4\n\t"                                                           \
  "vfmadd231ps %%ymm13, %%ymm14, %%ymm5\n\t"                                                           \
  "vbroadcastss " #OA "+12(%[a]), %%ymm15\n\t"                                                         \
  "vfmadd231ps %%ymm12, %%ymm15, %%ymm6\n\t"                                                           \
  "vfmadd231ps %%ymm13, %%ymm15, %%ymm7\n\t"                                                           \
  "vbroadcastss " #OA "+16(%[a]), %%ymm14\n\t"                                                         \
  "vfmadd231ps %%ymm12, %%ymm14, %%ymm8\n\t"                                                           \
  "vfmadd231ps %%ymm13, %%ymm14, %%ymm9\n\t"                                                           \
  "vbroadcastss " #OA "+20(%[a]), %%ymm15\n\t"                                                         \
  "vfmadd231ps %%ymm12, %%ymm15, %%ymm10\n\t"                                                          \
  "vfmadd231ps %%ymm13, %%ymm15, %%ymm11\n\t"
// Rows 0-2 of the tile at c + i·ldc, rows 3-5 at c3 + (i-3)·ldc (ldc in bytes).
#define PCV_SGEMM_ROWS(OP)                                                                            \
  OP("(%[c])", 0, 1) OP("(%[c],%[ldc],1)", 2, 3) OP("(%[c],%[ldc],2)", 4, 5)                           \
  OP("(%[c3])", 6, 7) OP("(%[c3],%[ldc],1)", 8, 9) OP("(%[c3],%[ldc],2)", 10, 11)
#define PCV_SGEMM_LOAD(AT, R0, R1) "vmovups " AT ", %%ymm" #R0 "\n\tvmovups 32" AT ", %%ymm" #R1 "\n\t"
#define PCV_SGEMM_STORE(AT, R0, R1) "vmovups %%ymm" #R0 ", " AT "\n\tvmovups %%ymm" #R1 ", 32" AT "\n\t"
#define PCV_SGEMM_ZERO(AT, R0, R1) "vxorps %%ymm" #R0 ", %%ymm" #R0 ", %%ymm" #R0 "\n\t" \
                                   "vxorps %%ymm" #R1 ", %%ymm" #R1 ", %%ymm" #R1 "\n\t"

// The tile of C at c (rows ldc floats apart) continues its chains from C (`from_c`) or starts them
// from zero, runs them over k steps of the packed panels (a: 6 floats a step, b: 16, 32-byte
// aligned) and is stored back.
void micro_kernel(int64_t k, const float* a, const float* b, float* c, int64_t ldc, bool from_c) {
  int64_t k4 = k / 4, rest = k % 4;
  const int64_t from = from_c, ldc_bytes = ldc * int64_t(sizeof(float));
  float* c3 = c + 3 * ldc;
  asm volatile(
      "test %[from], %[from]\n\t"
      "jz 1f\n\t" PCV_SGEMM_ROWS(PCV_SGEMM_LOAD) "jmp 2f\n\t"
      "1:\n\t" PCV_SGEMM_ROWS(PCV_SGEMM_ZERO)
      "2:\n\t"
      "test %[k4], %[k4]\n\t"
      "jz 4f\n\t"
      "3:\n\t" PCV_SGEMM_STEP(0, 0) PCV_SGEMM_STEP(24, 64) PCV_SGEMM_STEP(48, 128) PCV_SGEMM_STEP(72, 192)
      "add $96, %[a]\n\t"
      "add $256, %[b]\n\t"
      "dec %[k4]\n\t"
      "jnz 3b\n\t"
      "4:\n\t"
      "test %[rest], %[rest]\n\t"
      "jz 6f\n\t"
      "5:\n\t" PCV_SGEMM_STEP(0, 0)
      "add $24, %[a]\n\t"
      "add $64, %[b]\n\t"
      "dec %[rest]\n\t"
      "jnz 5b\n\t"
      "6:\n\t" PCV_SGEMM_ROWS(PCV_SGEMM_STORE)
      "vzeroupper\n\t"
      : [a] "+r"(a), [b] "+r"(b), [k4] "+r"(k4), [rest] "+r"(rest)
      : [from] "r"(from), [c] "r"(c), [c3] "r"(c3), [ldc] "r"(ldc_bytes)
      : "cc", "memory", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",
        "xmm11", "xmm12", "xmm13", "xmm14", "xmm15");
}
#undef PCV_SGEMM_STEP
#undef PCV_SGEMM_ROWS
#undef PCV_SGEMM_LOAD
#undef PCV_SGEMM_STORE
#undef PCV_SGEMM_ZERO

// A tile at the edge of C (fewer than 6 rows or 16 columns): through a full tile in registers'
// order, so that its elements get the same chains as anywhere else.
void edge_kernel(int64_t k, const float* a, const float* b, float* c, int64_t ldc, int64_t rows, int64_t cols,
                 bool from_c) {
  alignas(32) float tile[kMr * kNr];
  const size_t row_bytes = size_t(cols) * sizeof(float);
  if (from_c)
    for (int64_t i = 0; i < rows; ++i) std::memcpy(tile + i * kNr, c + i * ldc, row_bytes);
  micro_kernel(k, a, b, tile, kNr, from_c);
  for (int64_t i = 0; i < rows; ++i) std::memcpy(c + i * ldc, tile + i * kNr, row_bytes);
}

// ---- packing ----
// Operands come from memory in a training step (other layers ran in between): the packing asks for
// each line ahead of its reads, along a row (floats) or down the rows.
constexpr int64_t kPackAhead = 64, kPackAheadRows = 8;
// Transposes the 8 x 8 block held in r[0..7] (row i in r[i]) in place.
void transpose8(__m256 r[8]) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  r[0] = _mm256_permute2f128_ps(s0, s4, 0x20), r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
  r[2] = _mm256_permute2f128_ps(s2, s6, 0x20), r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
  r[4] = _mm256_permute2f128_ps(s0, s4, 0x31), r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
  r[6] = _mm256_permute2f128_ps(s2, s6, 0x31), r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

// A panel of `width` (6 or 16) lines, each of k values: out[p·width + i] = scale·line_i[p], the
// lines past `lines` zero. Line i's value p is at x + i·step + p·stride: stride 1 for rows of a
// row-major operand read across (transposed into the panel 8 x 8 at a time), step 1 for its columns
// read down (copied a row at a time). Panels of 6 may write 2 floats past their end (the next
// panel's, written after, or room the caller sets aside).
void pack_panel(const float* x, int64_t step, int64_t stride, int64_t lines, int64_t width, int64_t k, float scale,
                float* out) {
  int64_t p = 0;
  const auto ahead = [](const float* at) { _mm_prefetch(reinterpret_cast<const char*>(at), _MM_HINT_T0); };
  if (lines == width && stride == 1) {
    const __m256 s = _mm256_set1_ps(scale);
    for (; p + 8 <= k; p += 8)
      for (int64_t g = 0; g < width; g += 8) {
        __m256 r[8];
        for (int64_t i = 0; i < 8 && g + i < width; ++i) ahead(x + (g + i) * step + p + kPackAhead);
        for (int64_t i = 0; i < 8; ++i)
          r[i] = g + i < width ? _mm256_mul_ps(s, _mm256_loadu_ps(x + (g + i) * step + p)) : _mm256_setzero_ps();
        transpose8(r);
        // Rows of 6: each 8-wide store runs 2 values into the next row, which the next store
        // overwrites (the panel's room has 2 floats to spare after its end for the last one).
        for (int64_t q = 0; q < 8; ++q) _mm256_storeu_ps(out + (p + q) * width + g, r[q]);
      }
  } else if (lines == width && step == 1 && width == kNr) {
    const __m256 s = _mm256_set1_ps(scale);
    for (; p < k; ++p) {
      const float* row = x + p * stride;
      ahead(row + kPackAheadRows * stride);
      ahead(row + kPackAheadRows * stride + 15);
      _mm256_store_ps(out + p * kNr, _mm256_mul_ps(s, _mm256_loadu_ps(row)));
      _mm256_store_ps(out + p * kNr + 8, _mm256_mul_ps(s, _mm256_loadu_ps(row + 8)));
    }
  } else if (lines == width && step == 1) {  // 6 values a depth: a masked load (never past them),
    const __m256 s = _mm256_set1_ps(scale);   // an 8-wide store that the next one overwrites
    const __m256i six = _mm256_setr_epi32(-1, -1, -1, -1, -1, -1, 0, 0);
    for (; p < k; ++p) {
      ahead(x + (p + kPackAheadRows) * stride);
      _mm256_storeu_ps(out + p * width, _mm256_mul_ps(s, _mm256_maskload_ps(x + p * stride, six)));
    }
  }
  for (; p < k; ++p) {
    for (int64_t i = 0; i < lines; ++i) out[p * width + i] = scale * x[i * step + p * stride];
    for (int64_t i = lines; i < width; ++i) out[p * width + i] = 0.0f;
  }
}

// op(A)[i][p] and op(B)[p][j] of row-major A and B: the steps between lines (rows of op(A), columns
// of op(B)) and between depths.
struct Operand {
  const float* x;
  int64_t line_step, depth_step;
  const float* at(int64_t line, int64_t depth) const { return x + line * line_step + depth * depth_step; }
};
Operand op_a(Transpose ta, const float* a, int64_t lda) {
  return ta == Transpose::kNo ? Operand{a, lda, 1} : Operand{a, 1, lda};
}
Operand op_b(Transpose tb, const float* b, int64_t ldb) {
  return tb == Transpose::kNo ? Operand{b, 1, ldb} : Operand{b, ldb, 1};
}

// Lines [l0, l0 + lines) over depths [p0, p0 + k) of `x` in panels of `width`, scaled.
void pack_block(const Operand& x, int64_t l0, int64_t lines, int64_t p0, int64_t k, int64_t width, float scale,
                float* out) {
  for (int64_t l = 0; l < lines; l += width, out += width * k)
    pack_panel(x.at(l0 + l, p0), x.line_step, x.depth_step, least(width, lines - l), width, k, scale, out);
}

// ---- the blocked product ----
// C[m x n] (ldc) continues (from_c) or starts its chains over one depth block of packed A (mc rows
// in 6-row panels) and packed B (nc columns in 16-column panels, the first kc depths of panels
// 16·panel_depth floats apart), kc deep.
void block_product(int64_t mc, int64_t nc, int64_t kc, const float* packed_a, const float* packed_b,
                   int64_t panel_depth, float* c, int64_t ldc, bool from_c) {
  for (int64_t j = 0; j < nc; j += kNr) {
    const float* b = packed_b + j * panel_depth;
    const int64_t cols = least(kNr, nc - j);
    for (int64_t i = 0; i < mc; i += kMr) {
      const float* a = packed_a + i * kc;
      float* tile = c + i * ldc + j;
      const int64_t rows = least(kMr, mc - i);
      if (i + kMr < mc)  // the next tile's rows, from L3 or memory, while this one runs
        for (int64_t r = 0; r < kMr; ++r) _mm_prefetch(reinterpret_cast<const char*>(tile + (kMr + r) * ldc), _MM_HINT_T0);
      if (rows == kMr && cols == kNr) micro_kernel(kc, a, b, tile, ldc, from_c);
      else edge_kernel(kc, a, b, tile, ldc, rows, cols, from_c);
    }
  }
}

// All m rows of C against the first kc depths of one packed depth block of B (nc columns; depth p0
// on of op(A)): op(A) packed a block of rows at a time.
void rows_against_block(const Operand& opa, int64_t m, int64_t p0, int64_t kc, float alpha, const float* panels,
                        int64_t panel_depth, int64_t nc, bool from_c, float* c, int64_t ldc) {
  auto* packed_a = static_cast<float*>(thread_scratch(Slot::kOwnGemmA, size_t(kMc * kKc + 8) * sizeof(float)));
  for (int64_t i0 = 0; i0 < m; i0 += kMc) {
    const int64_t mc = least(kMc, m - i0);
    pack_block(opa, i0, mc, p0, kc, kMr, alpha, packed_a);
    block_product(mc, nc, kc, packed_a, panels, panel_depth, c + i0 * ldc, ldc, from_c);
  }
}

// C = beta·C where beta is neither 0 nor 1 (then every chain starts from C), or C = 0 for alpha = 0.
void scale_c(int64_t m, int64_t n, float beta, float* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
}

// BLAS's cases that read neither A nor B (C = beta·C), and C pre-scaled for other betas than 0 and 1.
// True where nothing is left to do.
bool trivial_or_scaled(int64_t m, int64_t n, int64_t k, float alpha, float beta, float* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return true;
  if (k <= 0 || alpha == 0.0f) {
    if (beta != 1.0f) scale_c(m, n, beta, c, ldc);
    return true;
  }
  if (beta != 0.0f && beta != 1.0f) scale_c(m, n, beta, c, ldc);
  return false;
}

// The depth of a packed operand's block t, and where the block starts.
int64_t block_depth(const OwnPackedB& b, int64_t t) {
  const int64_t rest = b.depth - t * b.block_depth;
  return rest < b.block_depth ? rest : b.block_depth;
}
const float* block_at(const OwnPackedB& b, int64_t t) { return b.panels + t * b.block_depth * b.columns; }

}  // namespace

void sgemm(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (trivial_or_scaled(m, n, k, alpha, beta, c, ldc)) return;
  const Operand opa = op_a(ta, a, lda), opb = op_b(tb, b, ldb);
  // Blocks of near-equal size (a 784-deep product in three of ~262, not 256, 256, 256 and 16).
  const int64_t kc_max = ceil_div(k, ceil_div(k, kKc)), nc_max = round_up(ceil_div(n, ceil_div(n, kNc)), kNr);
  auto* panels = static_cast<float*>(thread_scratch(Slot::kOwnGemmB, size_t(nc_max * kc_max) * sizeof(float)));
  for (int64_t j0 = 0; j0 < n; j0 += nc_max) {
    const int64_t nc = least(nc_max, n - j0);
    for (int64_t p0 = 0; p0 < k; p0 += kc_max) {
      const int64_t kc = least(kc_max, k - p0);
      pack_block(opb, j0, nc, p0, kc, kNr, 1.0f, panels);
      rows_against_block(opa, m, p0, kc, alpha, panels, kc, nc, p0 > 0 || beta != 0.0f, c + j0, ldc);
    }
  }
}

int64_t packed_b_size(int64_t k, int64_t n) { return round_up(n, kNr) * k; }

OwnPackedB pack_b(Transpose tb, int64_t k, int64_t n, const float* b, int64_t ldb, float* out, bool parallel) {
  const OwnPackedB packed{out, k, round_up(n, kNr), kKc};
  const Operand opb = op_b(tb, b, ldb);
  const int64_t blocks = ceil_div(k, kKc), panels = ceil_div(n, kNr);
  detail::parallel_for(blocks * panels, parallel, [&](int64_t task) {
    const int64_t t = task / panels, j = task % panels * kNr, depth = block_depth(packed, t);
    pack_panel(opb.at(j, t * kKc), opb.line_step, opb.depth_step, least(kNr, n - j), kNr, depth, 1.0f,
               out + t * kKc * packed.columns + j * depth);
  });
  return packed;
}

void sgemm_packed_b(Transpose ta, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                    const OwnPackedB& b, int64_t k0, int64_t n0, float beta, float* c, int64_t ldc) {
  if (trivial_or_scaled(m, n, k, alpha, beta, c, ldc)) return;
  const Operand opa = op_a(ta, a, lda);
  for (int64_t p = 0, t = k0 / b.block_depth; p < k; p += block_depth(b, t), ++t) {
    const int64_t depth = block_depth(b, t), kc = least(depth, k - p);
    rows_against_block(opa, m, p, kc, alpha, block_at(b, t) + n0 * depth, depth, n, p > 0 || beta != 0.0f, c, ldc);
  }
}

}  // namespace perceiver::cpu::isa_v3
#endif
