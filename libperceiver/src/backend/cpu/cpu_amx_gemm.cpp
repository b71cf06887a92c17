// The AMX bf16 product (cpu_amx_gemm.h). Both operands are packed into 1 KB tiles first, padded
// with zeros to whole tiles, so the compute loop loads only full tiles with one configuration:
//   A tile (16 rows of op(A) × 32 of K): row r holds op(A)(r, k0..k0+31) (where A's rows are such
//   tiles as stored, the loop reads them in place: a_in_place);
//   B tile (32 of K × 16 columns of op(B)), pair-interleaved as TDPBF16PS reads it: row p holds
//   for each column j the two values op(B)(k0+2p, j), op(B)(k0+2p+1, j) side by side.
// Each 32 × 32 block of C is four accumulator tiles (two A tiles × two B tiles, the eight tile
// registers in all), summed over K and written out once.
#include "backend/cpu/cpu_amx_gemm.h"

#include "perceiver/error.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <omp.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <iterator>

#include "backend/cpu/cpu_bf16_avx512.h"
#include "backend/cpu/cpu_workspace.h"
#include "backend/cpu/cpu_parallel.h"
#include "core/cpu_features.h"
#endif

namespace perceiver::cpu {

#if defined(__x86_64__)

// The kernel's functions are compiled for AMX and AVX-512 here, not the file (which also holds
// amx_available, run on any CPU); they run only after amx_available() said yes.
#define PCV_AMX __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,amx-tile,amx-bf16")))
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12.0-12.2 warns falsely on `__m512 __Y = __Y;` in avx512fintrin.h (google/highway#710).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace {

constexpr int64_t kTileRows = 16;     // rows of a tile (and of C per accumulator tile)
constexpr int64_t kTileDepth = 32;    // bf16 values of K per tile row
constexpr int64_t kTileValues = 512;  // bf16 values in a 1 KB tile
// The B tiles that each pair of A row tiles meets before the next pair, at most this many bytes:
// they stay in the L2 cache (2 MB a core on Sapphire Rapids) while the A tiles stream past.
// One thread of a Sapphire Rapids ran 2048 × 704 × 704 at 1010 GFLOP/s in 176 KB blocks and 1260
// with all of B's 1 MB; 704 × 704 × 2048, whose B is 2.8 MB, at 1318 in 512 KB blocks and 784 in one.
constexpr int64_t kColumnBlockBytes = int64_t(768) << 10;

// GCC's AMX intrinsics are asm statements that do not tell the compiler they read or write memory:
// this orders the packing stores before the tile loads, and the tile stores before the reads.
inline void memory_barrier() { __asm__ __volatile__("" ::: "memory"); }

// One operand as the kernel reads it: element (r, kk) of the r-th row (of op(A)) or column (of
// op(B)) at depth kk, stored with K contiguous (x[r·ld + kk]) or strided (x[kk·ld + r]). Its values
// are bf16 (x), or float32 (xf, x null) rounded to bf16 as they are packed.
struct Operand {
  const uint16_t* x;
  int64_t ld;
  bool k_contiguous;
  int64_t rows, depth;  // extent of r and of kk
  const float* xf = nullptr;
};

int64_t tiles(int64_t extent, int64_t per_tile) { return (extent + per_tile - 1) / per_tile; }

// A 16 × 16 matrix of 32-bit words (a pair of bf16 values each) transposed in registers.
PCV_AMX void transpose_words(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  for (int h = 0; h < 16; h += 8) {
    for (int i = 0; i < 4; ++i) {
      t[h + i] = _mm512_shuffle_i32x4(r[h + i], r[h + i + 4], 0x88);
      t[h + i + 4] = _mm512_shuffle_i32x4(r[h + i], r[h + i + 4], 0xdd);
    }
  }
  for (int i = 0; i < 8; ++i) {
    r[i] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0xdd);
  }
}

// 16 values of stored row kk from r0 on (the rows in rmask) widened to words; zeros unless `inside`.
PCV_AMX __m512i widened(const Operand& op, int64_t kk, int64_t r0, __mmask16 rmask, bool inside) {
  if (!inside) return _mm512_setzero_si512();
  return _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(rmask, op.x + kk * op.ld + r0));
}

// 16 floats of stored row kk from r0 on (the rows in rmask); zeros past the depth.
PCV_AMX __m512 float_row(const Operand& op, int64_t kk, int64_t r0, __mmask16 rmask) {
  if (kk >= op.depth) return _mm512_setzero_ps();
  return _mm512_maskz_loadu_ps(rmask, op.xf + kk * op.ld + r0);
}

