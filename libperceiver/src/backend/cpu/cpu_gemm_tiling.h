// How a large GEMM is split over the OpenMP pool, shared by the float32 products (one
// single-threaded OpenBLAS call per piece) and the bf16 ones (one single-threaded oneDNN call
// per piece, on operands already rounded to bf16). Results are bitwise identical at any number of
// threads: K slices, which change the sums, follow the shape only; so do output tiles, except where
// the caller vouches that its kernels give every row (or column) the same bits wherever a piece
// starts on a multiple of some alignment (TileAlign: OpenBLAS's float32 kernels, probed at start-up
// in cpu_gemm.cpp): then there is one tile per thread, each starting on such a multiple.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include <omp.h>

#include "backend/cpu/cpu_workspace.h"
#include "perceiver/backend.h"

namespace perceiver::cpu::tiling {

// Below this many multiply-adds a single call is cheaper than waking the pool.
constexpr int64_t kMinParallelMacs = int64_t(1) << 18;
// Target number of tiles for a large GEMM: enough to balance 2..16 threads.
constexpr int64_t kTargetTiles = 16;
// K-split: used when K is at least this many times the larger output dimension (float32 pieces,
// whose BLAS call re-packs the shared operand for every output tile: the encoder's chunk dW,
// 704x704x2048, ran at 159 GFLOP/s in output tiles and 203 in K slices against PyTorch's 203 on
// 2 threads)...
constexpr int64_t kKSplitRatio = 2;
// ...or this many times for bf16 pieces, which read operands rounded and packed once (K slices
// made the chunk dW's bf16 step 1-3% slower, and their partials cost 16 MB)...
constexpr int64_t kKSplitRatioBf16 = 4;
// ...in K slices of at least this depth (shallower ones waste the kernels' K blocking)...
constexpr int64_t kMinSliceDepth = 256;
// ...and this many of them: enough to balance 2..8 threads with few partial products to add.
constexpr int64_t kKSlices = 8;

// bf16 pieces span at least this many rows (or columns) of the output: with AMX, oneDNN lays its
// B operand out afresh for every call, which thin pieces repeat many times over. One thread of a
// Sapphire Rapids ran the latent layers' 784x512x512 at 749 GFLOP/s in 64-row tiles, 868 in
// 112-row ones and 1160 in 196-row ones; their dW (512x512x784) at 653 in 64-row tiles, 826 in
// 256-row ones. Fewer pieces balance fewer threads: a price paid on large nodes.
constexpr int64_t kMinTileBf16 = 192;

// Tiles that follow the thread count: at least this many multiply-adds each (the pieces stay
// clear of OpenBLAS's small-matrix kernels, SkylakeX: up to 10^6, whose sums run in another
// order).
constexpr int64_t kMinAlignedTileMacs = int64_t(1) << 21;

// Row and column alignments on which the pieces' kernels keep every output element's bits; 0:
// none vouched for, the tiles follow the shape only.
struct TileAlign {
  int64_t rows = 0, cols = 0;
};
// Those of the float32 products' kernels: OpenBLAS's, found once (cpu_gemm.cpp); none where oneDNN
// runs the pieces.
TileAlign float32_tile_align();

inline int64_t round_up16(int64_t x) { return (x + 15) / 16 * 16; }  // the micro-kernels' fast path

inline int64_t tile_size(int64_t extent, bool bf16) {
  if (bf16) {
    // An even count where there are several: the decoder's 1025 rows made 5 tiles, 3 on one
    // thread and 2 on the other of a 2-core node.
    const int64_t fit = extent / kMinTileBf16, tiles = fit > 1 ? (fit + 1) / 2 * 2 : 1;
    return round_up16((extent + tiles - 1) / tiles);
  }
  return std::max<int64_t>(round_up16((extent + kTargetTiles - 1) / kTargetTiles), 64);
}

// The output tiles of split_output over `extent` rows (or columns): by the shape alone (below), or
// following the thread count (aligned_tile_bounds). By shape: tile_size() apart, or for bf16
// pieces on 32-row boundaries with the last tile taking the rest. bf16 products pad their rows to
// pairs of 16-row tiles (our AMX kernel), so 784 rows in 4 tiles are 192, 192, 192 and 208 (25
// pairs, 12 and 13 a thread on 2 threads) rather than 208, 208, 208 and 160 (26 pairs, 14 and 12).
// Every tiling gives every element the same bits with our AMX kernel; with OpenBLAS's, only tiles
// starting on its row blocks do (TileAlign), so other float32 tilings must not follow the threads.
struct TileBounds {
  int64_t extent, tile, tiles;
  int64_t align;  // > 0: boundaries spread evenly, each on a multiple of this; 0: `tile` apart
  int64_t begin(int64_t t) const {
    if (t >= tiles) return extent;
    return align ? t * extent / tiles / align * align : t * tile;
  }
};
// One tile per thread of the pool, spread evenly on multiples of `align`. Each tile is within one
// alignment of its share, and shares are at least two alignments and 2 · kMinAlignedTileMacs, so
// every tile keeps half its share or more. On 2 threads of a Zen 3 the latent layers' 784x512x512
// ran 7-10% faster in 2-4 row tiles than in 13 of 64 rows (every tile's call packs all of the
// other operand), and a 4-thread pool took 4 and 3 of the 13. One tile inside a parallel region
// (a one-thread team would run them in turn).
inline TileBounds aligned_tile_bounds(int64_t extent, int64_t macs, int64_t align) {
  const int64_t threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  const int64_t tiles =
      std::max<int64_t>(1, std::min({threads, extent / (2 * align), macs / (2 * kMinAlignedTileMacs)}));
  return {extent, 0, tiles, align};
}
inline TileBounds tile_bounds(int64_t extent, bool bf16) {
  const int64_t tile = tile_size(extent, bf16), tiles = (extent + tile - 1) / tile;
  // Tiles of at least 64 rows: no boundary then falls behind the one before it.
  return {extent, tile, tiles, bf16 && extent / tiles >= 64 ? 32 : 0};
}

inline bool use_split_k(int64_t m, int64_t n, int64_t k, int64_t ratio) {
  return k >= ratio * std::max(m, n) && k >= kKSlices * kMinSliceDepth;
}

// k == 0, or an empty output: what BLAS does for k == 0 (C = beta·C; C is not read when beta is
// 0), made explicit because BLAS leaves C untouched then unless beta == 1. True when handled.
template <class T>
bool trivial(int64_t m, int64_t n, int64_t k, T beta, T* c, int64_t ldc) {
  if (m == 0 || n == 0) return true;
  if (k != 0) return false;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == T(0) ? T(0) : beta * c[i * ldc + j];
  return true;
}

// Many problems: one per task (`serial`). Few large ones: each tiled (`tiled`). The choice
// depends on the shape only.
template <class T, class Serial, class Tiled>
void batched(Serial serial, Tiled tiled, Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, T alpha,
             const T* a, int64_t lda, int64_t stride_a, const T* b, int64_t ldb, int64_t stride_b, T beta, T* c,
             int64_t ldc, int64_t stride_c, int64_t batch) {
  if (batch >= 4) {
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t i = 0; i < batch; ++i)
      serial(ta, tb, m, n, k, alpha, a + i * stride_a, lda, b + i * stride_b, ldb, beta, c + i * stride_c, ldc);
  } else {
    for (int64_t i = 0; i < batch; ++i)
      tiled(ta, tb, m, n, k, alpha, a + i * stride_a, lda, b + i * stride_b, ldb, beta, c + i * stride_c, ldc);
  }
}

