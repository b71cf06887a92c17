#include "optim/optimizer.h"

#include <algorithm>
#include <cmath>

#include "perceiver/error.h"

namespace perceiver {
namespace {

// Elements per unit of work: large enough to amortise scheduling, small enough that a 2-core
// split of a small model is still balanced.
constexpr int64_t kChunkElems = 1 << 14;

}  // namespace

std::vector<OptimChunk> make_chunks(const ParamRegistry& registry, int64_t max_elems) {
  PCV_ASSERT(max_elems > 0);
  std::vector<OptimChunk> chunks;
  const auto& entries = registry.entries();
  for (size_t t = 0; t < entries.size(); ++t) {
    const int64_t begin = entries[t].offset, end = begin + entries[t].spec.shape.numel();
    const int32_t decayed = is_decayed(entries[t].spec.role) ? 1 : 0;
    for (int64_t b = begin; b < end; b += max_elems) chunks.push_back({b, std::min(end, b + max_elems), int32_t(t), decayed});
  }
  return chunks;
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

Optimizer::Optimizer(OptimizerOptions opts, const ParamRegistry& registry, Backend& backend,
                     std::vector<std::string> states, size_t work_doubles)
    : opts_(std::move(opts)),
      registry_(registry),
      backend_(&backend),
      chunks_(make_chunks(registry, kChunkElems)),
      device_chunks_(backend, chunks_.size()),
      state_names_(std::move(states)),
      work_(backend, work_doubles),
      stats_(backend, size_t(kOptimStatCount)) {
  device_chunks_.upload(chunks_.data(), chunks_.size());
  for (size_t i = 0; i < state_names_.size(); ++i) {
    states_.emplace_back(backend, size_t(registry_.arena_size()));
    states_.back().name(state_names_[i]);
  }
  stats_.name("optimizer_stats");
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

void Optimizer::copy_state_to(Optimizer& other) const {
  PCV_CHECK(other.name() == name() && other.registry_.arena_size() == registry_.arena_size() &&
                other.states_.size() == states_.size(),
            "optimizer state of '", name(), "' copied into '", other.name(), "' of another shape");
  for (size_t s = 0; s < states_.size(); ++s) copy_arena(states_[s], other.states_[s]);
  other.step_count_ = step_count_;
}

void Optimizer::enqueue_step(ParamStore<float>& store, double lr, double* stats) {
  PCV_CHECK(store.registry().arena_size() == registry_.arena_size() &&
                store.registry().entries().size() == registry_.entries().size(),
            "optimizer was built for another parameter registry");
  PCV_CHECK(&store.backend() == backend_, "optimizer state lives on '", backend_->name(),
            "' but the parameters on '", store.backend().name(), "'");
  PCV_CHECK(std::isfinite(lr) && lr >= 0, "learning rate must be finite and >= 0, got ", lr);
  PCV_CHECK(!pending_, "enqueue_step() twice without finish_step()");
  const Kernels<float> k = backend_->kernels<float>();
  float* g = store.grads().data();
  const int64_t n = registry_.arena_size();
  k.sum_squares(n, g, stats);
  if (opts_.max_grad_norm > 0) k.clip_by_global_norm(n, g, stats, opts_.max_grad_norm, stats + 1);
  else backend_->zero(stats + 1, sizeof(double));
  OptimStep s;
  s.lr = lr;
  s.momentum = opts_.momentum;
  s.beta1 = opts_.beta1;
  s.beta2 = opts_.beta2;
  s.eps = *opts_.eps;
  s.weight_decay = *opts_.weight_decay;
  s.t = step_count_ + 1;
  s.chunks = device_chunks_.data();
  s.num_chunks = int64_t(chunks_.size());
  s.num_tensors = int64_t(registry_.entries().size());
  s.grad_sumsq = stats;
  s.work = work_.data();
  update(k, s, store.params().data(), g);
  pending_ = true;
}

StepResult Optimizer::finish_step(const double* host_stats) {
  PCV_CHECK(pending_, "finish_step() without enqueue_step()");
  pending_ = false;
  StepResult r;
  r.grad_norm = std::sqrt(host_stats[0]);
  r.clipped = host_stats[1] != 0;
  r.skipped = !std::isfinite(r.grad_norm);
  if (!r.skipped) ++step_count_;
  return r;
}

StepResult Optimizer::step(ParamStore<float>& store, double lr) {
  enqueue_step(store, lr, stats_.data());
  double host[kOptimStatCount];
  stats_.download(host, kOptimStatCount);
  return finish_step(host);
}

// ---- the three optimizers: their states and their update op ----------------------------------

namespace {

class Sgd final : public Optimizer {
 public:
  Sgd(const OptimizerOptions& o, const ParamRegistry& r, Backend& b) : Optimizer(o, r, b, {"momentum_buffer"}) {}
  std::string name() const override { return "sgd"; }

 protected:
  void update(const Kernels<float>& k, const OptimStep& s, float* params, const float* grads) override {
    k.sgd_update(s, params, grads, state(0));
  }
};

class AdamW final : public Optimizer {
 public:
  AdamW(const OptimizerOptions& o, const ParamRegistry& r, Backend& b)
      : Optimizer(o, r, b, {"exp_avg", "exp_avg_sq"}) {}
  std::string name() const override { return "adamw"; }

 protected:
  void update(const Kernels<float>& k, const OptimStep& s, float* params, const float* grads) override {
    k.adamw_update(s, params, grads, state(0), state(1));
  }
};

class Lamb final : public Optimizer {
 public:
  Lamb(const OptimizerOptions& o, const ParamRegistry& r, Backend& b)
      : Optimizer(o, r, b, {"exp_avg", "exp_avg_sq"}, lamb_work(r)) {}
  std::string name() const override { return "lamb"; }

 protected:
  void update(const Kernels<float>& k, const OptimStep& s, float* params, const float* grads) override {
    k.lamb_update(s, params, grads, state(0), state(1));
  }

 private:
  // OptimStep::work: two partial sums per chunk and two per tensor.
  static size_t lamb_work(const ParamRegistry& r) {
    return 2 * make_chunks(r, kChunkElems).size() + 2 * r.entries().size();
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

std::unique_ptr<Optimizer> make_optimizer(const OptimizerOptions& opts, const ParamRegistry& registry,
                                          Backend& backend) {
  const OptimizerOptions o = validated(opts);
  if (o.name == "sgd") return std::make_unique<Sgd>(o, registry, backend);
  if (o.name == "adamw") return std::make_unique<AdamW>(o, registry, backend);
  return std::make_unique<Lamb>(o, registry, backend);
}

}  // namespace perceiver
