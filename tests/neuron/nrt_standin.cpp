// A STAND-IN for libnrt, built by the tests: it has the entry points and data layouts of the
// Neuron runtime's C API (NRT 2.x, nrt.h / nrt_experimental.h) but no device. It keeps tensors
// in host memory, "loads" a text file in place of a NEFF (the tensor names and sizes the test
// wrote), checks every call against what it knows, appends one line per call to the file named
// by $NRT_STANDIN_LOG, and "executes" by filling each output that is not also an input with a
// recognisable pattern (every 8-byte word = 42.0); $NRT_STANDIN_FAIL makes a call fail. It proves the driver's call protocol — which
// calls, in which order, with which tensors and sizes — and nothing about the hardware.
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

// The runtime's layouts, written from the SDK's documentation (not shared with the driver).
struct TensorInfo {
  char name[256];
  int usage;  // 0 input, 1 output
  size_t size;
  int dtype;
  uint32_t* shape;
  uint32_t ndim;
};
struct TensorInfoArray {
  uint64_t tensor_count;
  TensorInfo tensor_array[1];
};

struct Tensor {
  std::string name;
  std::vector<uint8_t> data;
};
struct Model {
  int id;
  std::vector<std::pair<std::string, size_t>> inputs, outputs;
};
using Set = std::map<std::string, Tensor*>;

constexpr int kSuccess = 0, kFail = 1, kInvalid = 2;
bool g_initialised = false;
int g_models = 0;
std::set<Tensor*> g_tensors;
std::set<Set*> g_sets;

void log(const char* fmt, ...) {
  const char* path = std::getenv("NRT_STANDIN_LOG");
  if (!path) return;
  FILE* f = std::fopen(path, "a");
  if (!f) return;
  va_list ap;
  va_start(ap, fmt);
  std::vfprintf(f, fmt, ap);
  va_end(ap);
  std::fputc('\n', f);
  std::fclose(f);
}

// $NRT_STANDIN_FAIL = "CALL=STATUS" makes CALL return STATUS (how a test sees the driver turn a
// runtime error into a clear one); 0 for every other call.
int injected(const char* call) {
  const char* spec = std::getenv("NRT_STANDIN_FAIL");
  const size_t n = std::strlen(call);
  if (!spec || std::strncmp(spec, call, n) != 0 || spec[n] != '=') return kSuccess;
  const int status = std::atoi(spec + n + 1);
  log("%s FAILS WITH %d (injected)", call, status);
  return status;
}

}  // namespace

