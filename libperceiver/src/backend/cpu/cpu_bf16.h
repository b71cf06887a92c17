// bf16 products on the CPU (--precision bf16): the operands of every matrix product (the
// linear layers and attention) are rounded to bfloat16 and multiplied with float32 accumulation
// into float32 results, by our AMX kernel on CPUs with AMX (cpu_amx_gemm.h), else by oneDNN's bf16
// matmul (or, when asked, emulated on any CPU: emulated_bf16_products); everything else (norms,
// softmax, losses, the optimizer and its master weights) stays float32, as on the CUDA backend.
//
// Determinism: a product computed inside one of our parallel regions (attention) runs on the
// calling thread; a top-level product is split into shape-determined pieces (cpu_gemm_tiling.h),
// each one a single-threaded call. So results do not depend on the number of
// threads, as in float32.
#pragma once

#include <cstdint>
#include <string>

#include "backend/cpu/cpu_bf16_round.h"
#include "perceiver/backend.h"

namespace perceiver::cpu {

/// Whether this build and this CPU can run bf16 products; otherwise `why` says what is missing
/// (a CPU without AMX and, for oneDNN, without AVX512-BF16; or a build without oneDNN there).
/// Always where they are emulated.
bool bf16_products_available(std::string* why);
/// The instruction set oneDNN uses for them ("avx512_core_bf16", "avx512_core_amx").
std::string bf16_products_isa();
/// What runs them, for the backend's description: "our AMX kernel (cpu_amx_gemm)", "emulation
/// (...)" or "oneDNN (<isa>)", the latter with a warning where its dot product is too slow to gain
/// over float32 (cpu_bf16_rate.h).
std::string bf16_products_kernel();

/// C = alpha·op(A)·op(B) + beta·C with bf16 operands and float32 accumulation: on the calling
/// thread (inside our parallel regions), and tiled over the OpenMP pool.
void gemm_bf16_serial(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                      int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
void gemm_bf16(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
               int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

/// x [rows, cols] (leading dimension ld) rounded to bf16 into packed out [rows, cols], on the
/// calling thread; and the single-threaded product of operands rounded so (each as stored, with
/// its own leading dimension). For kernels whose operands feed several products (attention): each
/// is rounded once instead of once per product.
void round_to_bf16(int64_t rows, int64_t cols, const float* x, int64_t ld, uint16_t* out);
/// Whether the products run on our AMX kernel (a CPU with AMX, unless PERCEIVER_CPU_BF16_GEMM=onednn):
/// then the streamed attention may pack operands for it itself (amx_gemm_bf16_packed_b).
bool amx_products();
/// Whether they are emulated (PERCEIVER_CPU_BF16_GEMM=emulated, any CPU): the rounded operands
/// widened back to float32 for the float32 products, which is exact (a product of two bf16 values
/// is a float, barring under- and overflow); the sums run in the float32 kernel's order. Slower
/// than float32: for tests of the bf16 path on CPUs without bf16 products.
bool emulated_bf16_products();
void gemm_bf16_rounded(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
                       int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc);

/// KernelTable::store_bf16 / load_bf16: x [rows, cols] rounded into bf16 rows y16 (leading
/// dimension ld16), and back; over the OpenMP pool when large.
void store_bf16(int64_t rows, int64_t cols, const float* x, int64_t ldx, uint16_t* y16, int64_t ld16);
void load_bf16(int64_t rows, int64_t cols, const uint16_t* x16, int64_t ld16, float* y, int64_t ldy);
/// KernelTable::gemm_stored_bf16: gemm_bf16 on operands already rounded (each as stored, with its
/// own leading dimension), in the same pieces, so bitwise the same as gemm_bf16 on their values.
void gemm_stored_bf16(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
                      int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc);

void gemm_batched_bf16(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                       int64_t lda, int64_t stride_a, const float* b, int64_t ldb, int64_t stride_b, float beta,
                       float* c, int64_t ldc, int64_t stride_c, int64_t batch);

/// attention_forward/backward(_key_sums) (cpu_kernels.h) with bf16 products (cpu_attention.cpp).
void attention_forward_bf16(const AttentionDims& d, const float* q, const float* k, const float* v, float* o,
                            float* saved);
void attention_backward_bf16(const AttentionDims& d, const float* q, const float* k, const float* v, const float* o,
                             const float* saved, const float* dout, float* dq, float* dk, float* dv);
void attention_backward_key_sums_bf16(const AttentionDims& d, const float* q, const float* x, const float* o,
                                      const float* saved, const float* dout, const uint8_t* key_group,
                                      const float* key_scale, int64_t groups, float* dq, float* q_sums,
                                      float* key_sums);

/// The CPU's float table with the products above in place of the float32 ones.
const KernelTable<float>& kernel_table_bf16();

}  // namespace perceiver::cpu