// Operand views into A and B (element type In) for rows/cols/depth offsets, row-major.
template <class In>
const In* offset_a(Transpose ta, const In* a, int64_t lda, int64_t row, int64_t depth) {
  return ta == Transpose::kNo ? a + row * lda + depth : a + depth * lda + row;
}
template <class In>
const In* offset_b(Transpose tb, const In* b, int64_t ldb, int64_t depth, int64_t col) {
  return tb == Transpose::kNo ? b + depth * ldb + col : b + col * ldb + depth;
}

// The encoder's reductions over its 52k input rows (P·V, dQ = dS·K, dW = dYᵀ·X, also per 2048-row
// chunk) have a small output and a large K. Tiling the output re-packs the whole K extent of the
// shared operand once per tile (0.6-0.8x PyTorch in bench_ops; 61 against 94 GFLOP/s for the
// 704x704x4096 chunk dW on one thread, dev_gemm_tiling); slicing K packs each operand once. Each
// slice is one serial call into its own partial product, and the partials are added in slice
// order, so the result does not depend on the thread count (it differs from the unsplit sum in
// rounding).
template <class T, class In, class Serial>
void split_k(Serial serial, Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, T alpha, const In* a,
             int64_t lda, const In* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  const int64_t mn = m * n;
  T* const partial = scratch<T>(Slot::kGemmSlices, size_t(kKSlices * mn));  // every element is written
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t s = 0; s < kKSlices; ++s) {
    const int64_t k0 = s * k / kKSlices, k1 = (s + 1) * k / kKSlices;
    serial(ta, tb, m, n, k1 - k0, alpha, offset_a(ta, a, lda, 0, k0), lda, offset_b(tb, b, ldb, k0, 0), ldb, T(0),
           partial + s * mn, n);
  }
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < m; ++i) {
    T* total = partial + i * n;  // row i of slice 0, into which the others are added in order
    for (int64_t s = 1; s < kKSlices; ++s) {
      const T* p = partial + s * mn + i * n;
      for (int64_t j = 0; j < n; ++j) total[j] += p[j];
    }
    T* ci = c + i * ldc;
    if (beta == T(0)) {  // C is not read, as in BLAS
      for (int64_t j = 0; j < n; ++j) ci[j] = total[j];
    } else {
      for (int64_t j = 0; j < n; ++j) ci[j] = beta * ci[j] + total[j];
    }
  }
}

