// Optimizers on the flat parameter arena (DESIGN.md #1): SGD with momentum and AdamW with
// PyTorch's semantics, LAMB with DeepMind's (perceiver-spec.md §5). Each optimizer state (momentum
// buffer, Adam moments) is one arena with the parameter arena's layout, so a checkpoint saves it
// by parameter name. Updates are elementwise over fixed chunks of the arena (OpenMP), and every
// reduction has a fixed order, so results are bitwise identical at any thread count.
//
// Weight decay skips the roles is_decayed() rejects (biases, layer-norm gains and biases) in all
// three optimizers: DeepMind's LAMB mask, and the usual two PyTorch param groups for SGD/AdamW.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/params.h"
#include "perceiver/tensor.h"

namespace perceiver {

/// Hyper-parameters of every optimizer; make_optimizer() validates them and fills the defaults
/// that depend on the optimizer (eps, weight_decay).
struct OptimizerOptions {
  std::string name = "sgd";             // "sgd" | "adamw" | "lamb"
  double momentum = 0.9;                // sgd (the seed's default)
  double beta1 = 0.9, beta2 = 0.999;    // adamw, lamb
  std::optional<double> eps;            // default: adamw 1e-8 (torch), lamb 1e-6 (DeepMind)
  std::optional<double> weight_decay;   // default: sgd 0, adamw 0.01 (torch), lamb 0
  double max_grad_norm = 0.0;           // clip by global norm before the update; 0 = off
};

/// A named view of one optimizer state tensor, e.g. "exp_avg/<HF parameter name>".
struct NamedTensor {
  std::string name;
  TensorView<float> view;
};

/// What one step did. A non-finite gradient norm skips the update and leaves all state as it was.
struct StepResult {
  double grad_norm = 0.0;  // global L2 norm of the gradients before clipping
  bool clipped = false;
  bool skipped = false;    // gradients were not finite; nothing changed
};

/// Contiguous run of one tensor's elements: the unit of OpenMP work. Chunk boundaries depend
/// only on the registry, never on the thread count.
struct ArenaChunk {
  int64_t begin = 0, end = 0;  // element range in the arena
  int32_t tensor = 0;          // index into registry.entries()
  bool decayed = true;         // is_decayed(role)
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  /// One update of store.params() from store.grads() with learning rate `lr` (the schedule's
  /// value for this step). Clips the gradients in place when max_grad_norm > 0.
  StepResult step(ParamStore<float>& store, double lr);

  virtual std::string name() const = 0;
  const OptimizerOptions& options() const { return opts_; }
  /// Updates applied so far (skipped steps do not count); Adam's bias correction uses it.
  int64_t step_count() const { return step_count_; }
  /// For resuming from a checkpoint, together with state_tensors().
  void set_step_count(int64_t n);
  /// Every state tensor by name ("<state>/<parameter name>"), in registry order; views are
  /// writable so a checkpoint loader can restore them.
  std::vector<NamedTensor> state_tensors();

 protected:
  Optimizer(OptimizerOptions opts, const ParamRegistry& registry, std::vector<std::string> states);
  /// Applies the update with the gradients already clipped; step_count() is already advanced.
  virtual void update(float* params, const float* grads, double lr) = 0;
  float* state(size_t i) { return states_[i].data(); }
  const ParamRegistry& registry() const { return registry_; }
  const std::vector<ArenaChunk>& chunks() const { return chunks_; }

  OptimizerOptions opts_;

 private:
  ParamRegistry registry_;
  std::vector<ArenaChunk> chunks_;
  std::vector<std::string> state_names_;
  std::vector<Arena<float>> states_;
  int64_t step_count_ = 0;
};

/// Builds "sgd", "adamw" or "lamb". Throws perceiver::Error naming the option at fault.
std::unique_ptr<Optimizer> make_optimizer(const OptimizerOptions& opts, const ParamRegistry& registry);

/// Splits the registry's tensors into chunks of at most `max_elems` elements.
std::vector<ArenaChunk> make_chunks(const ParamRegistry& registry, int64_t max_elems);

/// Global L2 norm of `n` values: fixed-order blocked sum in double (the CPU sum_squares kernel),
/// so it is identical at any thread count. Infinite or NaN if any value is.
double global_norm(const float* x, int64_t n);

/// DeepMind's optax.clip_by_global_norm: when norm >= max_norm, scales x by max_norm / norm.
/// Returns the norm before clipping. (torch.nn.utils.clip_grad_norm_ adds 1e-6 to the norm.)
double clip_by_global_norm(float* x, int64_t n, double max_norm, bool* clipped = nullptr);

/// True if every value is finite.
bool all_finite(const float* x, int64_t n);

/// Counts steps skipped for a non-finite loss or gradient (issue 5 item 2): check() returns
/// whether the step may proceed; too many skips in a row throw, naming the count.
class NonFiniteGuard {
 public:
  explicit NonFiniteGuard(int64_t max_consecutive = 10) : max_consecutive_(max_consecutive) {}
  /// False (and counted) if loss or grad_norm is NaN or infinite.
  bool check(double loss, double grad_norm, int64_t step);
  int64_t total_skipped() const { return total_; }
  int64_t consecutive_skipped() const { return consecutive_; }

 private:
  int64_t max_consecutive_;
  int64_t total_ = 0, consecutive_ = 0;
};

}  // namespace perceiver
