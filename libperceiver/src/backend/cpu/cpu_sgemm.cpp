// Which kernels run the float32 products (cpu_sgemm.h).
#include "backend/cpu/cpu_sgemm.h"

#include <cstdlib>
#include <cstring>

#include "backend/cpu/cpu_dnnl.h"
#include "backend/cpu/cpu_isa.h"
#include "perceiver/error.h"

namespace perceiver::cpu {
namespace {

bool dnnl_has_brgemm() { return dnnl_isa().rfind("avx512", 0) == 0; }  // its float32 brgemm needs AVX-512

// PERCEIVER_CPU_GEMM, checked once.
const std::string& asked() {
  static const std::string value = [] {
    const char* env = std::getenv("PERCEIVER_CPU_GEMM");
    return std::string(env ? env : "");
  }();
  return value;
}

Float32Gemm choose() {
  const std::string& want = asked();
  if (want == "openblas") return Float32Gemm::kOpenBlas;
  if (want == "onednn") {
    PCV_CHECK(dnnl_has_brgemm(), "PERCEIVER_CPU_GEMM=onednn: oneDNN's float32 kernels need a CPU with AVX-512 and a "
              "build with oneDNN (this one: '", dnnl_isa(), "'); use openblas or own");
    return Float32Gemm::kOneDnn;
  }
  if (want == "own") {
    PCV_CHECK(isa_supported(Isa::kV3), "PERCEIVER_CPU_GEMM=own: our float32 kernel needs a CPU with AVX2 and FMA "
              "(x86-64-v3); use openblas");
    return Float32Gemm::kOwnAvx2;
  }
  PCV_CHECK(want.empty(), "PERCEIVER_CPU_GEMM='", want, "': expected openblas, onednn or own");
  // By the level the vector kernels run at (cpu_isa.h), so that PERCEIVER_CPU_ISA=baseline runs the
  // SSE2 path throughout. On AVX-512 CPUs without oneDNN, OpenBLAS's AVX-512 kernels.
  return active_isa() == Isa::kV4 && dnnl_has_brgemm() ? Float32Gemm::kOneDnn : Float32Gemm::kOpenBlas;
}

}  // namespace

Float32Gemm float32_gemm() {
  static const Float32Gemm chosen = choose();
  return chosen;
}

std::string float32_gemm_summary() {
  switch (float32_gemm()) {
    case Float32Gemm::kOwnAvx2: return "our AVX2 kernel (6x16 register tiles)";
    case Float32Gemm::kOneDnn: return "oneDNN (" + dnnl_isa() + ", brgemm) and OpenBLAS for the rest";
    default: return own_attention_gemm() ? "OpenBLAS, the attention's by our AVX2 kernel (6x16 register tiles)"
                                         : "OpenBLAS";
  }
}

// Ours, or null on other CPUs than x86-64 ones.
const OwnGemm* v3_kernel() {
#if defined(__x86_64__)
  static const OwnGemm v3{&isa_v3::sgemm, &isa_v3::packed_b_size, &isa_v3::pack_b, &isa_v3::sgemm_packed_b};
  return &v3;
#else
  return nullptr;
#endif
}

const OwnGemm* own_gemm() { return float32_gemm() == Float32Gemm::kOwnAvx2 ? v3_kernel() : nullptr; }

const OwnGemm* own_attention_gemm() {
  static const bool ours = float32_gemm() == Float32Gemm::kOwnAvx2 || (asked().empty() && active_isa() == Isa::kV3);
  return ours ? v3_kernel() : nullptr;
}

SerialSgemm own_sgemm() {
  const OwnGemm* own = own_gemm();
  return own ? own->gemm : nullptr;
}

}  // namespace perceiver::cpu
