// Learning-rate schedules: a pure function of the step, so resuming needs nothing but the step.
#pragma once

#include <cstdint>
#include <memory>

#include "framework/config_node.h"

namespace qtrain {

class Schedule {
 public:
  virtual ~Schedule() = default;
  // The learning rate of optimizer step `step` (0-based) for a base rate `base_lr`.
  virtual double lr(int64_t step, double base_lr) const = 0;
};

// Parses `optimizer.schedule` (type: constant | step | cosine, plus warmup). Epoch-valued keys are
// converted with `steps_per_epoch`; `total_steps` is the length of training (for cosine).
std::unique_ptr<Schedule> make_schedule(ConfigNode& section, int64_t steps_per_epoch, int64_t total_steps);

}  // namespace qtrain
