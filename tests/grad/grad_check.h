// Finite-difference gradient checks in double (STYLE.md §7). A case supplies `loss()`, which
// runs the forward pass and returns Σ out·r for a fixed random r (llm.c's fake loss), and a list
// of tensors with their analytic gradients. Each checked element is perturbed by ±h and the
// central difference compared with the analytic value.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "core/rng.h"
#include "perceiver/tensor.h"

namespace perceiver::testing {

struct GradTensor {
  std::string name;
  TensorView<double> value;  // perturbed in place
  TensorView<double> grad;   // analytic gradient computed beforehand
};

struct GradCheckOptions {
  double h = 1e-5;           // central-difference step
  double tolerance = 1e-6;   // on the relative error below
  double floor = 1e-4;       // denominators below this count as this (near-zero gradients)
  int64_t max_elems = 48;    // per tensor; a random sample above this (ggml grad_nmax)
};

/// Relative error |a − n| / max(|a|, |n|, floor), after discounting the rounding noise of the
/// central difference itself (a few ulps of the loss divided by 2h). Without that, gradients that
/// are exactly zero (e.g. a key bias, which softmax cancels) fail on pure noise.
inline double relative_error(double analytic, double numeric, double floor, double noise) {
  const double diff = std::max(0.0, std::abs(analytic - numeric) - noise);
  return diff / std::max({std::abs(analytic), std::abs(numeric), floor});
}

/// Checks every tensor; reports the worst element per tensor. Returns the overall worst error.
inline double check_gradients(const std::function<double()>& loss, const std::vector<GradTensor>& tensors,
                              const GradCheckOptions& opt = {}) {
  double worst_all = 0.0;
  RngStream rng(7, RngPurpose::kTest);
  for (const auto& t : tensors) {
    const int64_t n = t.value.numel();
    std::vector<int64_t> idx = n <= opt.max_elems ? rng.permutation(n) : rng.sample_without_replacement(n, opt.max_elems);
    double worst = 0.0;
    int64_t worst_i = -1;
    double worst_a = 0, worst_n = 0;
    for (int64_t i : idx) {
      const double saved = t.value.data[i];
      t.value.data[i] = saved + opt.h;
      const double plus = loss();
      t.value.data[i] = saved - opt.h;
      const double minus = loss();
      t.value.data[i] = saved;
      const double numeric = (plus - minus) / (2 * opt.h);
      const double noise = 16 * 2.220446049250313e-16 * std::max(std::abs(plus), std::abs(minus)) / (2 * opt.h);
      const double err = relative_error(t.grad.data[i], numeric, opt.floor, noise);
      if (err > worst) worst = err, worst_i = i, worst_a = t.grad.data[i], worst_n = numeric;
    }
    EXPECT_LE(worst, opt.tolerance) << t.name << "[" << worst_i << "]: analytic " << worst_a
                                    << " vs numeric " << worst_n;
    worst_all = std::max(worst_all, worst);
  }
  return worst_all;
}

/// Fills a view with N(0, std) + mean from a test stream.
inline void fill_normal(TensorView<double> v, uint64_t seed, double std = 1.0, double mean = 0.0) {
  RngStream rng(seed, RngPurpose::kTest);
  for (int64_t i = 0; i < v.numel(); ++i) v.data[i] = mean + std * rng.normal();
}

}  // namespace perceiver::testing
