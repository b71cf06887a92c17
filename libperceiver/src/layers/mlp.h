// MLP: Linear(w → wf·w) → GELU → Linear(wf·w → w). HF names "dense1", "dense2" (spec §2.3).
#pragma once

#include "layers/linear.h"

namespace perceiver {

struct MlpConfig {
  int64_t dim = 0;
  int64_t widening = 1;
  GeluKind gelu = GeluKind::kErf;
  int64_t hidden() const { return dim * widening; }
  LinearConfig dense1() const { return {dim, hidden()}; }
  LinearConfig dense2() const { return {hidden(), dim}; }
};

/// "dense1.weight|bias", "dense2.weight|bias".
std::vector<ParamSpec> mlp_param_specs(const MlpConfig& cfg);
/// "pre" [rows, hidden]. The GELU output is not kept: backward makes it again from "pre" (an
/// elementwise op, far cheaper than the memory: one [rows, hidden] tensor per block).
std::vector<TensorSpec> mlp_saved_specs(const MlpConfig& cfg, int64_t rows);

template <class T>
struct MlpParams {
  LinearParams<T> dense1, dense2;
  static MlpParams bind(const ParamBinder<T>& b) {
    return {LinearParams<T>::bind(b.sub("dense1.")), LinearParams<T>::bind(b.sub("dense2."))};
  }
};
template <class T>
struct MlpGrads {
  LinearGrads<T> dense1, dense2;
  static MlpGrads bind(const ParamBinder<T>& b) {
    return {LinearGrads<T>::bind(b.sub("dense1.")), LinearGrads<T>::bind(b.sub("dense2."))};
  }
};
template <class T>
struct MlpSaved {
  TensorView<T> pre;  // [rows, hidden] dense1 output (GELU input)
  static MlpSaved bind(const SavedBinder<T>& b) { return {b("pre")}; }
};

/// x [rows, dim] -> y [rows, dim] (overwritten). Keeps x's pointer out of `saved`: the caller
/// passes x again to backward.
template <class T>
void mlp_forward(const MlpConfig& cfg, const MlpParams<T>& p, ConstView<T> x,
                 const MlpSaved<T>& saved, TensorView<T> y, Context<T>& ctx);

/// Parameter gradients accumulate; dx += ∂/∂x.
template <class T>
void mlp_backward(const MlpConfig& cfg, const MlpParams<T>& p, ConstView<T> x,
                  const MlpSaved<T>& saved, ConstView<T> dy, const MlpGrads<T>& g,
                  TensorView<T> dx, Context<T>& ctx);

}  // namespace perceiver