// The 32 values along K of stored row r from k0 on (those in kmask) as one vector.
PCV_AMX __m512i row_of_k(const Operand& op, int64_t r, int64_t k0, __mmask32 kmask) {
  if (!op.xf) return _mm512_maskz_loadu_epi16(kmask, op.x + r * op.ld + k0);
  const float* x = op.xf + r * op.ld + k0;
  return bf16x32(_mm512_maskz_loadu_ps(__mmask16(kmask), x), _mm512_maskz_loadu_ps(__mmask16(kmask >> 16), x + 16));
}

// The 16 × 16 words of block [r0, r0+16) × [k0, k0+32), zero beyond the operand: row i holds,
// for K contiguous, row r0+i's 16 pairs along K ("by rows"); for K strided, the pairs (kk, kk+1)
// with kk = k0+2i of the 16 rows side by side ("by pairs"), interleaved from two stored rows.
// Masked loads read nothing beyond the operand.
PCV_AMX void load_words(const Operand& op, int64_t r0, int64_t k0, __m512i w[16]) {
  // Rows past the operand: the padding that makes whole pairs of row tiles.
  const int64_t rows = std::clamp<int64_t>(op.rows - r0, 0, kTileRows), depth = std::min(kTileDepth, op.depth - k0);
  if (op.k_contiguous) {
    const __mmask32 kmask = depth == kTileDepth ? ~__mmask32(0) : __mmask32((1u << depth) - 1);
    for (int64_t i = 0; i < kTileRows; ++i)
      w[i] = i < rows ? row_of_k(op, r0 + i, k0, kmask) : _mm512_setzero_si512();
    return;
  }
  const __mmask16 rmask = rows == kTileRows ? __mmask16(0xffff) : __mmask16((1u << rows) - 1);
  if (op.xf) {  // rows kk and kk + 1 rounded into 32 values, then interleaved into words
    const __m512i pairs = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                                           21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    for (int64_t i = 0; i < kTileRows; ++i) {
      const __m512i both = bf16x32(float_row(op, k0 + 2 * i, r0, rmask), float_row(op, k0 + 2 * i + 1, r0, rmask));
      w[i] = _mm512_permutexvar_epi16(pairs, both);
    }
    return;
  }
  for (int64_t i = 0; i < kTileRows; ++i)
    w[i] = _mm512_or_si512(widened(op, k0 + 2 * i, r0, rmask, 2 * i < depth),
                           _mm512_slli_epi32(widened(op, k0 + 2 * i + 1, r0, rmask, 2 * i + 1 < depth), 16));
}

// Tile (r0, k0) of an operand, by rows (`a_layout`, an A tile) or by pairs (a B tile).
PCV_AMX void pack_tile(const Operand& op, int64_t r0, int64_t k0, bool a_layout, uint16_t* tile) {
  __m512i w[16];
  load_words(op, r0, k0, w);
  if (a_layout != op.k_contiguous) transpose_words(w);
  for (int i = 0; i < 16; ++i) _mm512_store_si512(tile + i * kTileDepth, w[i]);
}

// The tiles of row tiles [first, last) of an operand, tile (i, q) at ((i − first)·depth_tiles + q),
// walking the operand as stored (along its rows of K, or down K) so that every cache line is read
// once.
PCV_AMX void pack(const Operand& op, int64_t first, int64_t last, int64_t depth_tiles, bool a_layout,
                  uint16_t* out) {
  const int64_t count = last - first;
  const int64_t outer = op.k_contiguous ? count : depth_tiles, inner = op.k_contiguous ? depth_tiles : count;
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t n = 0; n < inner; ++n) {
      const int64_t i = op.k_contiguous ? o : n, q = op.k_contiguous ? n : o;
      pack_tile(op, (first + i) * kTileRows, q * kTileDepth, a_layout, out + (i * depth_tiles + q) * kTileValues);
    }
  }
}

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
};

// Every tile register: 16 rows of 64 bytes.
PCV_AMX void configure_tiles() {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.bytes_per_row[t] = 64;
    cfg.rows[t] = kTileRows;
  }
  // GCC 12's _tile_loadconfig tells the compiler that it reads 8 of the 64 bytes, so the stores
  // above past those may be dropped as dead (the row widths were, in a build that inlined this
  // into changed callers, and LDTILECFG then faulted on the zero widths): the barrier keeps all 64.
  memory_barrier();
  _tile_loadconfig(&cfg);
}

