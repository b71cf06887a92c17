// What every layer call receives: the backend, its ops bound to its handle, scratch memory and
// the train/eval mode.
#pragma once

#include <cstdint>

#include "core/rng.h"
#include "core/scratch.h"
#include "perceiver/backend.h"

namespace perceiver {

/// Train mode of one pass. Attention dropout (the only train-mode behaviour; spec §11.2) is
/// keyed by (seed, step) and indexed by the global example first_example + b, so a resumed run,
/// micro-batches and data-parallel ranks reproduce one large batch's masks (DESIGN.md #7).
/// Default: eval (no dropout). The mode must not change between a forward and its backward.
struct TrainingMode {
  bool training = false;
  uint64_t seed = 0;
  int64_t step = 0;
  int64_t first_example = 0;

  /// The Philox key of the pass's dropout masks: one Philox block of (step, kDropout) under seed.
  uint64_t dropout_key() const {
    const auto w = philox4x32_10({uint32_t(step), uint32_t(uint64_t(step) >> 32), uint32_t(RngPurpose::kDropout), 0u},
                                 {uint32_t(seed), uint32_t(seed >> 32)});
    return (uint64_t(w[1]) << 32) | w[0];
  }
};

template <class T>
struct Context {
  explicit Context(Backend& b) : backend(b), k(b.kernels<T>()), scratch(b) {}
  Backend& backend;  // owns every tensor the layers see
  Kernels<T> k;      // ops bound to the backend's handle; layers call nothing else for compute
  Scratch<T> scratch;  // backward temporaries, in the backend's memory
  TrainingMode mode;   // eval unless a training pass sets it (run_step, Model::train_step)
};

}  // namespace perceiver