extern "C" {

int nrt_init(int framework, const char* fw_version, const char* fal_version) {
  log("nrt_init framework=%d fw='%s' fal='%s'%s", framework, fw_version, fal_version, g_initialised ? " AGAIN" : "");
  g_initialised = true;
  return kSuccess;
}

void nrt_close() {
  log("nrt_close tensors_left=%zu sets_left=%zu", g_tensors.size(), g_sets.size());
  g_initialised = false;
}

// The "NEFF": lines "PCV-NRT-STANDIN", then "input NAME BYTES" / "output NAME BYTES".
int nrt_load(const void* neff, size_t size, int32_t start_vnc, int32_t vnc_count, Model** model) {
  std::istringstream in(std::string(static_cast<const char*>(neff), size));
  std::string magic, kind, name;
  size_t bytes = 0;
  in >> magic;
  if (const int status = injected("nrt_load")) return status;
  if (!g_initialised || magic != "PCV-NRT-STANDIN") {
    log("nrt_load REFUSED initialised=%d magic='%s'", int(g_initialised), magic.c_str());
    return kInvalid;
  }
  auto* m = new Model{++g_models, {}, {}};
  while (in >> kind >> name >> bytes) (kind == "input" ? m->inputs : m->outputs).emplace_back(name, bytes);
  log("nrt_load model=%d bytes=%zu start_vnc=%d vnc_count=%d inputs=%zu outputs=%zu", m->id, size, start_vnc, vnc_count,
      m->inputs.size(), m->outputs.size());
  *model = m;
  return kSuccess;
}

int nrt_unload(Model* model) {
  log("nrt_unload model=%d", model->id);
  delete model;
  return kSuccess;
}

int nrt_get_model_tensor_info(Model* model, TensorInfoArray** info) {
  const size_t n = model->inputs.size() + model->outputs.size();
  auto* a = static_cast<TensorInfoArray*>(std::calloc(1, sizeof(TensorInfoArray) + n * sizeof(TensorInfo)));
  a->tensor_count = n;
  size_t i = 0;
  for (int usage = 0; usage < 2; ++usage)
    for (const auto& [name, bytes] : usage == 0 ? model->inputs : model->outputs) {
      TensorInfo& t = a->tensor_array[i++];
      std::snprintf(t.name, sizeof t.name, "%s", name.c_str());
      t.usage = usage;
      t.size = bytes;
    }
  log("nrt_get_model_tensor_info model=%d tensors=%zu", model->id, n);
  *info = a;
  return kSuccess;
}

int nrt_free_model_tensor_info(TensorInfoArray* info) {
  std::free(info);
  return kSuccess;
}

int nrt_allocate_tensor_set(Set** set) {
  *set = new Set;
  g_sets.insert(*set);
  return kSuccess;
}

void nrt_destroy_tensor_set(Set** set) {
  g_sets.erase(*set);
  delete *set;
  *set = nullptr;
}

int nrt_add_tensor_to_tensor_set(Set* set, const char* name, Tensor* tensor) {
  if (!g_sets.count(set) || !g_tensors.count(tensor)) {
    log("nrt_add_tensor_to_tensor_set INVALID name=%s", name);
    return kInvalid;
  }
  (*set)[name] = tensor;
  return kSuccess;
}

int nrt_tensor_allocate(int placement, int vnc, size_t size, const char* name, Tensor** tensor) {
  auto* t = new Tensor{name ? name : "", std::vector<uint8_t>(size, 0)};
  g_tensors.insert(t);
  log("nrt_tensor_allocate name=%s bytes=%zu placement=%d vnc=%d", t->name.c_str(), size, placement, vnc);
  *tensor = t;
  return kSuccess;
}

void nrt_tensor_free(Tensor** tensor) {
  log("nrt_tensor_free name=%s", (*tensor)->name.c_str());
  g_tensors.erase(*tensor);
  delete *tensor;
  *tensor = nullptr;
}

int nrt_tensor_read(const Tensor* t, void* buf, size_t offset, size_t size) {
  if (!g_tensors.count(const_cast<Tensor*>(t)) || offset + size > t->data.size()) {
    log("nrt_tensor_read OUT OF RANGE name=%s offset=%zu bytes=%zu", t->name.c_str(), offset, size);
    return kInvalid;
  }
  std::memcpy(buf, t->data.data() + offset, size);
  log("nrt_tensor_read name=%s offset=%zu bytes=%zu", t->name.c_str(), offset, size);
  return kSuccess;
}

int nrt_tensor_write(Tensor* t, const void* buf, size_t offset, size_t size) {
  if (!g_tensors.count(t) || offset + size > t->data.size()) {
    log("nrt_tensor_write OUT OF RANGE name=%s offset=%zu bytes=%zu", t->name.c_str(), offset, size);
    return kInvalid;
  }
  std::memcpy(t->data.data() + offset, buf, size);
  log("nrt_tensor_write name=%s offset=%zu bytes=%zu", t->name.c_str(), offset, size);
  return kSuccess;
}

int nrt_tensor_memset(Tensor* t, uint64_t offset, int value, size_t size) {
  if (!g_tensors.count(t) || offset + size > t->data.size()) return kInvalid;
  std::memset(t->data.data() + offset, value, size);
  log("nrt_tensor_memset name=%s offset=%llu bytes=%zu", t->name.c_str(), (unsigned long long)offset, size);
  return kSuccess;
}

// Every NEFF input and output must be in the sets with its size; in-place outputs (the same
// tensor as an input) keep their bytes, the others get the pattern.
int nrt_execute(Model* model, const Set* in, Set* out) {
  if (const int status = injected("nrt_execute")) return status;
  std::set<Tensor*> inputs;
  for (const auto& [name, bytes] : model->inputs) {
    auto it = in->find(name);
    if (it == in->end() || it->second->data.size() != bytes) {
      log("nrt_execute model=%d BAD INPUT %s", model->id, name.c_str());
      return kInvalid;
    }
    inputs.insert(it->second);
  }
  int in_place = 0;
  for (const auto& [name, bytes] : model->outputs) {
    auto it = out->find(name);
    if (it == out->end() || it->second->data.size() != bytes) {
      log("nrt_execute model=%d BAD OUTPUT %s", model->id, name.c_str());
      return kInvalid;
    }
    if (inputs.count(it->second)) {
      ++in_place;
      continue;
    }
    const double pattern = 42.0;
    for (size_t o = 0; o + 8 <= bytes; o += 8) std::memcpy(it->second->data.data() + o, &pattern, 8);
  }
  log("nrt_execute model=%d inputs=%zu outputs=%zu in_place=%d", model->id, in->size(), out->size(), in_place);
  return in->size() == model->inputs.size() && out->size() == model->outputs.size() ? kSuccess : kFail;
}

}  // extern "C"
