// Binding named views: a layer's parameters, gradients and saved activations are looked up by
// name ("<prefix><local name>") in the parameter store and the activation arena.
#pragma once

#include <string>

#include "core/arena.h"
#include "core/params.h"

namespace perceiver {

template <class T>
struct ParamBinder {
  ParamStore<T>& store;
  std::string prefix;

  ConstView<T> param(const std::string& name) const { return store.param(prefix + name); }
  TensorView<T> grad(const std::string& name) const { return store.grad(prefix + name); }
  ParamBinder sub(const std::string& name) const { return {store, prefix + name}; }
};

template <class T>
struct SavedBinder {
  PlannedArena<T>& arena;
  std::string prefix;

  TensorView<T> operator()(const std::string& name) const { return arena[prefix + name]; }
  SavedBinder sub(const std::string& name) const { return {arena, prefix + name}; }
};

/// Appends `specs` to `out` with `prefix` on each name.
inline void append_specs(std::vector<TensorSpec>& out, const std::vector<TensorSpec>& specs,
                         const std::string& prefix) {
  for (const auto& s : specs) out.push_back({prefix + s.name, s.shape});
}

}  // namespace perceiver
