#include "layers/linear.h"

namespace perceiver {

std::vector<ParamSpec> linear_param_specs(const LinearConfig& cfg) {
  return {{"weight", Shape{cfg.out, cfg.in}, cfg.role, cfg.in},
          {"bias", Shape{cfg.out}, ParamRole::kBias, cfg.in}};
}

template <class T>
void linear_forward(const LinearConfig& cfg, const LinearParams<T>& p, ConstView<T> x,
                    TensorView<T> y, Context<T>& ctx) {
  PCV_ASSERT(x.cols() == cfg.in && y.cols() == cfg.out && x.rows() == y.rows(), "linear ",
             x.shape.str(), " -> ", y.shape.str(), " with in=", cfg.in, " out=", cfg.out);
  const int64_t rows = x.rows();
  ctx.k.gemm(Transpose::kNo, Transpose::kYes, rows, cfg.out, cfg.in, T(1), x.data, cfg.in,
             p.weight.data, cfg.in, T(0), y.data, cfg.out);
  ctx.k.bias_forward(rows, cfg.out, p.bias.data, y.data);
}

template <class T>
void linear_backward(const LinearConfig& cfg, const LinearParams<T>& p, ConstView<T> x,
                     ConstView<T> dy, const LinearGrads<T>& g, TensorView<T> dx, Context<T>& ctx) {
  const int64_t rows = x.rows();
  PCV_ASSERT(dy.rows() == rows && dy.cols() == cfg.out && x.cols() == cfg.in);
  // dW [out,in] += dyᵀ [out,R] · x [R,in]
  ctx.k.gemm(Transpose::kYes, Transpose::kNo, cfg.out, cfg.in, rows, T(1), dy.data, cfg.out, x.data,
             cfg.in, T(1), g.weight.data, cfg.in);
  ctx.k.bias_backward(rows, cfg.out, dy.data, g.bias.data);
  if (!dx.empty()) {
    PCV_ASSERT(dx.rows() == rows && dx.cols() == cfg.in);
    // dx [R,in] += dy [R,out] · W [out,in]
    ctx.k.gemm(Transpose::kNo, Transpose::kNo, rows, cfg.in, cfg.out, T(1), dy.data, cfg.out,
               p.weight.data, cfg.in, T(1), dx.data, cfg.in);
  }
}

#define PCV_INSTANTIATE(T)                                                                         \
  template void linear_forward<T>(const LinearConfig&, const LinearParams<T>&, ConstView<T>,       \
                                  TensorView<T>, Context<T>&);                                     \
  template void linear_backward<T>(const LinearConfig&, const LinearParams<T>&, ConstView<T>,      \
                                   ConstView<T>, const LinearGrads<T>&, TensorView<T>, Context<T>&);
PCV_INSTANTIATE(float)
PCV_INSTANTIATE(double)
#undef PCV_INSTANTIATE

}  // namespace perceiver
