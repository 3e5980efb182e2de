// Learning-rate schedules: the spec (every epoch value converted to steps), its validation, and the
// one Schedule class that evaluates warm-up times decay as a pure function of the step.
#include "optim/schedule.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

namespace qtrain {
namespace {

class SpecSchedule final : public Schedule {
 public:
  explicit SpecSchedule(ScheduleSpec spec) : spec_(std::move(spec)) {}

  double lr(int64_t step, double base_lr) const override {
    QT_CHECK(step >= 0, "schedule: negative step {}", step);
    return base_lr * warmup_factor(step) * decay_factor(step);
  }

 private:
  double warmup_factor(int64_t step) const {
    if (step >= spec_.warmup_steps) return 1.0;
    // PyTorch's LinearLR(start_factor, end_factor=1, total_iters=warmup_steps).
    const double s = spec_.warmup_start_factor;
    return s + (1.0 - s) * static_cast<double>(step) / static_cast<double>(spec_.warmup_steps);
  }

  double decay_factor(int64_t step) const {
    switch (spec_.kind) {
      case ScheduleSpec::Kind::constant: return 1.0;
      case ScheduleSpec::Kind::step: {
        int64_t decays = 0;
        if (!spec_.milestones.empty())
          decays = std::upper_bound(spec_.milestones.begin(), spec_.milestones.end(), step) - spec_.milestones.begin();
        else if (spec_.step_every > 0)
          decays = step / spec_.step_every;
        return std::pow(spec_.gamma, static_cast<double>(decays));
      }
      case ScheduleSpec::Kind::cosine: {
        // The decay starts where the warm-up ends and reaches min_factor at total_steps.
        const double span = static_cast<double>(spec_.total_steps - spec_.warmup_steps);
        const double t = std::clamp(static_cast<double>(step - spec_.warmup_steps) / span, 0.0, 1.0);
        const double m = spec_.min_factor;
        return m + (1.0 - m) * 0.5 * (1.0 + std::cos(std::numbers::pi * t));
      }
    }
    return 1.0;
  }

  ScheduleSpec spec_;
};

bool is_schedule_node(const ConfigNode& node) {
  const std::string& p = node.path();
  const std::string suffix = "schedule";
  return p == suffix ||
         (p.size() > suffix.size() && p.compare(p.size() - suffix.size() - 1, std::string::npos, "." + suffix) == 0);
}

}  // namespace

std::unique_ptr<Schedule> make_schedule(const ScheduleSpec& spec) {
  QT_CHECK(spec.warmup_steps >= 0, "schedule: warmup_steps must be >= 0, got {}", spec.warmup_steps);
  QT_CHECK(spec.warmup_start_factor >= 0 && spec.warmup_start_factor <= 1,
           "schedule: warmup_start_factor must be in [0, 1], got {}", spec.warmup_start_factor);
  if (spec.kind == ScheduleSpec::Kind::step) {
    QT_CHECK(spec.gamma > 0, "schedule: gamma must be > 0, got {}", spec.gamma);
    QT_CHECK(std::is_sorted(spec.milestones.begin(), spec.milestones.end()), "schedule: milestones must increase");
  }
  if (spec.kind == ScheduleSpec::Kind::cosine)
    QT_CHECK(spec.total_steps > spec.warmup_steps, "schedule: cosine needs total_steps ({}) > warmup_steps ({})",
             spec.total_steps, spec.warmup_steps);
  return std::make_unique<SpecSchedule>(spec);
}

std::unique_ptr<Schedule> make_schedule(ConfigNode& section, int64_t steps_per_epoch, int64_t total_steps,
                                        std::string* note) {
  QT_CHECK(steps_per_epoch >= 1, "make_schedule: steps_per_epoch must be >= 1, got {}", steps_per_epoch);
  QT_CHECK(total_steps >= 0, "make_schedule: total_steps must be >= 0, got {}", total_steps);
  ConfigNode node = is_schedule_node(section) ? section : section.child("schedule");
  constexpr int64_t kMaxInt = std::numeric_limits<int32_t>::max();
  ScheduleSpec spec;
  spec.total_steps = total_steps;
  const std::string type = node.get_choice("type", "constant", {"constant", "step", "cosine"});
  spec.kind = type == "step"     ? ScheduleSpec::Kind::step
              : type == "cosine" ? ScheduleSpec::Kind::cosine
                                 : ScheduleSpec::Kind::constant;

  if (node.has("warmup_epochs") && node.has("warmup_steps"))
    node.fail("warmup_steps", "and warmup_epochs are alternatives; set only one");
  if (node.has("warmup_epochs")) {
    const double epochs = node.get_double("warmup_epochs", 0.0, 0.0, 1e6);
    spec.warmup_steps = std::llround(epochs * static_cast<double>(steps_per_epoch));
  } else {
    spec.warmup_steps = node.get_int("warmup_steps", 0, 0, kMaxInt);
  }
  node.accept("warmup_epochs");
  spec.warmup_start_factor = node.get_double("warmup_start_factor", 0.0, 0.0, 1.0);

  if (spec.kind == ScheduleSpec::Kind::step) {
    spec.gamma = node.get_double("gamma", 0.1, 0.0, 1.0, /*min_exclusive=*/true);
    const bool every = node.has("step_epochs"), list = node.has("milestones");
    if (every == list)
      node.fail("type",
                "is step, which needs exactly one of step_epochs (decay every k epochs) or milestones (a "
                "list of epochs)");
    if (every) {
      spec.step_every = node.get_int("step_epochs", 1, 1, kMaxInt) * steps_per_epoch;
    } else {
      const std::vector<int64_t> epochs = node.get_int_list("milestones", {}, 1, kMaxInt);
      if (epochs.empty()) node.fail("milestones", "must list at least one epoch");
      for (size_t i = 1; i < epochs.size(); ++i)
        if (epochs[i] <= epochs[i - 1])
          node.fail("milestones", fmt::format("must be increasing, got {} after {}", epochs[i], epochs[i - 1]));
      for (int64_t e : epochs) spec.milestones.push_back(e * steps_per_epoch);
    }
  } else if (spec.kind == ScheduleSpec::Kind::cosine) {
    spec.min_factor = node.get_double("min_factor", 0.0, 0.0, 1.0);
    QT_CHECK(total_steps > 0, "make_schedule: a cosine schedule needs total_steps");
  }
  // A shortened run (train.epochs=1 of a config that warms up over a few epochs) must still train: the
  // warm-up is cut to what the run has room for, and the caller logs why. Cosine keeps half the run
  // for its decay; the other schedules may warm up over the whole run.
  const int64_t room = spec.kind == ScheduleSpec::Kind::cosine ? total_steps / 2 : total_steps;
  const bool too_long = spec.kind == ScheduleSpec::Kind::cosine ? spec.warmup_steps >= total_steps
                                                                : total_steps > 0 && spec.warmup_steps > total_steps;
  if (too_long) {
    if (note)
      *note = fmt::format(
          "{}.{} is {} steps, {} this run's {} steps: the warm-up is shortened to the first {} step{}{}", node.path(),
          node.has("warmup_epochs") ? "warmup_epochs" : "warmup_steps", spec.warmup_steps,
          spec.warmup_steps == total_steps ? "as long as" : "longer than", total_steps, room, room == 1 ? "" : "s",
          spec.kind == ScheduleSpec::Kind::cosine ? ", the cosine decay takes the rest" : "");
    spec.warmup_steps = room;
  }
  node.finish();
  return make_schedule(spec);
}

}  // namespace qtrain
