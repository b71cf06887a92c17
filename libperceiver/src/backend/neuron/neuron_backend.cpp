#include "backend/neuron/neuron_backend.h"

#include <cstdlib>
#include <cstring>
#include <fstream>

#include "perceiver/error.h"

namespace perceiver::neuron {
namespace {

std::vector<char> read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  PCV_CHECK(f.good(), "cannot read ", p.string());
  return std::vector<char>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

size_t arg_bytes(const capture::ModuleArg& a) { return size_t(a.elems) * capture::elem_bytes(a.elem); }
size_t result_bytes(const capture::ModuleResult& r) { return size_t(r.elems) * capture::elem_bytes(r.elem); }

}  // namespace

std::filesystem::path NeuronBackend::neff_dir() {
  const char* env = std::getenv("PERCEIVER_NEFF_DIR");
  return env && *env ? std::filesystem::path(env) : std::filesystem::path("neff");
}

NeuronBackend::NeuronBackend(const BackendOptions& options)
    : api_(load_nrt()), core_(options.device_index < 0 ? 0 : options.device_index), dir_(neff_dir()) {
  PCV_CHECK(options.precision == Precision::kFp32, "device 'neuron': --precision bf16 is chosen when the NEFFs are ",
            "compiled (neuronx-cc --auto-cast matmult --auto-cast-type bf16, deploy/neuron/README.md); run with fp32");
  check_nrt(api_.init(kNrtFrameworkNoFw, "", ""), "nrt_init");
  set_auto_regions(true);
  recorder().on_free = [this](int32_t id) { release(id); };
}

NeuronBackend::~NeuronBackend() {
  recorder().on_free = nullptr;
  for (auto& [id, t] : twins_) api_.tensor_free(&t);
  for (auto& [hash, m] : models_) {
    for (NrtTensor*& t : m.staging_in)
      if (t) api_.tensor_free(&t);
    for (NrtTensor*& t : m.staging_out)
      if (t) api_.tensor_free(&t);
    api_.unload(m.model);
  }
  api_.close();
}

std::string NeuronBackend::describe() const {
  return "neuron: NeuronCore " + std::to_string(core_) + " through " + api_.path + "; compiled steps from " +
         dir_.string() + " (" + std::to_string(models_.size()) + " loaded)";
}

void NeuronBackend::release(int32_t buffer) {
  auto it = twins_.find(buffer);
  if (it == twins_.end()) return;
  api_.tensor_free(&it->second);
  twins_.erase(it);
}

// The device copy of a buffer; made on first use, with the host's bytes when `upload`.
NrtTensor* NeuronBackend::twin(int32_t buffer, bool upload) {
  auto it = twins_.find(buffer);
  if (it != twins_.end()) return it->second;
  const capture::BufferInfo& info = recorder().info(buffer);
  NrtTensor* t = nullptr;
  const std::string name = info.name.empty() ? "buffer" + std::to_string(buffer) : info.name;
  check_nrt(api_.tensor_allocate(kNrtPlacementDevice, core_, info.bytes, name.c_str(), &t), "nrt_tensor_allocate", name);
  if (upload) check_nrt(api_.tensor_write(t, recorder().base(buffer), 0, info.bytes), "nrt_tensor_write", name);
  twins_[buffer] = t;
  return t;
}

NrtTensor* NeuronBackend::staging(std::vector<NrtTensor*>& slots, size_t index, size_t bytes, const std::string& name) {
  if (slots.size() <= index) slots.resize(index + 1, nullptr);
  if (!slots[index])
    check_nrt(api_.tensor_allocate(kNrtPlacementDevice, core_, bytes, name.c_str(), &slots[index]), "nrt_tensor_allocate",
              name);
  return slots[index];
}

// Reads the NEFF's input and output names and checks them against the module's arguments and
// results (count and bytes, in order).
void NeuronBackend::match_tensors(const capture::Module& m, const std::filesystem::path& neff, Loaded& l) {
  NrtTensorInfoArray* info = nullptr;
  check_nrt(api_.get_model_tensor_info(l.model, &info), "nrt_get_model_tensor_info", neff.string());
  std::vector<size_t> in_sizes, out_sizes;
  for (uint64_t i = 0; i < info->tensor_count; ++i) {
    const NrtTensorInfo& t = info->tensor_array[i];
    (t.usage == kNrtUsageInput ? l.inputs : l.outputs).emplace_back(t.name);
    (t.usage == kNrtUsageInput ? in_sizes : out_sizes).push_back(t.size);
  }
  api_.free_model_tensor_info(info);
  PCV_CHECK(l.inputs.size() == m.args.size() && l.outputs.size() == m.results.size(), "device 'neuron': ", neff.string(),
            " has ", l.inputs.size(), " inputs and ", l.outputs.size(), " outputs; module ", m.hash, " has ", m.args.size(),
            " arguments and ", m.results.size(), " results (a NEFF of another module?)");
  for (size_t i = 0; i < m.args.size(); ++i)
    PCV_CHECK(in_sizes[i] == arg_bytes(m.args[i]), "device 'neuron': NEFF input ", l.inputs[i], " has ", in_sizes[i],
              " bytes but argument ", m.args[i].name, " of module ", m.hash, " has ", arg_bytes(m.args[i]));
  for (size_t i = 0; i < m.results.size(); ++i)
    PCV_CHECK(out_sizes[i] == result_bytes(m.results[i]), "device 'neuron': NEFF output ", l.outputs[i], " has ",
              out_sizes[i], " bytes but result ", m.results[i].name, " of module ", m.hash, " has ",
              result_bytes(m.results[i]));
}

// Loads the NEFF compiled from module `m` once.
NeuronBackend::Loaded& NeuronBackend::load(const capture::Module& m) {
  auto it = models_.find(m.hash);
  if (it != models_.end()) return it->second;
  const std::filesystem::path neff = dir_ / (m.hash + ".neff");
  PCV_CHECK(std::filesystem::exists(neff), "device 'neuron': no compiled step for these shapes: ", neff.string(),
            " does not exist (module ", m.hash, "). HINT: where the Neuron SDK is installed, run perceiver-export --out ",
            "DIR with this run's perceiver-train flags, then deploy/neuron/compile-neffs.sh DIR ", dir_.string(),
            " (for this module: neuronx-cc compile DIR/", m.hash, ".hlo.pb --framework XLA --target trn1 --output ",
            neff.string(), ")");
  const std::vector<char> bytes = read_file(neff);
  Loaded l;
  check_nrt(api_.load(bytes.data(), bytes.size(), core_, 1, &l.model), "nrt_load", neff.string());
  try {
    match_tensors(m, neff, l);
  } catch (...) {
    api_.unload(l.model);
    throw;
  }
  return models_[m.hash] = std::move(l);
}

// A tensor set for one execution, destroyed however the execution ends.
class NeuronBackend::TensorSet {
 public:
  explicit TensorSet(const NrtApi& api) : api_(api) { check_nrt(api.allocate_tensor_set(&set_), "nrt_allocate_tensor_set"); }
  ~TensorSet() {
    if (set_) api_.destroy_tensor_set(&set_);
  }
  TensorSet(const TensorSet&) = delete;
  TensorSet& operator=(const TensorSet&) = delete;
  NrtTensorSet* get() const { return set_; }

