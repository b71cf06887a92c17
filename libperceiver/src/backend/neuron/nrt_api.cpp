#include "backend/neuron/nrt_api.h"

#include <dlfcn.h>

#include <cstdlib>
#include <iterator>
#include <vector>

#include "core/dynamic_library.h"
#include "perceiver/error.h"

namespace perceiver::neuron {
namespace {

template <class F>
void resolve(NrtApi& api, F& fn, const char* symbol) {
  fn = reinterpret_cast<F>(::dlsym(api.library, symbol));
  PCV_CHECK(fn != nullptr, "device 'neuron': ", api.path, " has no entry point ", symbol,
            " (a Neuron runtime older than NRT 2.x?)");
}

}  // namespace

NrtApi load_nrt() {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("PERCEIVER_LIBNRT"); env && *env) {
    candidates.push_back(env);
  } else {
    candidates = {"libnrt.so.1", "libnrt.so", "/opt/aws/neuron/lib/libnrt.so.1", "/opt/aws/neuron/lib/libnrt.so"};
  }
  const OpenedLibrary lib = open_first_library(candidates);
  PCV_CHECK(lib.handle != nullptr, "device 'neuron': the Neuron runtime (libnrt) is not installed on this machine; "
            "tried ", lib.tried, ". HINT: run on a trn1 node with the Neuron SDK (aws-neuronx-runtime-lib), or point ",
            "PERCEIVER_LIBNRT at libnrt.so; --device cpu trains without it");
  NrtApi api;
  api.library = lib.handle;
  api.path = lib.path;
  resolve(api, api.init, "nrt_init");
  resolve(api, api.close, "nrt_close");
  resolve(api, api.load, "nrt_load");
  resolve(api, api.unload, "nrt_unload");
  resolve(api, api.get_model_tensor_info, "nrt_get_model_tensor_info");
  resolve(api, api.free_model_tensor_info, "nrt_free_model_tensor_info");
  resolve(api, api.allocate_tensor_set, "nrt_allocate_tensor_set");
  resolve(api, api.destroy_tensor_set, "nrt_destroy_tensor_set");
  resolve(api, api.add_tensor_to_tensor_set, "nrt_add_tensor_to_tensor_set");
  resolve(api, api.tensor_allocate, "nrt_tensor_allocate");
  resolve(api, api.tensor_free, "nrt_tensor_free");
  resolve(api, api.tensor_read, "nrt_tensor_read");
  resolve(api, api.tensor_write, "nrt_tensor_write");
  resolve(api, api.tensor_memset, "nrt_tensor_memset");
  resolve(api, api.execute, "nrt_execute");
  return api;
}

// The runtime's first status codes (nrt_status.h); later ones are printed as numbers.
const char* nrt_status_name(NrtStatus status) {
  static const char* const names[] = {"NRT_SUCCESS", "NRT_FAILURE", "NRT_INVALID", "NRT_INVALID_HANDLE",
                                      "NRT_RESOURCE", "NRT_TIMEOUT", "NRT_HW_ERROR"};
  return status >= 0 && status < int(std::size(names)) ? names[status] : "see nrt_status.h";
}

void check_nrt(NrtStatus status, const char* call, const std::string& what) {
  PCV_CHECK(status == kNrtSuccess, "device 'neuron': ", call, what.empty() ? "" : " (", what, what.empty() ? "" : ")",
            " failed with status ", status, " (", nrt_status_name(status), ")");
}

}  // namespace perceiver::neuron
