// Learning-rate schedules: a pure function of the step, so resuming needs nothing but the step.
// lr(step) = base_lr * warmup(step) * decay(step): a linear warm-up from warmup_start_factor to 1 over
// the first warmup_steps steps, then constant, step decay (gamma at each milestone, counted in steps
// from the start of training) or cosine decay to min_factor over the steps after the warm-up.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "framework/core/config_node.h"

namespace qtrain {

class Schedule {
 public:
  virtual ~Schedule() = default;
  // The learning rate of optimizer step `step` (0-based) for a base rate `base_lr`.
  virtual double lr(int64_t step, double base_lr) const = 0;
};

// A schedule with every epoch value already converted to steps.
struct ScheduleSpec {
  enum class Kind { constant, step, cosine };
  Kind kind = Kind::constant;
  int64_t warmup_steps = 0;
  double warmup_start_factor = 0.0;  // lr at step 0 is warmup_start_factor * base_lr
  double gamma = 0.1;                // step: factor applied at each milestone
  int64_t step_every = 0;            // step: decay every this many steps (when milestones is empty)
  std::vector<int64_t> milestones;   // step: increasing step numbers; from step milestones[i] on, gamma^(i+1)
  double min_factor = 0.0;           // cosine: the final lr is min_factor * base_lr
  int64_t total_steps = 0;           // cosine: the step at which the decay reaches min_factor
};

std::unique_ptr<Schedule> make_schedule(const ScheduleSpec& spec);

// Parses `optimizer.schedule` (pass the `optimizer` section or its `schedule` child; an absent
// schedule is constant):
//   {type: constant | step | cosine, warmup_epochs (float) or warmup_steps (int), warmup_start_factor,
//    step: gamma + step_epochs (every k epochs) or milestones (list of epochs), cosine: min_factor}
// Epoch values are converted with `steps_per_epoch`; `total_steps` is the length of training. A warm-up
// longer than the training allows (all of it; with cosine, half of it) is shortened to fit, and `note`
// (when given) receives a sentence for the log that says so; otherwise `note` is left as it is.
std::unique_ptr<Schedule> make_schedule(ConfigNode& section, int64_t steps_per_epoch, int64_t total_steps,
                                        std::string* note = nullptr);

}  // namespace qtrain
