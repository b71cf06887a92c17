#include "optim/optimizer.h"

#include <algorithm>
#include <cmath>

#include "perceiver/backend.h"
#include "perceiver/error.h"

namespace perceiver {
namespace {

// Elements per unit of OpenMP work: large enough to amortise scheduling, small enough that a
// 2-core split of a small model is still balanced.
constexpr int64_t kChunkElems = 1 << 14;
// Below this many elements a parallel region costs more than the loop.
constexpr int64_t kMinParallelElems = 1 << 15;


}  // namespace

std::vector<ArenaChunk> make_chunks(const ParamRegistry& registry, int64_t max_elems) {
  PCV_ASSERT(max_elems > 0);
  std::vector<ArenaChunk> chunks;
  const auto& entries = registry.entries();
  for (size_t t = 0; t < entries.size(); ++t) {
    const int64_t begin = entries[t].offset, end = begin + entries[t].spec.shape.numel();
    const bool decayed = is_decayed(entries[t].spec.role);
    for (int64_t b = begin; b < end; b += max_elems)
      chunks.push_back({b, std::min(end, b + max_elems), int32_t(t), decayed});
  }
  return chunks;
}

double global_norm(const float* x, int64_t n) {
  return std::sqrt(cpu_backend().kernels<float>().sum_squares(n, x));
}

namespace {

// optax.clip_by_global_norm: t -> (t / g_norm) * max_norm, in the tensor's precision.
void scale_to_norm(float* x, int64_t n, double norm, double max_norm) {
  const float nf = float(norm), mf = float(max_norm);
#pragma omp parallel for schedule(static) if (n > kMinParallelElems)
  for (int64_t i = 0; i < n; ++i) x[i] = (x[i] / nf) * mf;
}

}  // namespace

double clip_by_global_norm(float* x, int64_t n, double max_norm, bool* clipped) {
  PCV_CHECK(max_norm > 0 && std::isfinite(max_norm), "max_norm must be positive, got ", max_norm);
  const double norm = global_norm(x, n);
  // optax keeps the gradients only when norm < max_norm; a NaN norm is left for the caller.
  const bool clip = std::isfinite(norm) && !(norm < max_norm);
  if (clip) scale_to_norm(x, n, norm, max_norm);
  if (clipped) *clipped = clip;
  return norm;
}

bool all_finite(const float* x, int64_t n) {
  bool ok = true;
#pragma omp parallel for schedule(static) reduction(&& : ok) if (n > kMinParallelElems)
  for (int64_t i = 0; i < n; ++i) ok = ok && std::isfinite(x[i]);
  return ok;
}

bool NonFiniteGuard::check(double loss, double grad_norm, int64_t step) {
  if (std::isfinite(loss) && std::isfinite(grad_norm)) {
    consecutive_ = 0;
    return true;
  }
  ++total_;
  ++consecutive_;
  PCV_CHECK(consecutive_ < max_consecutive_, "step ", step, ": loss or gradient non-finite in ",
            consecutive_, " consecutive steps (loss=", loss, ", grad_norm=", grad_norm,
            "); stopping. HINT: lower --lr or enable gradient clipping");
  return false;
}

// ---- Optimizer base -------------------------------------------------------------------------

Optimizer::Optimizer(OptimizerOptions opts, const ParamRegistry& registry, std::vector<std::string> states)
    : opts_(std::move(opts)), registry_(registry), chunks_(make_chunks(registry, kChunkElems)),
      state_names_(std::move(states)) {
  for (size_t i = 0; i < state_names_.size(); ++i) states_.emplace_back(registry_.arena_size());
}

void Optimizer::set_step_count(int64_t n) {
  PCV_CHECK(n >= 0, "optimizer step count must be >= 0, got ", n);
  step_count_ = n;
}

std::vector<NamedTensor> Optimizer::state_tensors() {
  std::vector<NamedTensor> out;
  for (size_t s = 0; s < states_.size(); ++s)
    for (const auto& e : registry_.entries())
      out.push_back({state_names_[s] + "/" + e.spec.name, {states_[s].data() + e.offset, e.spec.shape}});
  return out;
}

StepResult Optimizer::step(ParamStore<float>& store, double lr) {
  PCV_CHECK(store.registry().arena_size() == registry_.arena_size() &&
                store.registry().entries().size() == registry_.entries().size(),
            "optimizer was built for another parameter registry");
  PCV_CHECK(std::isfinite(lr) && lr >= 0, "learning rate must be finite and >= 0, got ", lr);
  float* g = store.grads().data();
  const int64_t n = registry_.arena_size();
  StepResult r;
  r.grad_norm = global_norm(g, n);
  if (!std::isfinite(r.grad_norm)) {
    r.skipped = true;
    return r;
  }
  if (opts_.max_grad_norm > 0 && !(r.grad_norm < opts_.max_grad_norm)) {
    scale_to_norm(g, n, r.grad_norm, opts_.max_grad_norm);
    r.clipped = true;
  }
  ++step_count_;
  update(store.params().data(), g, lr);
  return r;
}

// ---- SGD with momentum (torch.optim.SGD, dampening 0, no Nesterov) ---------------------------

namespace {

class Sgd final : public Optimizer {
 public:
  Sgd(const OptimizerOptions& o, const ParamRegistry& r)
      : Optimizer(o, r, {"momentum_buffer"}) {}
  std::string name() const override { return "sgd"; }

