#include "layers/mlp.h"

namespace perceiver {

std::vector<ParamSpec> mlp_param_specs(const MlpConfig& cfg) {
  auto specs = prefixed(linear_param_specs(cfg.dense1()), "dense1.");
  for (auto& s : prefixed(linear_param_specs(cfg.dense2()), "dense2.")) specs.push_back(s);
  return specs;
}

std::vector<TensorSpec> mlp_saved_specs(const MlpConfig& cfg, int64_t rows) {
  return {{"pre", Shape{rows, cfg.hidden()}}};
}

template <class T>
void mlp_forward(const MlpConfig& cfg, const MlpParams<T>& p, ConstView<T> x,
                 const MlpSaved<T>& saved, TensorView<T> y, Context<T>& ctx) {
  ScratchScope<T> scope(ctx.scratch);
  TensorView<T> act = ctx.scratch.take_for_write(saved.pre.shape);  // [rows, hidden]
  linear_forward(cfg.dense1(), p.dense1, x, saved.pre, ctx);
  ctx.k.gelu_forward(cfg.gelu, act.numel(), saved.pre.data, act.data);
  linear_forward(cfg.dense2(), p.dense2, ConstView<T>(act), y, ctx);
}

template <class T>
void mlp_backward(const MlpConfig& cfg, const MlpParams<T>& p, ConstView<T> x,
                  const MlpSaved<T>& saved, ConstView<T> dy, const MlpGrads<T>& g,
                  TensorView<T> dx, Context<T>& ctx) {
  ScratchScope<T> scope(ctx.scratch);
  // The GELU output again (the same bits as forward); its buffer then takes the GELU input's
  // gradient, so backward needs no more scratch than when forward kept it.
  TensorView<T> act_then_d_pre = ctx.scratch.take_for_write(saved.pre.shape);  // [rows, hidden]
  TensorView<T> d_act = ctx.scratch.take(saved.pre.shape);                     // [rows, hidden]
  ctx.k.gelu_forward(cfg.gelu, act_then_d_pre.numel(), saved.pre.data, act_then_d_pre.data);
  linear_backward(cfg.dense2(), p.dense2, ConstView<T>(act_then_d_pre), dy, g.dense2, d_act, ctx);
  TensorView<T> d_pre = act_then_d_pre;
  ctx.k.fill(d_pre.numel(), T(0), d_pre.data);
  ctx.k.gelu_backward(cfg.gelu, d_pre.numel(), saved.pre.data, d_act.data, d_pre.data);
  linear_backward(cfg.dense1(), p.dense1, x, ConstView<T>(d_pre), g.dense1, dx, ctx);
}

#define PCV_INSTANTIATE(T)                                                                        \
  template void mlp_forward<T>(const MlpConfig&, const MlpParams<T>&, ConstView<T>,               \
                               const MlpSaved<T>&, TensorView<T>, Context<T>&);                   \
  template void mlp_backward<T>(const MlpConfig&, const MlpParams<T>&, ConstView<T>,              \
                                const MlpSaved<T>&, ConstView<T>, const MlpGrads<T>&,             \
                                TensorView<T>, Context<T>&);
PCV_INSTANTIATE(float)
PCV_INSTANTIATE(double)
#undef PCV_INSTANTIATE

}  // namespace perceiver
