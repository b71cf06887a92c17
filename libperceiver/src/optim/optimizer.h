// Optimizers on the flat parameter arena (DESIGN.md #1): SGD with momentum and AdamW with
// PyTorch's semantics, LAMB with DeepMind's (perceiver-spec.md §5). Each optimizer state (momentum
// buffer, Adam moments) is one arena with the parameter arena's layout, on the parameters'
// backend, so a checkpoint saves it by parameter name. The updates, the global norm and the
// clipping are backend ops (op_params.h OptimStep) over chunks fixed by the registry; the host
// reads the step's statistics once, after the update was enqueued.
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

/// Device doubles one step's statistics occupy: Σ grad² (before clipping) and the clip flag.
inline constexpr int kOptimStatCount = 2;

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  /// Enqueues one update of store.params() from store.grads() with learning rate `lr` (the
  /// schedule's value for this step) on the store's backend: Σ grad² into stats[0], clipping
  /// by global norm when max_grad_norm > 0 (stats[1] = 1 if clipped), then the update, which
  /// the device skips when the gradient is not finite. `stats`: kOptimStatCount device doubles,
  /// left on the device; finish_step() reads their host copy.
  void enqueue_step(ParamStore<float>& store, double lr, double* stats);
  /// What the enqueued step did, from the host copy of its stats; counts it unless it was skipped.
  StepResult finish_step(const double* host_stats);
  /// enqueue_step and finish_step at once.
  StepResult step(ParamStore<float>& store, double lr);

  virtual std::string name() const = 0;
  const OptimizerOptions& options() const { return opts_; }
  /// Updates applied so far (skipped steps do not count); Adam's bias correction uses it.
  int64_t step_count() const { return step_count_; }
  /// For resuming from a checkpoint, together with state_tensors().
  void set_step_count(int64_t n);
  /// Every state tensor by name ("<state>/<parameter name>"), in registry order: views of the
  /// backend's memory, writable so a checkpoint loader can restore them.
  std::vector<NamedTensor> state_tensors();
  /// Copies the state arenas and the step count into `other` (same optimizer and registry,
  /// any backend): host mirrors for checkpoints of device runs.
  void copy_state_to(Optimizer& other) const;

 protected:
  Optimizer(OptimizerOptions opts, const ParamRegistry& registry, Backend& backend, std::vector<std::string> states,
            size_t work_doubles = 0);
  /// Enqueues the update itself (the gradients are clipped already).
  virtual void update(const Kernels<float>& k, const OptimStep& s, float* params, const float* grads) = 0;
  float* state(size_t i) { return states_[i].data(); }
  double* work() { return work_.data(); }

  OptimizerOptions opts_;

 private:
  ParamRegistry registry_;
  Backend* backend_;
  std::vector<OptimChunk> chunks_;      // host copy (counts)
  Arena<OptimChunk> device_chunks_;
  std::vector<std::string> state_names_;
  std::vector<Arena<float>> states_;
  Arena<double> work_;                  // per-update scratch of the device (LAMB's partial sums)
  Arena<double> stats_;                 // step()'s own stats
  int64_t step_count_ = 0;
  bool pending_ = false;                // enqueue_step() waits for finish_step()
};

/// Builds "sgd", "adamw" or "lamb" with its state on `backend` (that of the parameters).
/// Throws perceiver::Error naming the option at fault.
std::unique_ptr<Optimizer> make_optimizer(const OptimizerOptions& opts, const ParamRegistry& registry,
                                          Backend& backend);

/// Splits the registry's tensors into chunks of at most `max_elems` elements.
std::vector<OptimChunk> make_chunks(const ParamRegistry& registry, int64_t max_elems);

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
