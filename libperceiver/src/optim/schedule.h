// Learning-rate schedules, evaluated from the step alone (so a resumed run gets the same values).
// `step` counts the updates already applied: the first update uses lr_at(0). The warm-up and
// cosine shapes are optax's (linear_schedule, warmup_cosine_decay_schedule), which DeepMind's
// Perceiver training used (perceiver-spec.md §5).
#pragma once

#include <cstdint>
#include <string>

namespace perceiver {

struct ScheduleOptions {
  std::string name = "constant";  // "constant" | "warmup" | "cosine"
  double lr = 1e-5;               // peak (and constant) learning rate; the seed's default
  int64_t warmup_steps = 0;       // warmup, cosine: lr rises linearly from 0 over these steps
  int64_t total_steps = 0;        // cosine: the step where lr reaches final_lr (warm-up included)
  double final_lr = 0.0;          // cosine: value from total_steps on
};

class Schedule {
 public:
  /// Throws perceiver::Error naming the option at fault.
  explicit Schedule(ScheduleOptions opts);
  double lr_at(int64_t step) const;
  const ScheduleOptions& options() const { return opts_; }

 private:
  ScheduleOptions opts_;
};

}  // namespace perceiver
