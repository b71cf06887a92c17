#include "layers/layer_norm.h"

namespace perceiver {

std::vector<ParamSpec> layer_norm_param_specs(const LayerNormConfig& cfg) {
  return {{"weight", Shape{cfg.dim}, ParamRole::kNormGain, 0},
          {"bias", Shape{cfg.dim}, ParamRole::kNormBias, 0}};
}

std::vector<TensorSpec> layer_norm_saved_specs(int64_t rows) {
  return {{"mean", Shape{rows}}, {"rstd", Shape{rows}}};
}

template <class T>
void layer_norm_forward(const LayerNormConfig& cfg, const LayerNormParams<T>& p, ConstView<T> x,
                        const LayerNormSaved<T>& saved, TensorView<T> y, Context<T>& ctx) {
  PCV_ASSERT(x.cols() == cfg.dim && y.shape == x.shape && saved.mean.numel() == x.rows(),
             "layer norm dim ", cfg.dim, " on ", x.shape.str());
  ctx.k.layer_norm_forward(x.rows(), cfg.dim, x.data, p.weight.data, p.bias.data, cfg.eps, y.data,
                           saved.mean.data, saved.rstd.data);
}

template <class T>
void layer_norm_again(const LayerNormConfig& cfg, const LayerNormParams<T>& p, ConstView<T> x, TensorView<T> y,
                      Context<T>& ctx) {
  const LayerNormSaved<T> stats{ctx.scratch.take_for_write(Shape{x.rows()}), ctx.scratch.take_for_write(Shape{x.rows()})};
  layer_norm_forward(cfg, p, x, stats, y, ctx);
}

template <class T>
TensorView<T> layer_norm_into_scratch(const LayerNormConfig& cfg, const LayerNormParams<T>& p, ConstView<T> x,
                                      Context<T>& ctx) {
  TensorView<T> y = ctx.scratch.take_for_write(x.shape);
  layer_norm_again(cfg, p, x, y, ctx);
  return y;
}

template <class T>
void layer_norm_backward(const LayerNormConfig& cfg, const LayerNormParams<T>& p, ConstView<T> x,
                         const LayerNormSaved<T>& saved, ConstView<T> dy,
                         const LayerNormGrads<T>& g, TensorView<T> dx, Context<T>& ctx) {
  PCV_ASSERT(dy.shape == x.shape && dx.shape == x.shape);
  ctx.k.layer_norm_backward(x.rows(), cfg.dim, x.data, p.weight.data, saved.mean.data,
                            saved.rstd.data, dy.data, dx.data, g.weight.data, g.bias.data);
}

#define PCV_INSTANTIATE(T)                                                                        \
  template void layer_norm_forward<T>(const LayerNormConfig&, const LayerNormParams<T>&,          \
                                      ConstView<T>, const LayerNormSaved<T>&, TensorView<T>,      \
                                      Context<T>&);                                               \
  template void layer_norm_again<T>(const LayerNormConfig&, const LayerNormParams<T>&, ConstView<T>,      \
                                    TensorView<T>, Context<T>&);                                        \
  template TensorView<T> layer_norm_into_scratch<T>(const LayerNormConfig&, const LayerNormParams<T>&, \
                                                    ConstView<T>, Context<T>&);                   \
  template void layer_norm_backward<T>(const LayerNormConfig&, const LayerNormParams<T>&,         \
                                       ConstView<T>, const LayerNormSaved<T>&, ConstView<T>,      \
                                       const LayerNormGrads<T>&, TensorView<T>, Context<T>&);
PCV_INSTANTIATE(float)
PCV_INSTANTIATE(double)
#undef PCV_INSTANTIATE

}  // namespace perceiver
