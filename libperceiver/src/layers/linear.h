// Linear: y = x·Wᵀ + b with torch's weight layout W [out, in] (so HF weights load as they are).
// Saved for backward: only the input x, which the caller keeps and passes back.
#pragma once

#include "core/context.h"
#include "core/params.h"
#include "layers/bind.h"

namespace perceiver {

struct LinearConfig {
  int64_t in = 0, out = 0;
  ParamRole role = ParamRole::kLinearWeight;  // kHeadWeight for hk.Linear-initialised heads
};

/// "weight" [out, in], "bias" [out].
std::vector<ParamSpec> linear_param_specs(const LinearConfig& cfg);

template <class T>
struct LinearParams {
  ConstView<T> weight, bias;
  static LinearParams bind(const ParamBinder<T>& b) { return {b.param("weight"), b.param("bias")}; }
};
template <class T>
struct LinearGrads {
  TensorView<T> weight, bias;
  static LinearGrads bind(const ParamBinder<T>& b) { return {b.grad("weight"), b.grad("bias")}; }
};

/// x [R, in] -> y [R, out] (overwritten).
template <class T>
void linear_forward(const LinearConfig& cfg, const LinearParams<T>& p, ConstView<T> x,
                    TensorView<T> y, Context<T>& ctx);

/// dW += dyᵀ·x, db += Σ dy, and dx += dy·W unless dx is empty.
template <class T>
void linear_backward(const LinearConfig& cfg, const LinearParams<T>& p, ConstView<T> x,
                     ConstView<T> dy, const LinearGrads<T>& g, TensorView<T> dx, Context<T>& ctx);

}  // namespace perceiver
