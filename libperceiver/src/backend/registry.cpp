// Backend registry: which devices this build has, and how to make one by name.
// CUDA registers here behind PCV_USE_CUDA (defined for this file when PERCEIVER_WITH_CUDA=ON),
// Neuron behind PCV_USE_NEURON (PERCEIVER_WITH_NEURON, on by default: libnrt is opened at run time).
#include <string>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_bf16.h"
#include "backend/guarded/guarded_backend.h"
#ifdef PCV_USE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif
#ifdef PCV_USE_NEURON
#include "backend/neuron/neuron_backend.h"
#endif
#include "perceiver/backend.h"
#include "perceiver/error.h"

namespace perceiver {

std::vector<std::string> available_backends() {
  std::vector<std::string> names{"cpu", "guarded"};
#ifdef PCV_USE_CUDA
  names.push_back("cuda");
#endif
#ifdef PCV_USE_NEURON
  names.push_back("neuron");
#endif
  return names;
}

Backend& cpu_backend() {
  static cpu::CpuBackend backend;
  return backend;
}

Precision parse_precision(std::string_view name) {
  if (name == "fp32") return Precision::kFp32;
  if (name == "bf16") return Precision::kBf16;
  PCV_FAIL("precision '", name, "': expected fp32 or bf16");
}

const char* precision_name(Precision p) { return p == Precision::kBf16 ? "bf16" : "fp32"; }

std::unique_ptr<Backend> make_backend(std::string_view device, const BackendOptions& options) {
  if (device == "cpu") {
    std::string why;
    PCV_CHECK(options.precision == Precision::kFp32 || cpu::bf16_products_available(&why),
              "device 'cpu': precision bf16 is not available: ", why, ". HINT: use --precision fp32");
    return std::make_unique<cpu::CpuBackend>(options.precision);
  }
  if (device == "guarded") {
    PCV_CHECK(options.precision == Precision::kFp32, "device 'guarded': precision bf16 is not available (it checks the ",
              "float32 kernels); HINT: use --precision fp32");
    return std::make_unique<guarded::GuardedBackend>();
  }
#ifdef PCV_USE_CUDA
  if (device == "cuda") return std::make_unique<cuda::CudaBackend>(options);
#endif
#ifdef PCV_USE_NEURON
  if (device == "neuron") return std::make_unique<neuron::NeuronBackend>(options);
#endif
  if (device == "cuda" || device == "neuron") {
    std::string available;
    for (const auto& n : available_backends()) available += (available.empty() ? "" : ", ") + n;
    if (device == "cuda")
      PCV_FAIL("device 'cuda' is not available in this build (available: ", available, "). HINT: build with ",
               "-DPERCEIVER_WITH_CUDA=ON (needs the CUDA toolkit with nvcc and NCCL; `make build` does this ",
               "whenever nvcc is found), or use --device cpu.");
    PCV_FAIL("device 'neuron' is not available in this build (available: ", available, "). HINT: configure with ",
             "-DPERCEIVER_WITH_NEURON=ON (the default; it needs no SDK to build), or use --device cpu.");
  }
  PCV_FAIL("unknown device '", device, "'; expected one of: cpu, guarded, cuda, neuron");
}

void require_op_by_op_device(std::string_view device, std::string_view program) {
  PCV_CHECK(device != "neuron", "--device neuron: ", program, " is not available on it; the neuron device runs only ",
            "perceiver-train's compiled training step (perceiver-export). HINT: use --device cpu");
}

}  // namespace perceiver