struct Output {
  float* c;
  int64_t ldc, m, n;
  float alpha, beta;
  // C += op(A)·op(B): the tiles start from C's values instead of zero and go straight back.
  bool accumulate() const { return alpha == 1.0f && beta == 1.0f; }
  // The tiles' sums are C's new values as they are (no alpha or beta left to apply).
  bool stores_sums() const { return accumulate() || (alpha == 1.0f && beta == 0.0f); }
};

// Rows and columns of a 32 × 32 block of C inside C.
int64_t inside(int64_t extent, int64_t at) { return std::clamp<int64_t>(extent - at, 0, 2 * kTileRows); }

// The four accumulator tiles to and from a 32 × 32 float32 block (row stride 32).
PCV_AMX void load_accumulators(const float* acc) {
  _tile_loadd(0, acc, 128);
  _tile_loadd(1, acc + kTileRows, 128);
  _tile_loadd(2, acc + kTileRows * 32, 128);
  _tile_loadd(3, acc + kTileRows * 32 + kTileRows, 128);
}
PCV_AMX void store_accumulators(float* acc) {
  _tile_stored(0, acc, 128);
  _tile_stored(1, acc + kTileRows, 128);
  _tile_stored(2, acc + kTileRows * 32, 128);
  _tile_stored(3, acc + kTileRows * 32 + kTileRows, 128);
  memory_barrier();
}

// The accumulators (a 32 × 32 block, row stride 32) into C at (i0, j0): C = alpha·acc + beta·C,
// or C = acc where the tiles started from C; the rows and columns inside C only.
PCV_AMX void write_block(const Output& out, const float* acc, int64_t i0, int64_t j0) {
  const int64_t rows = inside(out.m, i0), cols = inside(out.n, j0);
  const bool plain = out.stores_sums();
  const __m512 alpha = _mm512_set1_ps(out.alpha), beta = _mm512_set1_ps(out.beta);
  for (int64_t h = 0; h < cols; h += kTileRows) {
    const __mmask16 mask = __mmask16((1u << std::min(kTileRows, cols - h)) - 1);
    for (int64_t r = 0; r < rows; ++r) {
      float* c = out.c + (i0 + r) * out.ldc + j0 + h;
      __m512 y = _mm512_load_ps(acc + r * 32 + h);
      if (!plain) {
        y = _mm512_mul_ps(alpha, y);
        if (out.beta != 0.0f) y = _mm512_add_ps(_mm512_mul_ps(beta, _mm512_maskz_loadu_ps(mask, c)), y);
      }
      _mm512_mask_storeu_ps(c, mask, y);
    }
  }
}

// C's 32 × 32 block at (i0, j0) into acc (row stride 32), zero outside C: where a block that
// accumulates is not whole, its tiles start from this copy.
PCV_AMX void read_block(const Output& out, int64_t i0, int64_t j0, float* acc) {
  const int64_t rows = inside(out.m, i0), cols = inside(out.n, j0);
  for (int64_t r = 0; r < 2 * kTileRows; ++r)
    for (int64_t h = 0; h < 2 * kTileRows; h += kTileRows) {
      const int64_t valid = r < rows ? std::clamp<int64_t>(cols - h, 0, kTileRows) : 0;
      const __mmask16 mask = __mmask16((1u << valid) - 1);
      _mm512_store_ps(acc + r * 32 + h, _mm512_maskz_loadu_ps(mask, out.c + (i0 + r) * out.ldc + j0 + h));
    }
}

// Where the compute loop reads the A tiles: tile (i, q) at x + i·row + q·step, its rows `bytes`
// apart (packed: row = depth_tiles·512 values, step = 512, bytes = 64; in place: A's own rows).
// `tail`: the last pair of row tiles, packed, where A is read in place but its rows end inside it.
struct ATiles {
  const uint16_t* x;
  int64_t row, step, bytes;
  const uint16_t* tail = nullptr;
  int64_t tail_tile = -1;  // the tail's first row tile
};

