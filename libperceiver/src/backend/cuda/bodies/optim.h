// Optimizer updates per element (op_params.h OptimStep; spec §5): SGD with momentum and AdamW
// with torch semantics, LAMB with DeepMind's, and optax's clip_by_global_norm. The scalar
// coefficients are computed once on the host, in double then rounded to float, exactly as
// backend/cpu/cpu_optim.cpp computes them.
#pragma once

#include "backend/cuda/bodies/hd.h"
#include "perceiver/op_params.h"

namespace perceiver::cuda::body {

/// True when the step runs: Σg² (hence the norm) is finite.
PCV_HD bool finite_step(double grad_sumsq) { return hd_isfinite(grad_sumsq); }

/// optax.clip_by_global_norm: clip when the norm is finite and not below max_norm.
PCV_HD bool clip_needed(double sumsq, double max_norm) {
  const double norm = hd_sqrt(sumsq);
  return hd_isfinite(norm) && !(norm < max_norm);
}
PCV_HD float clip_value(float x, float norm, float max_norm) { return (x / norm) * max_norm; }

struct SgdCoeffs {
  float momentum, lr, weight_decay;
  static SgdCoeffs from(const OptimStep& s) { return {float(s.momentum), float(s.lr), float(s.weight_decay)}; }
};

/// torch.optim.SGD (dampening 0, no Nesterov): g += wd·p; buf = momentum·buf + g; p −= lr·buf.
PCV_HD void sgd_element(const SgdCoeffs& k, bool decayed, float& p, float g, float& buf) {
  const float wd = decayed ? k.weight_decay : 0.f;
  const float gi = wd != 0.f ? g + wd * p : g;
  buf = k.momentum * buf + gi;
  p -= k.lr * buf;
}

struct AdamCoeffs {
  float b1, b2, one_b1, one_b2, decay, step_size, bc2_sqrt, eps;
  static AdamCoeffs from(const OptimStep& s) {
    const double t = double(s.t);
    return {float(s.beta1), float(s.beta2), float(1 - s.beta1), float(1 - s.beta2), float(1 - s.lr * s.weight_decay),
            float(s.lr / (1 - std::pow(s.beta1, t))), float(std::sqrt(1 - std::pow(s.beta2, t))), float(s.eps)};
  }
};

/// torch.optim.AdamW (_single_tensor_adamw, amsgrad off).
PCV_HD void adamw_element(const AdamCoeffs& k, bool decayed, float& p, float g, float& m, float& v) {
  p *= decayed ? k.decay : 1.f;
  m = m * k.b1 + k.one_b1 * g;
  v = v * k.b2 + k.one_b2 * g * g;
  p -= k.step_size * (m / (hd_sqrt(v) / k.bc2_sqrt + k.eps));
}

struct LambCoeffs {
  float b1, b2, one_b1, one_b2, bc1, bc2, eps, wd;
  static LambCoeffs from(const OptimStep& s) {
    const double t = double(s.t);
    return {float(s.beta1), float(s.beta2), float(1 - s.beta1), float(1 - s.beta2), float(1 - std::pow(s.beta1, t)),
            float(1 - std::pow(s.beta2, t)), float(s.eps), float(s.weight_decay)};
  }
};

/// LAMB's Adam moments (optax scale_by_adam, eps_root 0).
PCV_HD void lamb_moments(const LambCoeffs& k, float g, float& m, float& v) {
  m = k.one_b1 * g + k.b1 * m;
  v = k.one_b2 * g * g + k.b2 * v;
}

/// The update before the trust ratio: Adam's direction plus decoupled weight decay.
PCV_HD float lamb_direction(const LambCoeffs& k, float m, float v, float p, bool decayed) {
  const float u = (m / k.bc1) / (hd_sqrt(v / k.bc2) + k.eps);
  return decayed ? u + k.wd * p : u;
}

/// ‖p‖/‖u‖ of one tensor from its sums of squares (1 when either norm is 0), in float as optax.
PCV_HD double lamb_ratio(double sum_p2, double sum_u2) {
  const float pn = float(hd_sqrt(sum_p2)), un = float(hd_sqrt(sum_u2));
  return (pn == 0.f || un == 0.f) ? 1.0 : double(pn / un);
}

PCV_HD float lamb_apply(float p, float u, float ratio, float lr) { return p + -((u * ratio) * lr); }

}  // namespace perceiver::cuda::body
