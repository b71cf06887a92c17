// The training step as perceiver-train runs it (one rank, one micro-batch), captured on the
// capture backend as one graph per step, lowered to StableHLO, and written out with a manifest.
// perceiver-export writes the modules a compiled-step device (neuron) will ask for; the XLA
// tests run them with jaxlib against the cpu backend. The op order here is train_one_step()'s:
// zero the gradients, forward + loss + backward, the optimizer's update, then the host reads the
// step's statistics back once. The graph of a step opens at its first op (auto regions): the
// zeroed gradients and the uploaded batch are writes of resident buffers before it, as on the
// neuron device. A change there changes the modules' hashes, and the neuron driver
// then asks for a module nobody compiled, by name (never a silent mismatch).
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/capture/capture_backend.h"
#include "backend/capture/lowering.h"
#include "model/loss.h"
#include "optim/optimizer.h"

namespace perceiver {

struct StepCaptureOptions {
  ModelConfig model;
  int64_t batch = 1;
  LossConfig loss;
  OptimizerOptions optimizer;
  uint64_t seed = 0;
  InitScheme init = InitScheme::kHuggingFace;
};

/// One host batch [B,T,H,W,3], [B,S], [B].
struct HostBatch {
  std::vector<float> video, audio;
  std::vector<int64_t> labels;
};

/// A deterministic synthetic batch for (seed, step): values in [0, 1), labels in [0, L).
HostBatch synthetic_batch(const ModelConfig& cfg, int64_t batch, uint64_t seed, int64_t step);

/// The net, optimizer and step-statistics slot of a training run on a capture backend, built in
/// the trainer's order, and the capture of its steps.
class StepCapture {
 public:
  StepCapture(const StepCaptureOptions& o, capture::CaptureBackend& backend);
  ~StepCapture();
  /// Captures training step `step` on `batch` with learning rate `lr`. `after_backward`, when
  /// given, runs between the backward pass and the optimizer (extra host reads for tests). On a
  /// backend that runs the graph when the host reads the step's statistics (neuron) the step is
  /// executed and the returned graph is empty; `last_stats()` has what the host read.
  capture::Graph capture(int64_t step, const HostBatch& batch, double lr, const std::function<void()>& after_backward = {});
  PerceiverNet<float>& net() { return *net_; }
  Optimizer& optimizer() { return *optimizer_; }
  Arena<double>& step_stats() { return stats_; }
  /// The step statistics the host read at the end of the last step: loss terms, Σg², clipped.
  const std::vector<double>& last_stats() const { return last_stats_; }

 private:
  StepCaptureOptions o_;
  capture::CaptureBackend& backend_;
  std::unique_ptr<PerceiverNet<float>> net_;
  std::unique_ptr<Optimizer> optimizer_;
  Arena<double> stats_;
  std::vector<double> last_stats_;
};

/// Writes `<stem>.mlir` (the module) and `<stem>.json` (arguments and results: kind, element
/// type, elements, buffer name, aliasing; the hash). With `with_data`, also the bytes of every
/// input (`<stem>.<arg>.bin`) and of every state or resident argument at the start of the region
/// (`<stem>.entry.<arg>.bin`), so that the module can be run stand-alone.
void write_module(const std::filesystem::path& dir, const std::string& stem, const capture::Module& m,
                  const capture::Graph& g, const capture::CaptureBackend& backend, bool with_data);

}  // namespace perceiver
