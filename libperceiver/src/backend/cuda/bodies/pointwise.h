// Per-element bodies: GELU (both forms, spec §2.1 and §9), layer norm given its row statistics,
// softmax gradients, the losses' terms and gradients. Formulas as in backend/cpu.
#pragma once

#include "backend/cuda/bodies/hd.h"

namespace perceiver::cuda::body {

inline constexpr float kSqrt2OverPi = 0.7978845608028654f;   // √(2/π)
inline constexpr float kInvSqrt2 = 0.7071067811865476f;      // 1/√2
inline constexpr float kInvSqrt2Pi = 0.3989422804014327f;    // 1/√(2π)
inline constexpr float kGeluCubic = 0.044715f;

/// erf = true: HF's exact GELU; false: the tanh form (DeepMind's gelu_new).
PCV_HD float gelu(bool erf_form, float x) {
  if (erf_form) return 0.5f * x * (1.f + hd_erf(x * kInvSqrt2));
  return 0.5f * x * (1.f + hd_tanh(kSqrt2OverPi * (x + kGeluCubic * x * x * x)));
}

PCV_HD float gelu_derivative(bool erf_form, float x) {
  if (erf_form) return 0.5f * (1.f + hd_erf(x * kInvSqrt2)) + x * hd_exp(-0.5f * x * x) * kInvSqrt2Pi;
  const float t = hd_tanh(kSqrt2OverPi * (x + kGeluCubic * x * x * x));
  return 0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * kSqrt2OverPi * (1.f + 3.f * kGeluCubic * x * x);
}

/// y = x̂·γ + β with x̂ = (x − μ)·rstd computed in double (μ, rstd of the row).
PCV_HD float layer_norm_y(float x, double mu, double rs, float gamma, float beta) {
  return float((double(x) - mu) * rs) * gamma + beta;
}

/// The row sums of the backward: g = dy·γ and g·x̂ (spec §9), in double.
PCV_HD double layer_norm_g(float dy, float gamma) { return double(dy) * double(gamma); }
PCV_HD double layer_norm_xhat(float x, double mu, double rs) { return (double(x) - mu) * rs; }

/// dx = rstd·(g − mean(g) − x̂·mean(g·x̂)).
PCV_HD float layer_norm_dx(float x, float dy, float gamma, double mu, double rs, double mean_g, double mean_gx) {
  return float(rs * (layer_norm_g(dy, gamma) - mean_g - layer_norm_xhat(x, mu, rs) * mean_gx));
}

/// dγ's term: dy·x̂ with the row's saved (float) statistics, in double.
PCV_HD double layer_norm_dgamma_term(float x, float dy, float mean, float rstd) {
  return double(dy) * ((double(x) - double(mean)) * double(rstd));
}

/// Softmax backward, one element: y·(dy − Σ dy·y).
PCV_HD float softmax_dx(float y, float dy, float dot) { return y * (dy - dot); }

/// Attention: dS = P·(dP − Σ dP·P)·scale, dP already multiplied by the dropout factor.
PCV_HD float attention_ds(float p, float dp, float dot, float scale) { return p * (dp - dot) * scale; }

/// |pred − target| and its gradient weight·sign/n (sign(0) = 0, as torch).
PCV_HD double l1_term(float p, float t) {
  const double d = double(p) - double(t);
  return d < 0 ? -d : d;
}
PCV_HD float l1_grad(float p, float t, float g) {
  const float d = p - t;
  return d > 0.f ? g : (d < 0.f ? -g : 0.f);
}
PCV_HD double mse_term(float p, float t) {
  const double d = double(p) - double(t);
  return d * d;
}
PCV_HD float mse_grad(float p, float t, float g) { return g * (p - t); }

/// Cross-entropy gradient: weight/rows · (softmax − onehot), from the row's log-sum-exp.
PCV_HD float softmax_ce_grad(float x, double lse, bool is_label, double g) {
  return float(g * (hd_exp(double(x) - lse) - (is_label ? 1.0 : 0.0)));
}

}  // namespace perceiver::cuda::body
