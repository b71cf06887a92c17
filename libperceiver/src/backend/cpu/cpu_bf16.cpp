// bf16 products on the CPU through our AMX kernel, oneDNN's matmul or an emulation (see cpu_bf16.h
// for what is bf16 and why, cpu_amx_gemm.h for our kernel).
#include "backend/cpu/cpu_bf16.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "backend/cpu/cpu_amx_gemm.h"
#include "backend/cpu/cpu_bf16_rate.h"
#include "backend/cpu/cpu_dnnl.h"
#include "backend/cpu/cpu_gemm_tiling.h"
#include "backend/cpu/cpu_isa.h"
#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_parallel.h"
#include "backend/cpu/cpu_workspace.h"
#include "perceiver/error.h"

namespace perceiver::cpu {

namespace {

// A row-major float matrix [rows, cols] (leading dimension ld) into bf16 rows (leading dimension
// ld16), as stored: a transposed operand stays transposed, and the product reads it through its
// strides.
void pack_bf16(int64_t rows, int64_t cols, const float* x, int64_t ld, uint16_t* out, int64_t ld16, bool parallel) {
  detail::parallel_for(rows, parallel && rows * cols >= (int64_t(1) << 16),
                       [=](int64_t r) { vector_kernels<float>().to_bf16(cols, x + r * ld, out + r * ld16); });
}

// Stored extent of op(X) [rows, cols]: [rows, cols], or [cols, rows] when transposed.
struct Stored {
  int64_t rows, cols;
};
Stored stored(Transpose t, int64_t rows, int64_t cols) { return t == Transpose::kNo ? Stored{rows, cols} : Stored{cols, rows}; }

// Which kernel runs the bf16 products: ours on a CPU with AMX (PERCEIVER_CPU_BF16_GEMM=auto, the
// default), oneDNN's elsewhere; =amx insists on ours, =onednn rules it out. On a Sapphire Rapids
// ours ran every product kind of the model as fast or faster than oneDNN 2.6 once B is packed once
// per product rather than once per tile (bench_ops, bf16, 2 threads: 2048x704x704 NT 1.23-1.26
// against 1.28-1.35 ms, its TN dW 1.93-1.97 against 2.15-2.26; one core: 512x704x196 TN 0.12
// against 0.24). =emulated widens the rounded operands back to float32 for the float32 products,
// on any CPU: slower than float32, for testing the bf16 path where the CPU has no bf16 products.
enum class Bf16Kernels { kAmx, kOnednn, kEmulated };

Bf16Kernels bf16_kernels() {
  static const Bf16Kernels kernels = [] {
    const char* env = std::getenv("PERCEIVER_CPU_BF16_GEMM");
    const std::string pick = env ? env : "";
    PCV_CHECK(pick.empty() || pick == "auto" || pick == "amx" || pick == "onednn" || pick == "emulated",
              "PERCEIVER_CPU_BF16_GEMM='", pick, "': expected auto, amx, onednn or emulated");
    PCV_CHECK(pick != "amx" || amx_available(), "PERCEIVER_CPU_BF16_GEMM=amx: this CPU or kernel offers no AMX tiles");
    if (pick == "emulated") return Bf16Kernels::kEmulated;
    return pick != "onednn" && amx_available() ? Bf16Kernels::kAmx : Bf16Kernels::kOnednn;
  }();
  return kernels;
}

// One row of bf16 values as floats: exact, every bf16 is a float.
void widen_row(int64_t cols, const uint16_t* x16, float* y) {
  for (int64_t c = 0; c < cols; ++c) y[c] = from_bf16(x16[c]);
}

// Stored bf16 rows widened to float32 rows (leading dimension cols).
const float* widen(Stored s, const uint16_t* x, int64_t ld, Slot slot) {
  float* out = scratch<float>(slot, size_t(s.rows * s.cols));
  for (int64_t r = 0; r < s.rows; ++r) widen_row(s.cols, x + r * ld, out + r * s.cols);
  return out;
}

// The emulated product: a product of two bf16 values is exact in float32, so this is the bf16
// product with float32 accumulation, summed in the float32 kernel's order.
void emulated_matmul(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
                     int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  const Stored sa = stored(ta, m, k), sb = stored(tb, k, n);
  const float* a32 = widen(sa, a, lda, Slot::kBf16WidenedA);
  const float* b32 = widen(sb, b, ldb, Slot::kBf16WidenedB);
  gemm_serial<float>(ta, tb, m, n, k, alpha, a32, sa.cols, b32, sb.cols, beta, c, ldc);
}

// C = alpha·op(A)·op(B) + beta·C on bf16 A and B stored row-major with leading dimensions lda,
// ldb (transposed as ta, tb say), single-threaded.
void matmul_packed(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
                   int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (amx_products()) return amx_gemm_bf16(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  if (emulated_bf16_products()) return emulated_matmul(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  const bool done = dnnl_matmul(MatmulInputs::kBf16, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  PCV_CHECK(done, "oneDNN declined a bf16 product ", m, "x", n, "x", k);
}

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
  pack_bf16(sa.rows, sa.cols, a, lda, a16, sa.cols, parallel);
  pack_bf16(sb.rows, sb.cols, b, ldb, b16, sb.cols, parallel);
  return {a16, b16, sa.cols, sb.cols};
}

// Whether gemm_stored_bf16 runs a product in row tiles on our AMX kernel, B packed once for all.
bool amx_row_tiles(int64_t m, int64_t n, int64_t k) {
  if (!amx_products() || m * n * k < tiling::kMinParallelMacs) return false;
  const tiling::Pieces pieces = tiling::pieces<uint16_t>(m, n, k);
  return pieces != tiling::Pieces::kKSlices && (pieces == tiling::Pieces::kRowTiles || m >= 2 * tiling::kMinTileBf16);
}

// The row tiles of a product over B packed already (amx_row_tiles; the tiles split_output makes
// of bf16 products): the bits of one call. A is bf16, or float32 rounded as its tiles are packed.
template <class In>
void amx_rows_packed_b(Transpose ta, int64_t m, int64_t n, int64_t k, float alpha, const In* a, int64_t lda,
                       const AmxPackedB& packed, float beta, float* c, int64_t ldc) {
  const tiling::TileBounds bounds = tiling::tile_bounds(m, true);
  if (bounds.tiles == 1) return amx_gemm_bf16_packed_b(ta, m, n, k, alpha, a, lda, packed, beta, c, ldc);
#pragma omp parallel for schedule(static, 1)
  for (int64_t t = 0; t < bounds.tiles; ++t) {
    const int64_t begin = bounds.begin(t), count = bounds.begin(t + 1) - begin;
    amx_gemm_bf16_packed_b(ta, count, n, k, alpha, tiling::offset_a(ta, a, lda, begin, 0), lda, packed, beta,
                           c + begin * ldc, ldc);
  }
}

// A rounded into this thread's scratch as stored, where our AMX kernel then reads it in place (its
// rows are its tiles); null where it would pack the rounded copy again, and packs A's float32
// values instead (rounded as they go: one pass, not two). B goes from float32 straight into its
// tiles too. The latent layers' 392 x 512 x 512 on one core took 394 us with both operands rounded
// first, 118 us of it rounding.
const uint16_t* rounded_a_in_place(Transpose ta, int64_t m, int64_t k, const float* a, int64_t lda, bool parallel) {
  const Stored sa = stored(ta, m, k);
  if (!amx_reads_a_in_place(ta, k, sa.cols)) return nullptr;
  auto* a16 = static_cast<uint16_t*>(thread_scratch(Slot::kBf16A, size_t(m * k) * 2));
  pack_bf16(sa.rows, sa.cols, a, lda, a16, sa.cols, parallel);
  return a16;
}

// A product of float32 operands on our AMX kernel (rounded_a_in_place's A, B packed from float32).
// `tiled` (amx_row_tiles): B packed over the pool, the output in row tiles; else all on the calling
// thread.
void amx_float_product(bool tiled, Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha,
                       const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  const uint16_t* a16 = rounded_a_in_place(ta, m, k, a, lda, tiled);
  auto* tiles = scratch<uint16_t>(tiled ? Slot::kAmxSharedB : Slot::kAmxB, size_t(amx_packed_b_size(k, n)));
  const AmxPackedB packed = amx_pack_b(tb, k, n, b, ldb, tiles, tiled);
  const auto run = [&](const auto* x, int64_t ld) {
    if (tiled) return amx_rows_packed_b(ta, m, n, k, alpha, x, ld, packed, beta, c, ldc);
    amx_gemm_bf16_packed_b(ta, m, n, k, alpha, x, ld, packed, beta, c, ldc);
  };
  if (a16) return run(a16, k);
  run(a, lda);
}

}  // namespace

void gemm_bf16_serial(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                      int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (tiling::trivial(m, n, k, beta, c, ldc)) return;
  if (amx_products()) return amx_float_product(false, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  const Packed p = pack_operands(ta, tb, m, n, k, a, lda, b, ldb, false);
  matmul_packed(ta, tb, m, n, k, alpha, p.a, p.lda, p.b, p.ldb, beta, c, ldc);
}

void gemm_bf16(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
               int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (tiling::trivial(m, n, k, beta, c, ldc)) return;
  if (amx_row_tiles(m, n, k)) return amx_float_product(true, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  // Round each operand once (over the pool when the product is), then multiply as stored.
  const Packed p = pack_operands(ta, tb, m, n, k, a, lda, b, ldb, m * n * k >= tiling::kMinParallelMacs);
  gemm_stored_bf16(ta, tb, m, n, k, alpha, p.a, p.lda, p.b, p.ldb, beta, c, ldc);
}

void round_to_bf16(int64_t rows, int64_t cols, const float* x, int64_t ld, uint16_t* out) {
  pack_bf16(rows, cols, x, ld, out, cols, false);
}

bool amx_products() { return bf16_kernels() == Bf16Kernels::kAmx; }

bool emulated_bf16_products() { return bf16_kernels() == Bf16Kernels::kEmulated; }

void gemm_bf16_rounded(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
                       int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (tiling::trivial(m, n, k, beta, c, ldc)) return;
  matmul_packed(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void gemm_stored_bf16(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
                      int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  // One call when small, else the same pieces as float32 (cpu_gemm_tiling.h); no piece is empty
  // or has k == 0 once the whole product is not trivial.
  if (tiling::trivial(m, n, k, beta, c, ldc)) return;
  if (m * n * k < tiling::kMinParallelMacs) return matmul_packed(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  // Row tiles on our AMX kernel share one packing of B (each would pack all of it): the same bits.
  // So they are taken wherever the rows make two tiles, not only where m ≥ n: column tiles would
  // each pack all of A where it cannot be read in place (the decoder's 1025 x 1026 x 1026 NT,
  // K not a whole number of tiles: 3.2 ms in column tiles).
  if (amx_row_tiles(m, n, k)) {
    auto* tiles = scratch<uint16_t>(Slot::kAmxSharedB, size_t(amx_packed_b_size(k, n)));
    const AmxPackedB packed = amx_pack_b(tb, k, n, b, ldb, tiles, true);
    return amx_rows_packed_b(ta, m, n, k, alpha, a, lda, packed, beta, c, ldc);
  }
  tiling::split(matmul_packed, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void store_bf16(int64_t rows, int64_t cols, const float* x, int64_t ldx, uint16_t* y16, int64_t ld16) {
  pack_bf16(rows, cols, x, ldx, y16, ld16, true);
}

void load_bf16(int64_t rows, int64_t cols, const uint16_t* x16, int64_t ld16, float* y, int64_t ldy) {
  detail::parallel_for(rows, rows * cols >= (int64_t(1) << 16),
                       [=](int64_t r) { widen_row(cols, x16 + r * ld16, y + r * ldy); });
}

void gemm_batched_bf16(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                       int64_t lda, int64_t stride_a, const float* b, int64_t ldb, int64_t stride_b, float beta,
                       float* c, int64_t ldc, int64_t stride_c, int64_t batch) {
  tiling::batched(gemm_bf16_serial, gemm_bf16, ta, tb, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b, beta, c, ldc,
                  stride_c, batch);
}

std::string bf16_products_isa() {
  const std::string isa = dnnl_isa();
  return isa == "avx512_core_amx" || isa == "avx512_core_bf16" ? isa : "";
}

std::string bf16_products_kernel() {
  if (amx_products()) return "our AMX kernel (cpu_amx_gemm)";
  if (emulated_bf16_products())
    return "emulation (PERCEIVER_CPU_BF16_GEMM=emulated: the rounded operands in float32 products; slower than fp32, "
           "for tests)";
  // Without AMX they run on VDPBF16PS: say so where it barely outruns (or trails) the FMAs.
  const std::string isa = bf16_products_isa();
  const double rate = isa == "avx512_core_bf16" ? bf16_dot_rate() : 0.0;
  char note[128] = "";
  if (rate > 0 && rate < kMinUsefulDotRate)
    std::snprintf(note, sizeof note, "; its dot product runs at %.2fx this CPU's float32 FMA rate: expect bf16 no "
                  "faster than fp32", rate);
  return "oneDNN (" + isa + note + ")";
}

bool bf16_products_available(std::string* why) {
  if (amx_products() || emulated_bf16_products() || !bf16_products_isa().empty()) return true;
  const bool amx_ruled_out = amx_available();  // there, PERCEIVER_CPU_BF16_GEMM=onednn
  if (why && dnnl_isa().empty())
    *why = std::string(amx_ruled_out ? "PERCEIVER_CPU_BF16_GEMM=onednn, but this" : "this CPU has no AMX and this") +
           " build has no oneDNN (configure with -DPERCEIVER_WITH_DNNL=ON; Debian package libdnnl-dev)";
  else if (why)
    *why = std::string("this CPU has neither AVX512-BF16 nor AMX (or ONEDNN_MAX_CPU_ISA caps oneDNN's") +
           (amx_ruled_out ? " and PERCEIVER_CPU_BF16_GEMM=onednn rules out our AMX kernel" : "") +
           "), so bf16 products would be emulated and slower than float32";
  return false;
}

}  // namespace perceiver::cpu
