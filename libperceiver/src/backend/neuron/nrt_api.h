// The part of the Neuron runtime's C API (aws-neuron-sdk src/libnrt/include/nrt/nrt.h and
// nrt_experimental.h, NRT 2.x) that the driver uses, declared here so that the library has no
// build- or link-time dependency on the SDK: libnrt.so is opened with dlopen at run time, and
// a machine without it gets a clear error. The layouts below are the runtime's ABI.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace perceiver::neuron {

using NrtStatus = int;  // NRT_STATUS; 0 is NRT_SUCCESS
constexpr NrtStatus kNrtSuccess = 0;
struct NrtModel;   // nrt_model_t
struct NrtTensor;  // nrt_tensor_t
using NrtTensorSet = void;  // nrt_tensor_set_t

enum NrtFramework { kNrtFrameworkNoFw = 1 };                            // NRT_FRAMEWORK_TYPE_NO_FW
enum NrtPlacement { kNrtPlacementDevice = 0, kNrtPlacementHost = 1 };   // nrt_tensor_placement_t
enum NrtUsage { kNrtUsageInput = 0, kNrtUsageOutput = 1 };              // nrt_tensor_usage_t

constexpr size_t kNrtTensorNameMax = 256;
struct NrtTensorInfo {  // nrt_tensor_info_t
  char name[kNrtTensorNameMax];
  int usage;  // NrtUsage
  size_t size;
  int dtype;
  uint32_t* shape;
  uint32_t ndim;
};
struct NrtTensorInfoArray {  // nrt_tensor_info_array_t
  uint64_t tensor_count;
  NrtTensorInfo tensor_array[1];  // tensor_count entries (a flexible array in C)
};

/// The runtime's entry points, resolved from one dlopen'ed library.
struct NrtApi {
  NrtStatus (*init)(int framework, const char* fw_version, const char* fal_version) = nullptr;
  void (*close)() = nullptr;
  NrtStatus (*load)(const void* neff, size_t size, int32_t start_vnc, int32_t vnc_count, NrtModel** model) = nullptr;
  NrtStatus (*unload)(NrtModel* model) = nullptr;
  NrtStatus (*get_model_tensor_info)(NrtModel* model, NrtTensorInfoArray** info) = nullptr;
  NrtStatus (*free_model_tensor_info)(NrtTensorInfoArray* info) = nullptr;
  NrtStatus (*allocate_tensor_set)(NrtTensorSet** set) = nullptr;
  void (*destroy_tensor_set)(NrtTensorSet** set) = nullptr;
  NrtStatus (*add_tensor_to_tensor_set)(NrtTensorSet* set, const char* name, NrtTensor* tensor) = nullptr;
  NrtStatus (*tensor_allocate)(int placement, int vnc, size_t size, const char* name, NrtTensor** tensor) = nullptr;
  void (*tensor_free)(NrtTensor** tensor) = nullptr;
  NrtStatus (*tensor_read)(const NrtTensor* tensor, void* buf, size_t offset, size_t size) = nullptr;
  NrtStatus (*tensor_write)(NrtTensor* tensor, const void* buf, size_t offset, size_t size) = nullptr;
  NrtStatus (*tensor_memset)(NrtTensor* tensor, uint64_t offset, int value, size_t size) = nullptr;
  NrtStatus (*execute)(NrtModel* model, const NrtTensorSet* inputs, NrtTensorSet* outputs) = nullptr;

  void* library = nullptr;  // the dlopen handle
  std::string path;         // where it was found
};

/// Opens libnrt: $PERCEIVER_LIBNRT if set, else libnrt.so.1 / libnrt.so on the loader's path and
/// /opt/aws/neuron/lib. Throws perceiver::Error saying that the Neuron SDK is not installed here
/// (with every place tried) when none loads, or naming a missing entry point.
NrtApi load_nrt();

/// The name of a runtime status code (NRT_TIMEOUT, ...).
const char* nrt_status_name(NrtStatus status);

/// Throws perceiver::Error naming the call, what it was for and its status when `status` is not
/// success.
void check_nrt(NrtStatus status, const char* call, const std::string& what = "");

}  // namespace perceiver::neuron
