#include "backend/cuda/cuda_gemm.h"

#include <algorithm>
#include <functional>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_launch.h"

namespace perceiver::cuda {
namespace {

cudaDataType_t data_type(ElemType t) { return t == ElemType::kBf16 ? CUDA_R_16BF : CUDA_R_32F; }

// Byte alignment of a pointer, capped at cuBLASLt's default assumption of 256.
uint8_t alignment(const void* p) {
  const uintptr_t v = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 1;
  while (a < 256 && (v & a) == 0) a <<= 1;
  return uint8_t(std::min<uint32_t>(a, 128));  // 128 ≥ every vector width in use; fits in a byte
}

// A stored row-major operand: op(X) is [rows_op × cols_op]; the stored matrix is that or its
// transpose. Returns the stored rows and columns.
struct Stored {
  int64_t rows, cols;
};
Stored stored(Transpose t, int64_t rows_op, int64_t cols_op) {
  return t == Transpose::kNo ? Stored{rows_op, cols_op} : Stored{cols_op, rows_op};
}

// The operand as the GEMM will read it: float32 in fp32 precision; bf16 in bf16 precision (a
// float32 operand is first converted into the slot's packed copy).
MatOperand prepare(CudaHandle& h, const MatOperand& x, Stored s, int64_t batch, Slot slot) {
  if (h.precision == Precision::kFp32) {
    PCV_ASSERT(x.type == ElemType::kF32, "bf16 operand in an fp32 product");
    return x;
  }
  if (x.type == ElemType::kBf16) return x;
  void* dst = h.ws->get(slot, size_t(batch * s.rows * s.cols) * 2);
  convert_to_bf16(h.stream, batch, s.rows, s.cols, static_cast<const float*>(x.ptr), x.ld, x.stride, dst);
  return {dst, ElemType::kBf16, s.cols, s.rows * s.cols};
}

// cuBLASLt layout of a row-major stored matrix, seen column-major (its transpose).
cublasLtMatrixLayout_t layout(ElemType t, Stored s, int64_t ld, int64_t stride, int64_t batch) {
  cublasLtMatrixLayout_t l = nullptr;
  PCV_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, data_type(t), uint64_t(s.cols), uint64_t(s.rows), ld));
  if (batch > 1) {
    const int32_t count = int32_t(batch);
    PCV_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
    PCV_CUBLAS_CHECK(
        cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride));
  }
  return l;
}

cublasOperation_t op(Transpose t) { return t == Transpose::kYes ? CUBLAS_OP_T : CUBLAS_OP_N; }

// Descriptors and the heuristic's first algorithm for a problem (cuBLASLt's A is our B).
GemmPlans::Plan make_plan(CudaHandle& h, const Matmul& mm, const MatOperand& a, const MatOperand& b,
                          const GemmPlans::Key& key) {
  GemmPlans::Plan p;
  PCV_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t opa = op(mm.tb), opb = op(mm.ta);
  PCV_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
  PCV_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
  p.a = layout(b.type, stored(mm.tb, mm.k, mm.n), b.ld, b.stride, mm.batch);
  p.b = layout(a.type, stored(mm.ta, mm.m, mm.k), a.ld, a.stride, mm.batch);
  p.c = layout(ElemType::kF32, {mm.m, mm.n}, mm.ldc, mm.stride_c, mm.batch);
  cublasLtMatmulPreference_t pref = nullptr;
  PCV_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = h.lt_workspace_bytes;
  const uint32_t align_a = key.align_b, align_b = key.align_a, align_c = key.align_c;
  PCV_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  PCV_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a,
                                                        sizeof align_a));
  PCV_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b,
                                                        sizeof align_b));
  PCV_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c,
                                                        sizeof align_c));
  PCV_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c,
                                                        sizeof align_c));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(h.lt, p.desc, p.a, p.b, p.c, p.c, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  PCV_CHECK(st == CUBLAS_STATUS_SUCCESS && found > 0, "cuBLASLt has no algorithm for the product ",
            mm.ta == Transpose::kYes ? "T" : "N", mm.tb == Transpose::kYes ? "T" : "N", " m=", mm.m, " n=", mm.n,
            " k=", mm.k, " batch=", mm.batch, " (lda=", a.ld, " ldb=", b.ld, " ldc=", mm.ldc, ", ",
            h.precision == Precision::kBf16 ? "bf16" : "fp32", "): ", cublasLtGetStatusName(st));
  p.algo = result.algo;
  return p;
}

}  // namespace

size_t GemmPlans::KeyHash::operator()(const Key& k) const {
  size_t s = 0;
  auto mix = [&s](uint64_t v) { s ^= std::hash<uint64_t>()(v) + 0x9e3779b97f4a7c15ull + (s << 6) + (s >> 2); };
  for (int64_t v : {k.m, k.n, k.k, k.lda, k.ldb, k.ldc, k.sa, k.sb, k.sc, k.batch}) mix(uint64_t(v));
  mix(uint64_t(k.ta) | uint64_t(k.tb) << 8 | uint64_t(k.type_a) << 16 | uint64_t(k.type_b) << 24 |
      uint64_t(k.align_a) << 32 | uint64_t(k.align_b) << 40 | uint64_t(k.align_c) << 48);
  return s;
}

GemmPlans::~GemmPlans() {
  for (auto& [key, p] : plans_) {
    cublasLtMatrixLayoutDestroy(p.a);
    cublasLtMatrixLayoutDestroy(p.b);
    cublasLtMatrixLayoutDestroy(p.c);
    cublasLtMatmulDescDestroy(p.desc);
  }
}

void matmul(CudaHandle& h, const Matmul& mm) {
  if (mm.m == 0 || mm.n == 0 || mm.batch == 0) return;
  if (mm.k == 0) return scale_matrix(h.stream, mm.batch, mm.m, mm.n, mm.beta, mm.c, mm.ldc, mm.stride_c);
  PCV_ASSERT(mm.batch <= INT32_MAX, "batch of ", mm.batch, " products");
  const MatOperand a = prepare(h, mm.a, stored(mm.ta, mm.m, mm.k), mm.batch, Slot::kGemmA);
  const MatOperand b = prepare(h, mm.b, stored(mm.tb, mm.k, mm.n), mm.batch, Slot::kGemmB);
  const GemmPlans::Key key{mm.m, mm.n, mm.k, a.ld, b.ld, mm.ldc, a.stride, b.stride, mm.stride_c, mm.batch,
                           uint8_t(mm.ta), uint8_t(mm.tb), uint8_t(a.type), uint8_t(b.type),
                           alignment(a.ptr), alignment(b.ptr), alignment(mm.c)};
  const GemmPlans::Plan& p = h.plans->get(key, [&] { return make_plan(h, mm, a, b, key); });
  PCV_CUBLAS_CHECK(cublasLtMatmul(h.lt, p.desc, &mm.alpha, b.ptr, p.a, a.ptr, p.b, &mm.beta, mm.c, p.c, mm.c, p.c,
                                  &p.algo, h.lt_workspace, h.lt_workspace_bytes, h.stream));
}

}  // namespace perceiver::cuda