// Splits the output into tiles of rows (split_rows) or columns; K is not split, so every element
// is one dot-product chain whatever the tiling.
template <class T, class In, class Serial>
void split_output(Serial serial, Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, T alpha,
                  const In* a, int64_t lda, const In* b, int64_t ldb, T beta, T* c, int64_t ldc, bool split_rows,
                  TileAlign aligned = {}) {
  const int64_t extent = split_rows ? m : n, align = split_rows ? aligned.rows : aligned.cols;
  const TileBounds bounds =
      align ? aligned_tile_bounds(extent, m * n * k, align) : tile_bounds(extent, std::is_same_v<In, uint16_t>);
  if (bounds.tiles == 1) return serial(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  // Static: each thread meets the same tiles every call, so the first call sizes every thread's
  // scratch for the shapes it will run (with few, unequal tiles, dynamic scheduling handed a
  // thread a new shape on a later call, and its oneDNN scratchpad grew then).
#pragma omp parallel for schedule(static, 1)
  for (int64_t t = 0; t < bounds.tiles; ++t) {
    const int64_t begin = bounds.begin(t), count = bounds.begin(t + 1) - begin;
    if (split_rows) {
      serial(ta, tb, count, n, k, alpha, offset_a(ta, a, lda, begin, 0), lda, b, ldb, beta, c + begin * ldc, ldc);
    } else {
      serial(ta, tb, m, count, k, alpha, a, lda, offset_b(tb, b, ldb, 0, begin), ldb, beta, c + begin, ldc);
    }
  }
}

// How split() cuts a product: K slices for the reductions over many rows, else output tiles over
// the larger output dimension (rows where m ≥ n). In: float (float32 pieces) or uint16_t (bf16).
enum class Pieces { kKSlices, kRowTiles, kColumnTiles };
template <class In>
Pieces pieces(int64_t m, int64_t n, int64_t k) {
  if (use_split_k(m, n, k, std::is_same_v<In, uint16_t> ? kKSplitRatioBf16 : kKSplitRatio)) return Pieces::kKSlices;
  return m >= n ? Pieces::kRowTiles : Pieces::kColumnTiles;
}

// Whether output tiles are rows: where m ≥ n; also down to half of n where row tiles follow the
// threads (the decoder's 1025 x 1026 products: one call's bits, and a tile per thread rather than
// 16 by shape).
inline bool row_tiles(int64_t m, int64_t n, TileAlign aligned) { return m >= n || (aligned.rows && 2 * m >= n); }

// A large GEMM in pieces: pieces() says which kind; output tiles follow the thread count where
// `aligned` vouches for the kernels (aligned_tile_bounds), else the shape.
template <class T, class In, class Serial>
void split(Serial serial, Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, T alpha, const In* a,
           int64_t lda, const In* b, int64_t ldb, T beta, T* c, int64_t ldc, TileAlign aligned = {}) {
  if (pieces<In>(m, n, k) == Pieces::kKSlices)
    return split_k(serial, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  split_output(serial, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, row_tiles(m, n, aligned), aligned);
}

}  // namespace perceiver::cpu::tiling
