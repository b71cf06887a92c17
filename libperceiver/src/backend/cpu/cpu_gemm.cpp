// GEMM on CPU: each tile (or K slice) is one single-threaded call, and our OpenMP pool runs them.
// Why not a threaded library: two thread pools on the same cores fight (up to 2.4x lost here,
// DESIGN.md #6), and a library's own split depends on its thread count, which would make results
// depend on the number of threads. float32 calls go to the kernels cpu_sgemm.h chooses (oneDNN's
// matmul on AVX-512 CPUs, OpenBLAS elsewhere, ours with PERCEIVER_CPU_GEMM=own); float64 ones to
// OpenBLAS.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <type_traits>

#include <cblas.h>

#include "backend/cpu/cpu_dnnl.h"
#include "backend/cpu/cpu_gemm_tiling.h"
#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_sgemm.h"
#include "backend/cpu/cpu_workspace.h"
#include "perceiver/error.h"

namespace perceiver::cpu {
namespace {

// oneDNN's per-call set-up (a primitive lookup, three memory objects) outweighs its faster
// kernels on very small or very thin products (e.g. N = 3, the pixel postprocessor: 0.8x).
constexpr int64_t kMinDnnlDim = 16;
constexpr int64_t kMinDnnlMacs = int64_t(1) << 15;

CBLAS_TRANSPOSE to_cblas(Transpose t) { return t == Transpose::kYes ? CblasTrans : CblasNoTrans; }

void blas_gemm(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha,
               const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
               int64_t ldc) {
  static const SerialSgemm own = own_sgemm();
  if (own) return own(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  if (dnnl_float32_products() && std::min({m, n, k}) >= kMinDnnlDim && m * n * k >= kMinDnnlMacs)
    if (dnnl_matmul(MatmulInputs::kFloat32, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)) return;
  cblas_sgemm(CblasRowMajor, to_cblas(ta), to_cblas(tb), int(m), int(n), int(k), alpha, a, int(lda),
              b, int(ldb), beta, c, int(ldc));
}
void blas_gemm(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, double alpha,
               const double* a, int64_t lda, const double* b, int64_t ldb, double beta, double* c,
               int64_t ldc) {
  cblas_dgemm(CblasRowMajor, to_cblas(ta), to_cblas(tb), int(m), int(n), int(k), alpha, a, int(lda),
              b, int(ldb), beta, c, int(ldc));
}

// ---- float32 tiles that follow the thread count ----
// OpenBLAS's kernels run a call's output rows (and columns) in blocks of a few and the last few in
// narrower kernels, some of which sum in another order: on the Zen 3 here, in blocks of 12 and 24
// rows, and a 64-row tile's last 4 rows came out with other bits than the same rows inside a
// larger call. A row keeps its bits, then, in any call that starts it on a multiple of the block,
// and tiles on such multiples may follow the thread count. The block is found once (about 30 ms),
// by trying candidates on products of two depths and every transpose against whole calls; where
// none holds, or oneDNN runs the pieces, tiles follow the shape only. Columns never held here:
// their bits depend on how OpenBLAS blocks the whole width (no alignment of a tile can match).
constexpr int64_t kAlignCandidates[] = {8, 12, 16, 24, 32, 48, 64, 96};

// Probe operands from allocate_host (host_buffer): through malloc, their megabytes would raise
// glibc's sliding mmap threshold and leave later blocks of that size resident after they are freed.
struct ProbeFloats {
  Buffer buffer;
  explicit ProbeFloats(int64_t count) : buffer(host_buffer(size_t(count) * sizeof(float))) {}
  float* data() const { return static_cast<float*>(buffer.data()); }
  float* end() const { return data() + buffer.bytes() / sizeof(float); }
};

constexpr int64_t kProbeOther = 512, kProbeDepths[] = {100, 700};
constexpr int64_t probe_extent(int64_t align) { return 11 * align + align / 2 + 1; }

// Operands for every candidate: each uses the leading part of each buffer.
struct ProbeOperands {
  static constexpr int64_t kExtent = probe_extent(kAlignCandidates[std::size(kAlignCandidates) - 1]);
  static constexpr int64_t kDepth = kProbeDepths[std::size(kProbeDepths) - 1];
  ProbeFloats a{kExtent * kDepth}, b{kExtent * kDepth}, whole{kExtent * kProbeOther}, tiled{kExtent * kProbeOther};
  ProbeOperands() {
    uint32_t state = 12345;
    const auto next = [&state] { return float((state = state * 1664525u + 1013904223u) >> 8) * 0x1p-24f - 0.5f; };
    std::generate(a.data(), a.end(), next);
    std::generate(b.data(), b.end(), next);
  }
};

// Whether C's rows (or columns) come out the same from one call and from calls starting on
// multiples of `align`: tiles of 4 and 3 alignments, then 4 and a ragged rest; each over 10^6
// multiply-adds (kMinAlignedTileMacs: clear of the small-matrix kernels).
bool keeps_bits(const ProbeOperands& ops, bool rows, int64_t align) {
  const int64_t extent = probe_extent(align), cuts[] = {0, 4 * align, 7 * align, extent};
  const int64_t m = rows ? extent : kProbeOther, n = rows ? kProbeOther : extent;
  const float *a = ops.a.data(), *b = ops.b.data();
  float *whole = ops.whole.data(), *tiled = ops.tiled.data();
  for (int64_t k : kProbeDepths)
    for (Transpose ta : {Transpose::kNo, Transpose::kYes})
      for (Transpose tb : {Transpose::kNo, Transpose::kYes}) {
        const int64_t lda = ta == Transpose::kNo ? k : m, ldb = tb == Transpose::kNo ? n : k;
        cblas_sgemm(CblasRowMajor, to_cblas(ta), to_cblas(tb), int(m), int(n), int(k), 1.0f, a, int(lda), b,
                    int(ldb), 0.0f, whole, int(n));
        for (int t = 0; t < 3; ++t) {
          const int64_t begin = cuts[t], count = cuts[t + 1] - begin;
          const float* at = rows ? tiling::offset_a(ta, a, lda, begin, 0) : a;
          const float* bt = rows ? b : tiling::offset_b(tb, b, ldb, 0, begin);
          cblas_sgemm(CblasRowMajor, to_cblas(ta), to_cblas(tb), int(rows ? count : m), int(rows ? n : count), int(k),
                      1.0f, at, int(lda), bt, int(ldb), 0.0f, tiled + (rows ? begin * n : begin), int(n));
        }
        if (std::memcmp(whole, tiled, size_t(m * n) * sizeof(float)) != 0) return false;
      }
  return true;
}

int64_t first_alignment_keeping_bits(const ProbeOperands& ops, bool rows) {
  for (int64_t align : kAlignCandidates)
    if (keeps_bits(ops, rows, align)) return align;
  return 0;
}

}  // namespace

// PERCEIVER_CPU_TILES=shape keeps every tile by shape (to compare, or to rule the probe out). Our
// kernel keeps the bits anywhere (cpu_sgemm.h): its tiles start on whole register tiles.
tiling::TileAlign tiling::float32_tile_align() {
  static const TileAlign align = [] {
    const char* env = std::getenv("PERCEIVER_CPU_TILES");
    PCV_CHECK(!env || !*env || std::strcmp(env, "shape") == 0 || std::strcmp(env, "threads") == 0,
              "PERCEIVER_CPU_TILES='", env, "': expected shape or threads");
    if (dnnl_float32_products() || (env && std::strcmp(env, "shape") == 0)) return TileAlign{};
    if (own_sgemm()) return TileAlign{kOwnGemmRows, kOwnGemmCols};
    const ProbeOperands ops;
    return TileAlign{first_alignment_keeping_bits(ops, true), first_alignment_keeping_bits(ops, false)};
  }();
  return align;
}

template <class T>
void gemm_serial(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
                 int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if (tiling::trivial(m, n, k, beta, c, ldc)) return;
  blas_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

namespace {

// Row tiles on our kernel share one packing of B, made over the pool (each tile's call would pack
// all of it again): the same bits. True where the product was run so.
bool own_row_tiles(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                   int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
                   tiling::TileAlign aligned) {
  const OwnGemm* own = own_gemm();
  if (!own || !aligned.rows || tiling::pieces<float>(m, n, k) == tiling::Pieces::kKSlices ||
      !tiling::row_tiles(m, n, aligned))
    return false;
  if (tiling::aligned_tile_bounds(m, m * n * k, aligned.rows).tiles < 2) return false;
  auto* panels = scratch<float>(Slot::kOwnGemmSharedB, size_t(own->packed_b_size(k, n)));
  const OwnPackedB packed = own->pack_b(tb, k, n, b, ldb, panels, true);
  const auto rows = [own, &packed](Transpose ta_, Transpose, int64_t m_, int64_t n_, int64_t k_, float alpha_,
                                   const float* a_, int64_t lda_, const float*, int64_t, float beta_, float* c_,
                                   int64_t ldc_) {
    own->gemm_packed_b(ta_, m_, n_, k_, alpha_, a_, lda_, packed, 0, 0, beta_, c_, ldc_);
  };
  tiling::split_output(rows, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, true, aligned);
  return true;
}

}  // namespace

template <class T>
void gemm(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
          int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if (m * n * k < tiling::kMinParallelMacs) return gemm_serial(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  const tiling::TileAlign aligned = std::is_same_v<T, float> ? tiling::float32_tile_align() : tiling::TileAlign{};
  if constexpr (std::is_same_v<T, float>)
    if (own_row_tiles(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, aligned)) return;
  tiling::split(gemm_serial<T>, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, aligned);
}

template <class T>
void gemm_batched(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
                  int64_t lda, int64_t stride_a, const T* b, int64_t ldb, int64_t stride_b, T beta,
                  T* c, int64_t ldc, int64_t stride_c, int64_t batch) {
  tiling::batched(gemm_serial<T>, gemm<T>, ta, tb, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b, beta, c, ldc,
                  stride_c, batch);
}

#define PCV_INSTANTIATE(T)                                                                         \
  template void gemm_serial<T>(Transpose, Transpose, int64_t, int64_t, int64_t, T, const T*,       \
                               int64_t, const T*, int64_t, T, T*, int64_t);                        \
  template void gemm<T>(Transpose, Transpose, int64_t, int64_t, int64_t, T, const T*, int64_t,     \
                        const T*, int64_t, T, T*, int64_t);                                        \
  template void gemm_batched<T>(Transpose, Transpose, int64_t, int64_t, int64_t, T, const T*,      \
                                int64_t, int64_t, const T*, int64_t, int64_t, T, T*, int64_t,      \
                                int64_t, int64_t);
PCV_INSTANTIATE(float)
PCV_INSTANTIATE(double)
#undef PCV_INSTANTIATE

}  // namespace perceiver::cpu
