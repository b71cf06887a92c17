// A small harness for layer gradient checks: a parameter store filled with well-scaled random
// values, owned input/output buffers, and the double CPU context.
#pragma once

#include <deque>
#include <vector>

#include "core/context.h"
#include "core/params.h"
#include "grad/grad_check.h"
#include "layers/bind.h"

namespace perceiver::testing {

class Harness {
 public:
  explicit Harness(const std::vector<ParamSpec>& specs, uint64_t seed = 1) : store_(make_registry(specs)) {
    uint64_t s = seed * 1000;
    for (const auto& e : store_.registry().entries()) {
      const bool gain = e.spec.role == ParamRole::kNormGain;
      fill_normal(store_.param(e.spec.name), ++s, gain ? 0.2 : 0.5, gain ? 1.0 : 0.0);
    }
  }

  ParamStore<double>& store() { return store_; }
  ParamBinder<double> binder(const std::string& prefix = "") { return {store_, prefix}; }
  Context<double>& ctx() { return ctx_; }

  /// A zeroed buffer that lives as long as the harness.
  TensorView<double> tensor(Shape shape) {
    buffers_.emplace_back(shape.numel(), 0.0);
    return {buffers_.back().data(), shape};
  }
  TensorView<double> random(Shape shape, uint64_t seed, double std = 1.0) {
    auto t = tensor(shape);
    fill_normal(t, seed, std);
    return t;
  }

  /// Every registered parameter with its gradient, for check_gradients.
  std::vector<GradTensor> param_tensors() {
    std::vector<GradTensor> out;
    for (const auto& e : store_.registry().entries())
      out.push_back({e.spec.name, store_.param(e.spec.name), store_.grad(e.spec.name)});
    return out;
  }

 private:
  static ParamRegistry make_registry(const std::vector<ParamSpec>& specs) {
    ParamRegistry r;
    r.add(specs);
    return r;
  }
  ParamStore<double> store_;
  Context<double> ctx_{cpu_backend()};
  std::deque<std::vector<double>> buffers_;
};

inline double dot(ConstView<double> a, ConstView<double> b) {
  double s = 0;
  for (int64_t i = 0; i < a.numel(); ++i) s += a.data[i] * b.data[i];
  return s;
}

inline void zero(TensorView<double> t) { std::fill(t.data, t.data + t.numel(), 0.0); }

}  // namespace perceiver::testing
