#include "optim/schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "perceiver/error.h"

namespace perceiver {

Schedule::Schedule(ScheduleOptions o) : opts_(std::move(o)) {
  const bool warm = opts_.name == "warmup", cosine = opts_.name == "cosine";
  PCV_CHECK(opts_.name == "constant" || warm || cosine,
            "schedule option 'schedule' must be constant, warmup or cosine, got '", opts_.name, "'");
  PCV_CHECK(std::isfinite(opts_.lr) && opts_.lr >= 0, "schedule option 'lr' must be finite and >= 0, got ", opts_.lr);
  PCV_CHECK(opts_.warmup_steps >= 0, "schedule option 'warmup_steps' must be >= 0, got ", opts_.warmup_steps);
  PCV_CHECK(!warm || opts_.warmup_steps > 0, "schedule option 'warmup_steps' must be > 0 for the warmup schedule");
  PCV_CHECK(opts_.name != "constant" || opts_.warmup_steps == 0,
            "schedule option 'warmup_steps' needs the warmup or cosine schedule, not constant");
  if (cosine) {
    PCV_CHECK(opts_.total_steps > opts_.warmup_steps, "schedule option 'total_steps' (", opts_.total_steps,
              ") must exceed 'warmup_steps' (", opts_.warmup_steps, ") for the cosine schedule");
    PCV_CHECK(std::isfinite(opts_.final_lr) && opts_.final_lr >= 0 && opts_.final_lr <= opts_.lr,
              "schedule option 'final_lr' must be in [0, lr], got ", opts_.final_lr);
  }
}

double Schedule::lr_at(int64_t step) const {
  PCV_CHECK(step >= 0, "learning-rate schedule asked for negative step ", step);
  const int64_t w = opts_.warmup_steps;
  if (opts_.name == "constant") return opts_.lr;
  // optax.linear_schedule(0, lr, w): lr·step/w.
  if (step < w) return opts_.lr * double(step) / double(w);
  if (opts_.name == "warmup") return opts_.lr;
  // optax.cosine_decay_schedule(lr, total − w, alpha = final/lr) from the end of the warm-up.
  const double d = double(opts_.total_steps - w);
  const double t = double(std::min(step - w, opts_.total_steps - w));
  const double c = 0.5 * (1.0 + std::cos(std::numbers::pi * t / d));
  return opts_.final_lr + (opts_.lr - opts_.final_lr) * c;
}

}  // namespace perceiver
