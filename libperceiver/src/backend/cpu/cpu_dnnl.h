// oneDNN's matmul as a single-threaded GEMM on the calling thread, for bf16 operands (--precision
// bf16) and for float32 ones, where its JIT kernels beat OpenBLAS's (5-18% on one core for the
// pieces our tiling makes; bench/run_ops.sh, bench/run_model.sh). Called only from our own
// parallel regions or with one thread, so, as with OpenBLAS, results depend on the shape alone.
#pragma once

#include <cstdint>
#include <string>

#include "perceiver/backend.h"

namespace perceiver::cpu {

enum class MatmulInputs { kFloat32, kBf16 };

/// C = alpha·op(A)·op(B) + beta·C, row-major, float32 results; A and B are float32 or bf16 (as
/// uint16_t) as `inputs` says. One primitive per shape for the process, made by the first caller.
/// For float32, returns false and leaves C alone where oneDNN would run the shape with its own
/// JIT sgemm rather than its brgemm kernels: that sgemm is not safe against signals in the
/// oneDNN Debian 12 ships (cpu_dnnl.cpp), so the caller uses OpenBLAS there. bf16 products always
/// run (true). Throws in a build without oneDNN.
[[nodiscard]] bool dnnl_matmul(MatmulInputs inputs, Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha,
                 const void* a, int64_t lda, const void* b, int64_t ldb, float beta, float* c, int64_t ldc);

/// The instruction set oneDNN runs on this CPU ("avx512_core", "avx2", ...; "" without oneDNN).
std::string dnnl_isa();

/// Whether float32 products try dnnl_matmul: a build with oneDNN on an x86-64 CPU with AVX-512
/// (where its brgemm kernels are), unless PERCEIVER_CPU_GEMM asks for other kernels (cpu_sgemm.h).
bool dnnl_float32_products();

}  // namespace perceiver::cpu
