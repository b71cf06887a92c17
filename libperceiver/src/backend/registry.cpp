// Backend registry: which devices this build has, and how to make one by name.
// CUDA registers here behind PCV_USE_CUDA (defined for this file when PERCEIVER_WITH_CUDA=ON); in
// a shared build it lives in its own library, PCV_CUDA_PLUGIN, opened on first use. Neuron sits
// behind PCV_USE_NEURON (PERCEIVER_WITH_NEURON, on by default: libnrt is opened at run time).
#include <dlfcn.h>

#include <filesystem>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_bf16.h"
#include "backend/guarded/guarded_backend.h"
#include "core/dynamic_library.h"
#if defined(PCV_USE_CUDA) && !defined(PCV_CUDA_PLUGIN)
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

#ifdef PCV_CUDA_PLUGIN
namespace {

// The CUDA backend from its library, looked for beside this one (the build tree, an install
// prefix), then on the loader's path. Loaded once and never unloaded.
std::unique_ptr<Backend> load_cuda_backend(const BackendOptions& options) {
  using Factory = Backend* (*)(const BackendOptions*);
  static const Factory factory = [] {
    std::vector<std::string> candidates;
    Dl_info self{};
    if (::dladdr(reinterpret_cast<void*>(&load_cuda_backend), &self) && self.dli_fname)
      candidates.push_back((std::filesystem::path(self.dli_fname).parent_path() / PCV_CUDA_PLUGIN).string());
    candidates.push_back(PCV_CUDA_PLUGIN);
    const OpenedLibrary lib = open_first_library(candidates);
    PCV_CHECK(lib.handle, "device 'cuda': cannot load the CUDA backend's library ", PCV_CUDA_PLUGIN, "; tried ",
              lib.tried, ". HINT: it is installed beside libperceiver.so, and needs the CUDA runtime, cuBLASLt and ",
              "NCCL on the loader's path (LD_LIBRARY_PATH or ld.so.conf); or use --device cpu");
    void* make = ::dlsym(lib.handle, "perceiver_cuda_make_backend");
    PCV_CHECK(make, "device 'cuda': ", lib.path, " has no perceiver_cuda_make_backend; it is not this version's CUDA ",
              "backend. HINT: reinstall libperceiver and ", PCV_CUDA_PLUGIN, " from the same build");
    return reinterpret_cast<Factory>(make);
  }();
  return std::unique_ptr<Backend>(factory(&options));
}

}  // namespace
#endif

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
              "device 'cpu': precision bf16 is not available: ", why,
              ". HINT: use --precision fp32 (or, to test the bf16 path, PERCEIVER_CPU_BF16_GEMM=emulated)");
    return std::make_unique<cpu::CpuBackend>(options.precision);
  }
  if (device == "guarded") {
    PCV_CHECK(options.precision == Precision::kFp32, "device 'guarded': precision bf16 is not available (it checks the ",
              "float32 kernels); HINT: use --precision fp32");
    return std::make_unique<guarded::GuardedBackend>();
  }
#if defined(PCV_CUDA_PLUGIN)
  if (device == "cuda") return load_cuda_backend(options);
#elif defined(PCV_USE_CUDA)
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