 private:
  const NrtApi& api_;
  NrtTensorSet* set_ = nullptr;
};

void NeuronBackend::run(const capture::Graph& g) {
  const capture::Module m = capture::lower(g);
  Loaded& l = load(m);
  const TensorSet in_set(api_), out_set(api_);
  NrtTensorSet *in = in_set.get(), *out = out_set.get();
  for (size_t i = 0; i < m.args.size(); ++i) {
    const capture::ModuleArg& a = m.args[i];
    NrtTensor* t = nullptr;
    if (a.kind == capture::ModuleArg::Kind::kScalar) {
      t = staging(l.staging_in, i, sizeof(double), a.name);
      check_nrt(api_.tensor_write(t, &a.value, 0, sizeof(double)), "nrt_tensor_write", a.name);
    } else if (a.kind == capture::ModuleArg::Kind::kInput) {
      t = staging(l.staging_in, i, arg_bytes(a), a.name);
      const auto& data = g.nodes[size_t(a.node)].data;
      check_nrt(api_.tensor_write(t, data.data(), 0, data.size()), "nrt_tensor_write", a.name);
    } else {
      t = twin(a.buffer, true);  // resident: written through by the host, updated in place by graphs
    }
    check_nrt(api_.add_tensor_to_tensor_set(in, l.inputs[i].c_str(), t), "nrt_add_tensor_to_tensor_set", l.inputs[i]);
  }
  for (size_t i = 0; i < m.results.size(); ++i) {
    const capture::ModuleResult& r = m.results[i];
    NrtTensor* t = r.kind == capture::ModuleResult::Kind::kState ? twin(r.buffer, false)
                                                                  : staging(l.staging_out, i, result_bytes(r), r.name);
    check_nrt(api_.add_tensor_to_tensor_set(out, l.outputs[i].c_str(), t), "nrt_add_tensor_to_tensor_set", l.outputs[i]);
  }
  check_nrt(api_.execute(l.model, in, out), "nrt_execute", "module " + m.hash);
  ++executions_;
  for (size_t i = 0; i < m.results.size(); ++i) {  // what the host reads lands in host memory
    const capture::ModuleResult& r = m.results[i];
    if (r.kind != capture::ModuleResult::Kind::kHostRead) continue;
    check_nrt(api_.tensor_read(l.staging_out[i], recorder().base(r.buffer) + r.byte_offset, 0, result_bytes(r)),
              "nrt_tensor_read", r.name);
  }
}

void NeuronBackend::zero(void* dst, size_t bytes) {
  CaptureBackend::zero(dst, bytes);  // recorded in a graph, else a write of the host memory
  if (recording() || !bytes) return;
  const auto [id, offset] = recorder().locate(dst, bytes, "zero");
  if (auto it = twins_.find(id); it != twins_.end())
    check_nrt(api_.tensor_memset(it->second, offset, 0, bytes), "nrt_tensor_memset");
}

void NeuronBackend::copy_to_device(void* dst, const void* src, size_t bytes) {
  CaptureBackend::copy_to_device(dst, src, bytes);
  if (recording() || !bytes) return;
  const auto [id, offset] = recorder().locate(dst, bytes, "copy_to_device");
  if (auto it = twins_.find(id); it != twins_.end())
    check_nrt(api_.tensor_write(it->second, src, offset, bytes), "nrt_tensor_write");
}

void NeuronBackend::copy_to_host(void* dst, const void* src, size_t bytes) {
  if (!bytes) return;
  if (recording()) {  // the host wants a result: the graph so far runs now
    CaptureBackend::copy_to_host(dst, src, bytes);
    run(end());
    std::memcpy(dst, src, bytes);
    return;
  }
  const auto [id, offset] = recorder().locate(src, bytes, "copy_to_host");
  if (auto it = twins_.find(id); it != twins_.end()) {
    check_nrt(api_.tensor_read(it->second, dst, offset, bytes), "nrt_tensor_read");
    return;
  }
  PCV_CHECK(!recorder().op_written(id), "device 'neuron': buffer ", id, " (", bytes, " bytes) was computed inside a ",
            "compiled step and is not kept on the device; only named state and what a step's own host reads return ",
            "are. HINT: read it before the step's first host read, or name it (Backend::name_buffer)");
  std::memcpy(dst, src, bytes);  // never on the device: the host's own bytes
}

void NeuronBackend::synchronize() {
  if (recording()) run(end());
}

}  // namespace perceiver::neuron