 protected:
  // torch: g += wd·p; buf = momentum·buf + g (buf = g on the first step, the same value);
  // p -= lr·buf.
  void update(float* params, const float* grads, double lr) override {
    const float mom = float(opts_.momentum), lrf = float(lr), wd = float(*opts_.weight_decay);
    float* buf = state(0);
    const auto& cs = chunks();
#pragma omp parallel for schedule(static)
    for (size_t c = 0; c < cs.size(); ++c) {
      const float wdc = cs[c].decayed ? wd : 0.0f;
      for (int64_t i = cs[c].begin; i < cs[c].end; ++i) {
        const float gi = wdc != 0.0f ? grads[i] + wdc * params[i] : grads[i];
        buf[i] = mom * buf[i] + gi;
        params[i] -= lrf * buf[i];
      }
    }
  }
};

// ---- AdamW (torch.optim.AdamW, _single_tensor_adamw, amsgrad off) ----------------------------

class AdamW final : public Optimizer {
 public:
  AdamW(const OptimizerOptions& o, const ParamRegistry& r)
      : Optimizer(o, r, {"exp_avg", "exp_avg_sq"}) {}
  std::string name() const override { return "adamw"; }

 protected:
  void update(float* params, const float* grads, double lr) override {
    const double t = double(step_count());
    const float b1 = float(opts_.beta1), b2 = float(opts_.beta2);
    const float one_b1 = float(1 - opts_.beta1), one_b2 = float(1 - opts_.beta2);
    const float decay = float(1 - lr * *opts_.weight_decay);
    // Scalars in double, as torch computes them in Python before the float kernels.
    const float step_size = float(lr / (1 - std::pow(opts_.beta1, t)));
    const float bc2_sqrt = float(std::sqrt(1 - std::pow(opts_.beta2, t)));
    const float eps = float(*opts_.eps);
    float* m = state(0);
    float* v = state(1);
    const auto& cs = chunks();
#pragma omp parallel for schedule(static)
    for (size_t c = 0; c < cs.size(); ++c) {
      const float dc = cs[c].decayed ? decay : 1.0f;
      for (int64_t i = cs[c].begin; i < cs[c].end; ++i) {
        params[i] *= dc;
        m[i] = m[i] * b1 + one_b1 * grads[i];
        v[i] = v[i] * b2 + one_b2 * grads[i] * grads[i];
        params[i] -= step_size * (m[i] / (std::sqrt(v[i]) / bc2_sqrt + eps));
      }
    }
  }
};

// ---- LAMB (DeepMind perceiver train/utils.py, an optax chain; spec §5) ------------------------

class Lamb final : public Optimizer {
 public:
  Lamb(const OptimizerOptions& o, const ParamRegistry& r)
      : Optimizer(o, r, {"exp_avg", "exp_avg_sq"}) {}
  std::string name() const override { return "lamb"; }

 protected:
  void update(float* params, const float* grads, double lr) override {
    const Coeffs k = coeffs();
    std::vector<double> p2(chunks().size()), u2(chunks().size());
    moments_and_norms(params, grads, k, p2.data(), u2.data());
    const std::vector<float> ratio = trust_ratios(p2, u2);
    apply(params, k, ratio, float(lr));
  }

 private:
  struct Coeffs {
    float b1, b2, one_b1, one_b2, bc1, bc2, eps, wd;
  };

  Coeffs coeffs() const {
    const double t = double(step_count());
    return {float(opts_.beta1), float(opts_.beta2), float(1 - opts_.beta1), float(1 - opts_.beta2),
            float(1 - std::pow(opts_.beta1, t)), float(1 - std::pow(opts_.beta2, t)),
            float(*opts_.eps), float(*opts_.weight_decay)};
  }

