// The parameter registry (DESIGN.md #1, #2): every parameter has its HuggingFace state_dict name,
// a shape, a role (which decides its initialiser and weight decay) and an offset in one flat
// arena. ParamStore owns the parameter arena and a gradient arena of the same layout.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/arena.h"
#include "perceiver/config.h"
#include "perceiver/tensor.h"

namespace perceiver {

/// What a parameter is; initialisers and weight decay follow from it (spec §6, §5 LAMB).
enum class ParamRole {
  kLinearWeight,  // q/k/v/out projections and MLP linears (Haiku conv_1d init)
  kHeadWeight,    // decoder final layer and postprocessor heads (hk.Linear default init)
  kBias,
  kNormGain,
  kNormBias,
  kEmbedding,     // latents, padding rows, mask tokens, trainable queries
};

/// Biases and layer-norm parameters are not decayed (DeepMind's LAMB, spec §5).
bool is_decayed(ParamRole role);

struct ParamSpec {
  std::string name;     // HF state_dict key (relative to the layer when a layer returns it)
  Shape shape;
  ParamRole role = ParamRole::kLinearWeight;
  int64_t fan_in = 0;   // for variance-scaling initialisers
};

/// Adds `prefix` to every name.
std::vector<ParamSpec> prefixed(std::vector<ParamSpec> specs, std::string_view prefix);

class ParamRegistry {
 public:
  struct Entry {
    ParamSpec spec;
    int64_t offset = 0;  // in elements, into the flat arenas
  };

  /// Registers in order; the order is the arena layout and the checkpoint order.
  void add(const ParamSpec& spec);
  void add(const std::vector<ParamSpec>& specs, std::string_view prefix = "");

  const Entry& at(std::string_view name) const;
  bool contains(std::string_view name) const;
  /// The lowest offset of the parameters whose names start with `prefix` (throws if none do).
  int64_t first_offset(std::string_view prefix) const;
  const std::vector<Entry>& entries() const { return entries_; }
  /// Arena size in elements (includes alignment gaps, which stay zero).
  int64_t arena_size() const { return size_; }
  /// Number of trainable scalars.
  int64_t num_parameters() const;

 private:
  std::vector<Entry> entries_;
  std::map<std::string, size_t, std::less<>> index_;
  int64_t size_ = 0;
};

/// Parameter and gradient arenas for one registry, in one backend's memory.
template <class T>
class ParamStore {
 public:
  ParamStore() = default;
  ParamStore(Backend& backend, ParamRegistry registry)
      : registry_(std::move(registry)),
        params_(backend, size_t(registry_.arena_size())),
        grads_(backend, size_t(registry_.arena_size())) {
    params_.name("params");
    grads_.name("grads");
  }
  /// Host memory (the CPU backend), for tests and host-side staging.
  explicit ParamStore(ParamRegistry registry) : ParamStore(cpu_backend(), std::move(registry)) {}

  const ParamRegistry& registry() const { return registry_; }
  TensorView<T> param(std::string_view name) { return view(params_, name); }
  TensorView<T> grad(std::string_view name) { return view(grads_, name); }
  Arena<T>& params() { return params_; }
  Arena<T>& grads() { return grads_; }
  void zero_grad() { grads_.zero(); }
  Backend& backend() const { return *params_.backend(); }

  /// Initialises every parameter from its own stream keyed by (seed, hash(name)), so adding a
  /// parameter never changes the others.
  void initialize(uint64_t seed, InitScheme scheme);

 private:
  TensorView<T> view(Arena<T>& arena, std::string_view name) {
    const auto& e = registry_.at(name);
    return {arena.data() + e.offset, e.spec.shape};
  }
  ParamRegistry registry_;
  Arena<T> params_;
  Arena<T> grads_;
};

/// Runs f(host_store) on the parameters of `store` in host memory: the store itself where its
/// backend's memory is host memory, else a host copy; with `write_back` the copy's parameters go
/// back to the store afterwards. For host IO (weight files, checkpoints) of device runs.
template <class T, class F>
void with_host_params(ParamStore<T>& store, bool write_back, F&& f) {
  if (store.backend().host_accessible()) {
    f(store);
    return;
  }
  ParamStore<T> host(store.registry());
  copy_arena(store.params(), host.params());
  f(host);
  if (write_back) copy_arena(host.params(), store.params());
}

}  // namespace perceiver
