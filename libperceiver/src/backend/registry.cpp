// Backend registry: which devices this build has, and how to make one by name.
// CUDA and Neuron register here behind PCV_USE_CUDA / PCV_USE_NEURON (see README.md beside this).
#include <string>

#include "backend/cpu/cpu_backend.h"
#include "backend/guarded/guarded_backend.h"
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
  if (device == "cpu" || device == "guarded") {
    PCV_CHECK(options.precision == Precision::kFp32, "device '", device, "': precision bf16 is not available on the ",
              "CPU backend of this build; HINT: use --precision fp32");
    if (device == "cpu") return std::make_unique<cpu::CpuBackend>();
    return std::make_unique<guarded::GuardedBackend>();
  }
  if (device == "cuda" || device == "neuron") {
    std::string opt = device == "cuda" ? "PERCEIVER_WITH_CUDA" : "PERCEIVER_WITH_NEURON";
    std::string available;
    for (const auto& n : available_backends()) available += (available.empty() ? "" : ", ") + n;
    PCV_FAIL("device '", device, "' is not available in this build (available: ", available, "). HINT: the ",
             device, " backend is a documented seam (libperceiver/src/backend/README.md) and is not "
             "implemented yet; ", opt, " cannot be enabled until it is. Use --device cpu.");
  }
  PCV_FAIL("unknown device '", device, "'; expected one of: cpu, guarded, cuda, neuron");
}

}  // namespace perceiver
