// Optimizer updates and gradient clipping on CPU (op_params.h OptimStep): SGD with momentum and
// AdamW with PyTorch's semantics, LAMB with DeepMind's (perceiver-spec.md §5). Work is split by
// OptimChunk (fixed by the parameter registry) and every reduction has a fixed order, so results
// are bitwise identical at any thread count.
#include <cmath>

#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_parallel.h"

namespace perceiver::cpu {
namespace {

constexpr int64_t kMinParallelElems = 1 << 15;  // below this a parallel region costs more than the loop

// The step is skipped when the gradient norm is not finite (NaN or Inf anywhere).
bool finite_step(const OptimStep& s) { return std::isfinite(*s.grad_sumsq); }

}  // namespace

// optax.clip_by_global_norm: t -> (t / g_norm) * max_norm, in the tensor's precision; kept when
// norm < max_norm; a non-finite norm is left for the update to skip.
template <class T>
void clip_by_global_norm(int64_t n, T* x, const double* sumsq, double max_norm, double* clipped) {
  const double norm = std::sqrt(*sumsq);
  const bool clip = std::isfinite(norm) && !(norm < max_norm);
  *clipped = clip ? 1.0 : 0.0;
  if (!clip) return;
  const T nf = T(norm), mf = T(max_norm);
  detail::for_spans(n, n > kMinParallelElems, [=](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) x[i] = (x[i] / nf) * mf;
  });
}

// torch.optim.SGD (dampening 0, no Nesterov): g += wd·p; buf = momentum·buf + g (buf = g on the
// first step, the same value from a zero buffer); p -= lr·buf.
template <class T>
void sgd_update(const OptimStep& s, T* params, const T* grads, T* buf) {
  if (!finite_step(s)) return;
  const T mom = T(s.momentum), lr = T(s.lr), wd = T(s.weight_decay);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < s.num_chunks; ++c) {
    const OptimChunk& ch = s.chunks[c];
    const T wdc = ch.decayed ? wd : T(0);
    for (int64_t i = ch.begin; i < ch.end; ++i) {
      const T gi = wdc != T(0) ? grads[i] + wdc * params[i] : grads[i];
      buf[i] = mom * buf[i] + gi;
      params[i] -= lr * buf[i];
    }
  }
}

// torch.optim.AdamW (_single_tensor_adamw, amsgrad off). The scalars are computed in double, as
// torch computes them in Python before the float kernels.
template <class T>
void adamw_update(const OptimStep& s, T* params, const T* grads, T* m, T* v) {
  if (!finite_step(s)) return;
  const double t = double(s.t);
  const T b1 = T(s.beta1), b2 = T(s.beta2), one_b1 = T(1 - s.beta1), one_b2 = T(1 - s.beta2);
  const T decay = T(1 - s.lr * s.weight_decay);
  const T step_size = T(s.lr / (1 - std::pow(s.beta1, t)));
  const T bc2_sqrt = T(std::sqrt(1 - std::pow(s.beta2, t)));
  const T eps = T(s.eps);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < s.num_chunks; ++c) {
    const OptimChunk& ch = s.chunks[c];
    const T dc = ch.decayed ? decay : T(1);
    for (int64_t i = ch.begin; i < ch.end; ++i) {
      params[i] *= dc;
      m[i] = m[i] * b1 + one_b1 * grads[i];
      v[i] = v[i] * b2 + one_b2 * grads[i] * grads[i];
      params[i] -= step_size * (m[i] / (std::sqrt(v[i]) / bc2_sqrt + eps));
    }
  }
}

namespace {

template <class T>
struct LambCoeffs {
  T b1, b2, one_b1, one_b2, bc1, bc2, eps, wd;
  explicit LambCoeffs(const OptimStep& s)
      : b1(T(s.beta1)), b2(T(s.beta2)), one_b1(T(1 - s.beta1)), one_b2(T(1 - s.beta2)),
        bc1(T(1 - std::pow(s.beta1, double(s.t)))), bc2(T(1 - std::pow(s.beta2, double(s.t)))), eps(T(s.eps)),
        wd(T(s.weight_decay)) {}
  // scale_by_adam (eps_root 0) then add_decayed_weights. The apply pass calls it again on the
  // same inputs, so the update is recomputed bit-for-bit instead of stored in a third arena.
  T update(T m, T v, T p, bool decayed) const {
    const T u = (m / bc1) / (std::sqrt(v / bc2) + eps);
    return decayed ? u + wd * p : u;
  }
};

}  // namespace

// DeepMind's LAMB (an optax chain): Adam moments; per-tensor trust ratio ‖p‖/‖u‖ (1 when either
// is 0) from per-chunk partial sums added in chunk order; p -= lr · ratio · u.
// work: [Σp² per chunk | Σu² per chunk | ratio per tensor].
template <class T>
void lamb_update(const OptimStep& s, T* params, const T* grads, T* m, T* v) {
  if (!finite_step(s)) return;
  const LambCoeffs<T> k(s);
  double* p2 = s.work;
  double* u2 = s.work + s.num_chunks;
  double* ratio = s.work + 2 * s.num_chunks;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < s.num_chunks; ++c) {
    const OptimChunk& ch = s.chunks[c];
    double sp = 0, su = 0;
    for (int64_t i = ch.begin; i < ch.end; ++i) {
      m[i] = k.one_b1 * grads[i] + k.b1 * m[i];
      v[i] = k.one_b2 * grads[i] * grads[i] + k.b2 * v[i];
      const double u = k.update(m[i], v[i], params[i], ch.decayed);
      sp += double(params[i]) * params[i];
      su += u * u;
    }
    p2[c] = sp;
    u2[c] = su;
  }
  double* tp = ratio + s.num_tensors;  // Σp², Σu² per tensor, then the ratio over tp
  for (int64_t t = 0; t < s.num_tensors; ++t) tp[t] = 0, ratio[t] = 0;
  for (int64_t c = 0; c < s.num_chunks; ++c) {
    tp[s.chunks[c].tensor] += p2[c];
    ratio[s.chunks[c].tensor] += u2[c];
  }
  for (int64_t t = 0; t < s.num_tensors; ++t) {
    const float pn = float(std::sqrt(tp[t])), un = float(std::sqrt(ratio[t]));
    ratio[t] = (pn == 0.0f || un == 0.0f) ? 1.0f : pn / un;
  }
  const T lr = T(s.lr);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < s.num_chunks; ++c) {
    const OptimChunk& ch = s.chunks[c];
    const T r = T(float(ratio[ch.tensor]));
    for (int64_t i = ch.begin; i < ch.end; ++i) params[i] += -((k.update(m[i], v[i], params[i], ch.decayed) * r) * lr);
  }
}

#define PCV_INSTANTIATE(T)                                                                      \
  template void clip_by_global_norm<T>(int64_t, T*, const double*, double, double*);            \
  template void sgd_update<T>(const OptimStep&, T*, const T*, T*);                              \
  template void adamw_update<T>(const OptimStep&, T*, const T*, T*, T*);                        \
  template void lamb_update<T>(const OptimStep&, T*, const T*, T*, T*);
PCV_INSTANTIATE(float)
PCV_INSTANTIATE(double)
#undef PCV_INSTANTIATE

}  // namespace perceiver::cpu
