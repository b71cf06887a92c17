// LayerNorm over the last axis: y = (x − μ)·rstd·γ + β, biased variance, eps 1e-5 (spec §1:
// HF's layer_norm_eps is never used). Saves mean and rstd per row, not the normalised tensor.
#pragma once

#include "core/context.h"
#include "core/params.h"
#include "layers/bind.h"

namespace perceiver {

struct LayerNormConfig {
  int64_t dim = 0;
  double eps = 1e-5;
};

/// "weight" [dim] (γ), "bias" [dim] (β).
std::vector<ParamSpec> layer_norm_param_specs(const LayerNormConfig& cfg);
/// "mean" [rows], "rstd" [rows].
std::vector<TensorSpec> layer_norm_saved_specs(int64_t rows);

template <class T>
struct LayerNormParams {
  ConstView<T> weight, bias;
  static LayerNormParams bind(const ParamBinder<T>& b) { return {b.param("weight"), b.param("bias")}; }
};
template <class T>
struct LayerNormGrads {
  TensorView<T> weight, bias;
  static LayerNormGrads bind(const ParamBinder<T>& b) { return {b.grad("weight"), b.grad("bias")}; }
};
template <class T>
struct LayerNormSaved {
  TensorView<T> mean;  // [rows]
  TensorView<T> rstd;  // [rows]
  static LayerNormSaved bind(const SavedBinder<T>& b) { return {b("mean"), b("rstd")}; }
};

template <class T>
void layer_norm_forward(const LayerNormConfig& cfg, const LayerNormParams<T>& p, ConstView<T> x,
                        const LayerNormSaved<T>& saved, TensorView<T> y, Context<T>& ctx);

/// LN(x) into y, for a pass that does not keep the normalised tensor: the same bits as
/// layer_norm_forward, whose statistics it makes again in scratch (live until the caller's
/// ScratchScope ends).
template <class T>
void layer_norm_again(const LayerNormConfig& cfg, const LayerNormParams<T>& p, ConstView<T> x, TensorView<T> y,
                      Context<T>& ctx);

/// layer_norm_again into scratch (live until the caller's ScratchScope ends).
template <class T>
TensorView<T> layer_norm_into_scratch(const LayerNormConfig& cfg, const LayerNormParams<T>& p, ConstView<T> x,
                                      Context<T>& ctx);

/// dx += ∂/∂x, dγ += Σ dy·x̂, dβ += Σ dy. x is the forward input.
template <class T>
void layer_norm_backward(const LayerNormConfig& cfg, const LayerNormParams<T>& p, ConstView<T> x,
                         const LayerNormSaved<T>& saved, ConstView<T> dy,
                         const LayerNormGrads<T>& g, TensorView<T> dx, Context<T>& ctx);

}  // namespace perceiver