// C block (i0, j0) of 32 × 32 from a pair of A row tiles (tile (r, q) at a + r·a_row + q·a_step,
// rows a_bytes apart) and B tiles b (two column tiles, b_stride values apart).
// B's tiles are loaded with TILELOADDT1's hint that the L1 cache will not see them again soon
// (the next block reads the same A pair and the next B pair; B's tiles come back from L2 for the
// next row pair), which leaves L1 to A's. Every element is the same chain whatever the block's
// place: from zero (then alpha and beta) or, accumulating, from C's value.
PCV_AMX void block(const uint16_t* a, int64_t a_row, int64_t a_step, int64_t a_bytes, const uint16_t* b,
                   int64_t b_stride, int64_t depth_tiles, const Output& out, int64_t i0, int64_t j0) {
  const uint16_t* a1 = a + a_row;
  const uint16_t* b1 = b + b_stride;
  const bool whole = i0 + 2 * kTileRows <= out.m && j0 + 2 * kTileRows <= out.n;
  float* c = out.c + i0 * out.ldc + j0;
  const int64_t stride = out.ldc * int64_t(sizeof(float)), down = kTileRows * out.ldc;
  alignas(64) float acc[4 * kTileRows * kTileRows];
  if (out.accumulate() && whole) {
    memory_barrier();  // C as our earlier stores left it
    _tile_loadd(0, c, stride);
    _tile_loadd(1, c + kTileRows, stride);
    _tile_loadd(2, c + down, stride);
    _tile_loadd(3, c + down + kTileRows, stride);
  } else if (out.accumulate()) {
    read_block(out, i0, j0, acc);
    memory_barrier();
    load_accumulators(acc);
  } else {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  }
  for (int64_t q = 0; q < depth_tiles; ++q) {
    _tile_loadd(4, a + q * a_step, a_bytes);
    _tile_loadd(5, a1 + q * a_step, a_bytes);
    _tile_stream_loadd(6, b + q * kTileValues, 64);
    _tile_stream_loadd(7, b1 + q * kTileValues, 64);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  if (whole && out.stores_sums()) {  // straight into C
    _tile_stored(0, c, stride);
    _tile_stored(1, c + kTileRows, stride);
    _tile_stored(2, c + down, stride);
    _tile_stored(3, c + down + kTileRows, stride);
    memory_barrier();
    return;
  }
  store_accumulators(acc);
  write_block(out, acc, i0, j0);
}

PCV_AMX void multiply(const ATiles& at, const AmxPackedB& b, int64_t row_tiles, int64_t col_tiles,
                      int64_t depth_tiles, const Output& out) {
  configure_tiles();
  const int64_t block_tiles = std::max<int64_t>(2, kColumnBlockBytes / (depth_tiles * kTileValues * 2) / 2 * 2);
  for (int64_t j0 = 0; j0 < col_tiles; j0 += block_tiles) {
    const int64_t j1 = std::min(col_tiles, j0 + block_tiles);
    for (int64_t i = 0; i < row_tiles; i += 2) {
      const bool tail = i == at.tail_tile;
      const uint16_t* a = tail ? at.tail : at.x + i * at.row;
      const int64_t row = tail ? depth_tiles * kTileValues : at.row, step = tail ? kTileValues : at.step;
      for (int64_t j = j0; j < j1; j += 2)
        block(a, row, step, tail ? 64 : at.bytes, b.tiles + j * b.column_stride, b.column_stride, depth_tiles, out,
              i * kTileRows, j * kTileRows);
    }
  }
  _tile_release();
}

// Pairs of row or column tiles (the 32 × 32 blocks), and K in whole tiles, at least one.
int64_t tile_pairs(int64_t extent) { return 2 * tiles(extent, 2 * kTileRows); }
int64_t depth_tiles_of(int64_t k) { return std::max<int64_t>(1, tiles(k, kTileDepth)); }

// Whether the compute loop can load A's tiles from its rows as they are: K along the rows in whole
// tiles (at least one: with K = 0 the loop still runs one tile, of zeros where packed), and every
// tile row on a 64-byte boundary (a tile load whose rows straddle cache lines takes several times
// as long: README.md, "Our AMX kernel").
bool rows_are_tiles(bool k_contiguous, int64_t k, int64_t lda) {
  return k_contiguous && k > 0 && k % kTileDepth == 0 && (lda * int64_t(sizeof(uint16_t))) % 64 == 0;
}
bool a_in_place(const Operand& a) {
  return a.x && rows_are_tiles(a.k_contiguous, a.depth, a.ld) && reinterpret_cast<uintptr_t>(a.x) % 64 == 0;
}

// B's tiles into `out`, a pair of column tiles at a time (over the pool where `parallel`: each pair
// writes its own tiles).
void pack_b(const Operand& op, uint16_t* out, bool parallel) {
  const int64_t depth_tiles = depth_tiles_of(op.depth);
  detail::parallel_for(tile_pairs(op.rows) / 2, parallel && op.rows * op.depth >= (int64_t(1) << 16),
                       [&](int64_t pair) {
                         pack(op, 2 * pair, 2 * pair + 2, depth_tiles, false, out + 2 * pair * depth_tiles * kTileValues);
                       });
}

// A's tiles (packed, or read in place with only a last partial pair of row tiles packed), then the
// product over B packed (by the caller, or by amx_gemm_bf16). In place saves a copy of A per call:
// the encoder's blocks of 192 query rows were packed again for every key chunk. An A of float32
// values (op.xf) is packed, rounded as it goes.
void multiply_packed_b(const Operand& op, const AmxPackedB& b, const Output& out) {
  const int64_t m = op.rows, k = op.depth, lda = op.ld;
  const uint16_t* a = op.x;
  const int64_t row_tiles = tile_pairs(m), depth_tiles = depth_tiles_of(k), pair_values = 2 * depth_tiles * kTileValues;
  ATiles at{};
  if (a_in_place(op)) {
    at = {a, kTileRows * lda, kTileDepth, lda * int64_t(sizeof(uint16_t))};
    const int64_t whole_tiles = m / (2 * kTileRows) * 2;
    if (whole_tiles < row_tiles) {  // rows end inside the last pair: that pair packed
      auto* tail = scratch<uint16_t>(Slot::kAmxA, size_t(pair_values));
      pack(op, whole_tiles, row_tiles, depth_tiles, true, tail);
      at.tail = tail;
      at.tail_tile = whole_tiles;
    }
  } else {
    auto* ap = scratch<uint16_t>(Slot::kAmxA, size_t(row_tiles * depth_tiles * kTileValues));
    pack(op, 0, row_tiles, depth_tiles, true, ap);
    at = {ap, depth_tiles * kTileValues, kTileValues, 64};
  }
  memory_barrier();
  multiply(at, b, row_tiles, tile_pairs(out.n), depth_tiles, out);
}

PCV_AMX float tile_chains(int64_t iterations) {
  configure_tiles();
  alignas(64) uint16_t ones[kTileValues];
  std::fill(std::begin(ones), std::end(ones), uint16_t(0x3f80));  // bf16 ones: the sums stay finite
  alignas(64) float sums[kTileRows * kTileRows];
  memory_barrier();          // the ones stored before the tile loads read them
  _tile_loadd(4, ones, 64);  // tile numbers are immediates
  _tile_loadd(5, ones, 64);
  _tile_loadd(6, ones, 64);
  _tile_loadd(7, ones, 64);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t i = 0; i < iterations; ++i) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, sums, 64);
  memory_barrier();
  _tile_release();
  return sums[0];
}