  // scale_by_adam (eps_root 0) then add_decayed_weights. Pass 2 calls it again on the same
  // inputs, so the update is recomputed bit-for-bit instead of stored in a third arena.
  static float adam_update(const Coeffs& k, float m, float v, float p, bool decayed) {
    const float u = (m / k.bc1) / (std::sqrt(v / k.bc2) + k.eps);
    return decayed ? u + k.wd * p : u;
  }

  // Pass 1: Adam moments, and Σp² and Σu² per chunk (double, in element order).
  void moments_and_norms(const float* params, const float* grads, const Coeffs& k, double* p2, double* u2) {
    float* m = state(0);
    float* v = state(1);
    const auto& cs = chunks();
#pragma omp parallel for schedule(static)
    for (size_t c = 0; c < cs.size(); ++c) {
      double sp = 0, su = 0;
      for (int64_t i = cs[c].begin; i < cs[c].end; ++i) {
        m[i] = k.one_b1 * grads[i] + k.b1 * m[i];
        v[i] = k.one_b2 * grads[i] * grads[i] + k.b2 * v[i];
        const double u = adam_update(k, m[i], v[i], params[i], cs[c].decayed);
        sp += double(params[i]) * params[i];
        su += u * u;
      }
      p2[c] = sp;
      u2[c] = su;
    }
  }

  // scale_by_trust_ratio: ‖p‖/‖u‖ per tensor, 1 when either norm is 0. Chunk partials are
  // summed in chunk order, so the ratio does not depend on the thread count.
  std::vector<float> trust_ratios(const std::vector<double>& p2, const std::vector<double>& u2) const {
    const auto& cs = chunks();
    std::vector<double> tp(registry().entries().size()), tu(tp.size());
    for (size_t c = 0; c < cs.size(); ++c) {
      tp[cs[c].tensor] += p2[c];
      tu[cs[c].tensor] += u2[c];
    }
    std::vector<float> ratio(tp.size());
    for (size_t t = 0; t < tp.size(); ++t) {
      const float pn = float(std::sqrt(tp[t])), un = float(std::sqrt(tu[t]));
      ratio[t] = (pn == 0.0f || un == 0.0f) ? 1.0f : pn / un;
    }
    return ratio;
  }

  // Pass 2: u·ratio, ×lr, negate, add (optax.scale_by_schedule, scale(-1), apply_updates).
  void apply(float* params, const Coeffs& k, const std::vector<float>& ratio, float lr) {
    const float* m = state(0);
    const float* v = state(1);
    const auto& cs = chunks();
#pragma omp parallel for schedule(static)
    for (size_t c = 0; c < cs.size(); ++c) {
      const float r = ratio[cs[c].tensor];
      for (int64_t i = cs[c].begin; i < cs[c].end; ++i)
        params[i] += -((adam_update(k, m[i], v[i], params[i], cs[c].decayed) * r) * lr);
    }
  }
};

void check_unit_interval(double x, const char* option) {
  PCV_CHECK(x >= 0 && x < 1, "optimizer option '", option, "' must be in [0, 1), got ", x);
}

void check_non_negative(double x, const char* option) {
  PCV_CHECK(std::isfinite(x) && x >= 0, "optimizer option '", option, "' must be finite and >= 0, got ", x);
}

OptimizerOptions validated(OptimizerOptions o) {
  PCV_CHECK(o.name == "sgd" || o.name == "adamw" || o.name == "lamb",
            "optimizer option 'optimizer' must be sgd, adamw or lamb, got '", o.name, "'");
  if (!o.eps) o.eps = o.name == "lamb" ? 1e-6 : 1e-8;
  if (!o.weight_decay) o.weight_decay = o.name == "adamw" ? 1e-2 : 0.0;
  if (o.name == "sgd") check_unit_interval(o.momentum, "momentum");
  check_unit_interval(o.beta1, "beta1");
  check_unit_interval(o.beta2, "beta2");
  PCV_CHECK(std::isfinite(*o.eps) && *o.eps > 0, "optimizer option 'eps' must be > 0, got ", *o.eps);
  check_non_negative(*o.weight_decay, "weight_decay");
  check_non_negative(o.max_grad_norm, "max_grad_norm");
  return o;
}

}  // namespace

std::unique_ptr<Optimizer> make_optimizer(const OptimizerOptions& opts, const ParamRegistry& registry) {
  const OptimizerOptions o = validated(opts);
  if (o.name == "sgd") return std::make_unique<Sgd>(o, registry);
  if (o.name == "adamw") return std::make_unique<AdamW>(o, registry);
  return std::make_unique<Lamb>(o, registry);
}

}  // namespace perceiver
