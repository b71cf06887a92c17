// Every matrix product of the CUDA backend goes through matmul(): one cuBLASLt wrapper for the
// gemm ops and for attention's Q·Kᵀ, P·V and their backward. Row-major problems are handed to
// cuBLASLt (column-major) as Cᵀ = op(B)ᵀ·op(A)ᵀ. Shapes: C [m, n], op(A) [m, k], op(B) [k, n].
//
// Precision: fp32 computes with CUBLAS_COMPUTE_32F (full float32, TF32 off); bf16 multiplies
// bfloat16 operands with float32 accumulation and a float32 C (PyTorch's autocast). Operands
// given in float32 are converted into packed bf16 scratch first; callers that reuse an operand
// (attention's Q across key chunks) pass a bf16 copy they made once.
//
// Reproducibility: one stream, one fixed cuBLASLt workspace and the same algorithm per problem
// (cached) give bitwise-identical results run to run on the same GPU model (cuBLAS's "results
// reproducibility" guarantee); results differ between GPU models and toolkit versions.
#pragma once

#include <cublasLt.h>

#include <cstdint>
#include <unordered_map>

#include "backend/cuda/cuda_context.h"

namespace perceiver::cuda {

enum class ElemType : uint8_t { kF32, kBf16 };

/// A row-major operand: `batch` matrices `stride` elements apart, rows `ld` elements apart.
struct MatOperand {
  const void* ptr = nullptr;
  ElemType type = ElemType::kF32;
  int64_t ld = 0, stride = 0;
};

struct Matmul {
  Transpose ta = Transpose::kNo, tb = Transpose::kNo;
  int64_t m = 0, n = 0, k = 0;
  float alpha = 1;
  MatOperand a, b;
  float beta = 0;
  float* c = nullptr;
  int64_t ldc = 0, stride_c = 0;
  int64_t batch = 1;
};

/// C = alpha·op(A)·op(B) + beta·C for every batch item (k == 0 leaves beta·C).
void matmul(CudaHandle& h, const Matmul& mm);

/// cuBLASLt descriptors and the algorithm chosen for each problem shape, made on first use (the
/// heuristic query costs tens of microseconds; a training step runs hundreds of products).
class GemmPlans {
 public:
  struct Key {
    int64_t m, n, k, lda, ldb, ldc, sa, sb, sc, batch;
    uint8_t ta, tb, type_a, type_b, align_a, align_b, align_c;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const;
  };
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;  // cuBLASLt's A (our B), B (our A), C
    cublasLtMatmulAlgo_t algo{};
  };
  GemmPlans() = default;
  ~GemmPlans();
  GemmPlans(const GemmPlans&) = delete;
  GemmPlans& operator=(const GemmPlans&) = delete;
  /// The plan of `key`, made with `make` the first time.
  template <class Make>
  const Plan& get(const Key& key, Make make) {
    auto it = plans_.find(key);
    if (it == plans_.end()) it = plans_.emplace(key, make()).first;
    return it->second;
  }

 private:
  std::unordered_map<Key, Plan, KeyHash> plans_;
};

}  // namespace perceiver::cuda