// Asks Linux for the tile data state (arch_prctl ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA): until
// then a tile instruction raises SIGILL. The permission is the whole process's.
bool request_tile_permission() {
  constexpr long kReqXcompPerm = 0x1023, kXtiledata = 18;
  return syscall(SYS_arch_prctl, kReqXcompPerm, kXtiledata) == 0;
}

}  // namespace

bool amx_available() {
  static const bool ok = [] {
    const CpuFeatures& f = host_cpu_features();
    return f.amx_tile && f.amx_bf16 && f.avx512_core() && f.avx512_bf16 && request_tile_permission();
  }();
  return ok;
}

void amx_gemm_bf16(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
                   int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  PCV_CHECK(amx_available(), "amx_gemm_bf16: this CPU or kernel offers no AMX tiles");
  if (m <= 0 || n <= 0) return;
  auto* bp = scratch<uint16_t>(Slot::kAmxB, size_t(amx_packed_b_size(k, n)));
  pack_b({b, ldb, tb == Transpose::kYes, n, k}, bp, false);
  multiply_packed_b({a, lda, ta == Transpose::kNo, m, k}, AmxPackedB::at(bp, k), {c, ldc, m, n, alpha, beta});
}

bool amx_reads_a_in_place(Transpose ta, int64_t k, int64_t lda) { return rows_are_tiles(ta == Transpose::kNo, k, lda); }

AmxPackedB AmxPackedB::at(const uint16_t* tiles, int64_t k) { return {tiles, depth_tiles_of(k) * kTileValues}; }

AmxPackedB AmxPackedB::sub(int64_t k0, int64_t n0) const {
  PCV_CHECK(k0 % kTileDepth == 0 && n0 % (2 * kTileRows) == 0, "AmxPackedB::sub(", k0, ", ", n0,
            "): not on a 32-value boundary");
  return {tiles + (n0 / kTileRows) * column_stride + (k0 / kTileDepth) * kTileValues, column_stride};
}

int64_t amx_packed_b_size(int64_t k, int64_t n) { return tile_pairs(n) * depth_tiles_of(k) * kTileValues; }

AmxPackedB amx_pack_b(Transpose tb, int64_t k, int64_t n, const uint16_t* b, int64_t ldb, uint16_t* out,
                      bool parallel) {
  PCV_CHECK(amx_available(), "amx_pack_b: this CPU or kernel offers no AMX tiles");
  pack_b({b, ldb, tb == Transpose::kYes, n, k}, out, parallel);
  return AmxPackedB::at(out, k);
}

AmxPackedB amx_pack_b(Transpose tb, int64_t k, int64_t n, const float* b, int64_t ldb, uint16_t* out, bool parallel) {
  PCV_CHECK(amx_available(), "amx_pack_b: this CPU or kernel offers no AMX tiles");
  pack_b({nullptr, ldb, tb == Transpose::kYes, n, k, b}, out, parallel);
  return AmxPackedB::at(out, k);
}

void amx_gemm_bf16_packed_b(Transpose ta, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
                            int64_t lda, const AmxPackedB& b, float beta, float* c, int64_t ldc) {
  PCV_CHECK(amx_available(), "amx_gemm_bf16_packed_b: this CPU or kernel offers no AMX tiles");
  if (m <= 0 || n <= 0) return;
  multiply_packed_b({a, lda, ta == Transpose::kNo, m, k}, b, {c, ldc, m, n, alpha, beta});
}

void amx_gemm_bf16_packed_b(Transpose ta, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                            const AmxPackedB& b, float beta, float* c, int64_t ldc) {
  PCV_CHECK(amx_available(), "amx_gemm_bf16_packed_b: this CPU or kernel offers no AMX tiles");
  if (m <= 0 || n <= 0) return;
  multiply_packed_b({nullptr, lda, ta == Transpose::kNo, m, k, a}, b, {c, ldc, m, n, alpha, beta});
}

float amx_tile_chains(int64_t iterations) {
  PCV_CHECK(amx_available(), "amx_tile_chains: this CPU or kernel offers no AMX tiles");
  return tile_chains(iterations);
}

#else  // not x86-64: no AMX

bool amx_available() { return false; }

bool amx_reads_a_in_place(Transpose, int64_t, int64_t) { return false; }

void amx_gemm_bf16(Transpose, Transpose, int64_t, int64_t, int64_t, float, const uint16_t*, int64_t,
                   const uint16_t*, int64_t, float, float*, int64_t) {
  PCV_FAIL("amx_gemm_bf16: AMX is an x86-64 feature");
}

AmxPackedB AmxPackedB::at(const uint16_t*, int64_t) { PCV_FAIL("AmxPackedB: AMX is an x86-64 feature"); }

AmxPackedB AmxPackedB::sub(int64_t, int64_t) const { PCV_FAIL("AmxPackedB: AMX is an x86-64 feature"); }

int64_t amx_packed_b_size(int64_t, int64_t) { PCV_FAIL("amx_packed_b_size: AMX is an x86-64 feature"); }

AmxPackedB amx_pack_b(Transpose, int64_t, int64_t, const uint16_t*, int64_t, uint16_t*, bool) {
  PCV_FAIL("amx_pack_b: AMX is an x86-64 feature");
}

AmxPackedB amx_pack_b(Transpose, int64_t, int64_t, const float*, int64_t, uint16_t*, bool) {
  PCV_FAIL("amx_pack_b: AMX is an x86-64 feature");
}

void amx_gemm_bf16_packed_b(Transpose, int64_t, int64_t, int64_t, float, const uint16_t*, int64_t, const AmxPackedB&,
                            float, float*, int64_t) {
  PCV_FAIL("amx_gemm_bf16_packed_b: AMX is an x86-64 feature");
}

void amx_gemm_bf16_packed_b(Transpose, int64_t, int64_t, int64_t, float, const float*, int64_t, const AmxPackedB&,
                            float, float*, int64_t) {
  PCV_FAIL("amx_gemm_bf16_packed_b: AMX is an x86-64 feature");
}

float amx_tile_chains(int64_t) { PCV_FAIL("amx_tile_chains: AMX is an x86-64 feature"); }

#endif

}  // namespace perceiver::cpu
