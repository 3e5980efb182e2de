// Learning-rate schedules at chosen steps (warm-up, step decay, cosine end points), their config
// parsing (epochs converted with steps_per_epoch) and their config errors.
#include <catch2/catch.hpp>

#include <cmath>

#include "optim/schedule.h"
#include "tests/support/config_text.h"

using namespace qtrain;
using qtrain::testing::config_from_text;

namespace {

// The schedule of `optimizer: {..., schedule: <yaml>}` with the given epoch length and total steps.
// `note` receives make_schedule's note on a shortened warm-up.
std::unique_ptr<Schedule> schedule_from(const std::string& schedule_yaml, int64_t steps_per_epoch = 10,
                                        int64_t total_steps = 1000, std::string* note = nullptr) {
  ConfigNode root = config_from_text("optimizer: {type: sgd, lr: 0.1, schedule: " + schedule_yaml + "}\n");
  ConfigNode section = root.child("optimizer");
  return make_schedule(section, steps_per_epoch, total_steps, note);
}

}  // namespace

TEST_CASE("an absent schedule is constant", "[optim][schedule]") {
  ConfigNode root = config_from_text("optimizer: {type: sgd, lr: 0.1}\n");
  ConfigNode section = root.child("optimizer");
  auto s = make_schedule(section, 10, 100);
  REQUIRE(s->lr(0, 0.1) == 0.1);
  REQUIRE(s->lr(99, 0.1) == 0.1);
  REQUIRE(s->lr(1000, 0.1) == 0.1);
}

TEST_CASE("the schedule child itself may be passed", "[optim][schedule]") {
  ConfigNode root =
      config_from_text("optimizer: {type: sgd, lr: 0.1, schedule: {type: step, gamma: 0.5, step_epochs: 1}}\n");
  ConfigNode schedule = root.child("optimizer").child("schedule");
  auto s = make_schedule(schedule, 10, 100);
  REQUIRE(s->lr(10, 1.0) == 0.5);
}

TEST_CASE("linear warm-up", "[optim][schedule]") {
  // warmup_steps 4 from 0: factors 0, 0.25, 0.5, 0.75, then 1.
  auto s = schedule_from("{warmup_steps: 4}");
  REQUIRE(s->lr(0, 0.2) == 0.0);
  REQUIRE(s->lr(1, 0.2) == Approx(0.05));
  REQUIRE(s->lr(2, 0.2) == Approx(0.1));
  REQUIRE(s->lr(3, 0.2) == Approx(0.15));
  REQUIRE(s->lr(4, 0.2) == 0.2);
  REQUIRE(s->lr(500, 0.2) == 0.2);
  // warmup_epochs 0.5 at 10 steps per epoch = 5 steps from 0.2: 0.2 + 0.8 * k / 5 = 0.2, 0.36, 0.52, ...
  auto e = schedule_from("{warmup_epochs: 0.5, warmup_start_factor: 0.2}");
  REQUIRE(e->lr(0, 1.0) == Approx(0.2));
  REQUIRE(e->lr(1, 1.0) == Approx(0.36));
  REQUIRE(e->lr(4, 1.0) == Approx(0.84));
  REQUIRE(e->lr(5, 1.0) == 1.0);
}

TEST_CASE("step decay every k epochs", "[optim][schedule]") {
  // gamma 0.5 every 2 epochs of 10 steps: 1 for steps 0-19, 0.5 for 20-39, 0.25 from 40.
  auto s = schedule_from("{type: step, gamma: 0.5, step_epochs: 2}");
  REQUIRE(s->lr(0, 1.0) == 1.0);
  REQUIRE(s->lr(19, 1.0) == 1.0);
  REQUIRE(s->lr(20, 1.0) == 0.5);
  REQUIRE(s->lr(39, 1.0) == 0.5);
  REQUIRE(s->lr(40, 1.0) == 0.25);
}

TEST_CASE("step decay at milestones, with warm-up", "[optim][schedule]") {
  // milestones at epochs 3 and 5 of 100 steps (steps 300, 500), gamma 0.1 (the default); warm-up of 10
  // steps from 0.5 multiplies the first steps: step 5 is 0.5 + 0.5 * 5/10 = 0.75.
  auto s = schedule_from("{type: step, milestones: [3, 5], warmup_steps: 10, warmup_start_factor: 0.5}", 100, 1000);
  REQUIRE(s->lr(0, 1.0) == 0.5);
  REQUIRE(s->lr(5, 1.0) == Approx(0.75));
  REQUIRE(s->lr(10, 1.0) == 1.0);
  REQUIRE(s->lr(299, 1.0) == 1.0);
  REQUIRE(s->lr(300, 1.0) == Approx(0.1));
  REQUIRE(s->lr(499, 1.0) == Approx(0.1));
  REQUIRE(s->lr(500, 1.0) == Approx(0.01));
  REQUIRE(s->lr(999, 1.0) == Approx(0.01));
}

TEST_CASE("cosine decay after warm-up", "[optim][schedule]") {
  // total 110 steps, warm-up 10 steps (1 epoch of 10), min_factor 0.1: the decay runs over steps 10..110.
  // step 10: 1; step 60 (half way): 0.1 + 0.9 * (1 + cos(pi/2)) / 2 = 0.55; step 35 (a quarter):
  // 0.1 + 0.9 * (1 + cos(pi/4)) / 2 = 0.868198; step 110 and beyond: 0.1.
  auto s = schedule_from("{type: cosine, warmup_epochs: 1, min_factor: 0.1}", 10, 110);
  REQUIRE(s->lr(0, 2.0) == 0.0);
  REQUIRE(s->lr(5, 2.0) == Approx(1.0));
  REQUIRE(s->lr(10, 2.0) == 2.0);
  REQUIRE(s->lr(35, 2.0) == Approx(2.0 * (0.1 + 0.45 * (1 + std::sqrt(0.5)))));
  REQUIRE(s->lr(60, 2.0) == Approx(1.1));
  REQUIRE(s->lr(110, 2.0) == Approx(0.2));
  REQUIRE(s->lr(200, 2.0) == Approx(0.2));
  // Without warm-up or min_factor the decay ends at exactly 0.
  auto z = schedule_from("{type: cosine}", 10, 100);
  REQUIRE(z->lr(0, 1.0) == 1.0);
  REQUIRE(z->lr(50, 1.0) == Approx(0.5));
  REQUIRE(z->lr(100, 1.0) == Approx(0.0).margin(1e-15));
}

TEST_CASE("schedule config errors", "[optim][schedule][config]") {
  REQUIRE_THROWS_WITH(schedule_from("{type: linear}"),
                      Catch::Contains("optimizer.schedule.type must be one of constant, step, cosine, got 'linear'"));
  REQUIRE_THROWS_WITH(schedule_from("{type: step}"),
                      Catch::Contains("optimizer.schedule.type is step, which needs exactly one of step_epochs"));
  REQUIRE_THROWS_WITH(schedule_from("{type: step, step_epochs: 2, milestones: [3]}"),
                      Catch::Contains("needs exactly one of step_epochs"));
  REQUIRE_THROWS_WITH(schedule_from("{type: step, milestones: [5, 3]}"),
                      Catch::Contains("optimizer.schedule.milestones must be increasing, got 3 after 5"));
  REQUIRE_THROWS_WITH(schedule_from("{type: step, step_epochs: 2, gamma: 0}"),
                      Catch::Contains("optimizer.schedule.gamma must be > 0, got 0"));
  REQUIRE_THROWS_WITH(schedule_from("{warmup_steps: 5, warmup_epochs: 1}"),
                      Catch::Contains("warmup_steps and warmup_epochs are alternatives"));
  REQUIRE_THROWS_WITH(schedule_from("{warmup_epochs: -1}"),
                      Catch::Contains("optimizer.schedule.warmup_epochs must be >= 0, got -1"));
  // gamma belongs to the step type only.
  REQUIRE_THROWS_WITH(schedule_from("{type: cosine, gamma: 0.5}"),
                      Catch::Contains("unknown key 'optimizer.schedule.gamma'"));
  REQUIRE_THROWS_WITH(
      schedule_from("{type: cosine, min_factr: 0.5}"),
      Catch::Contains("unknown key 'optimizer.schedule.min_factr'") && Catch::Contains("did you mean 'min_factor'"));
}

TEST_CASE("make_schedule from a spec", "[optim][schedule]") {
  ScheduleSpec spec;
  spec.kind = ScheduleSpec::Kind::step;
  spec.gamma = 0.5;
  spec.milestones = {2, 4};
  auto s = make_schedule(spec);
  REQUIRE(s->lr(1, 1.0) == 1.0);
  REQUIRE(s->lr(2, 1.0) == 0.5);
  REQUIRE(s->lr(4, 1.0) == 0.25);
}

TEST_CASE("a warm-up longer than a shortened run is cut to fit, with a note", "[optim][schedule]") {
  // train.epochs=1 on a config that warms up over more epochs must train, not be refused.
  std::string note;
  auto s = schedule_from("{type: cosine, warmup_epochs: 10}", 10, 100, &note);
  CHECK(note ==
        "optimizer.schedule.warmup_epochs is 100 steps, as long as this run's 100 steps: the warm-up is "
        "shortened to the first 50 steps, the cosine decay takes the rest");
  CHECK(s->lr(0, 1.0) == 0.0);
  CHECK(s->lr(25, 1.0) == Approx(0.5));
  CHECK(s->lr(50, 1.0) == Approx(1.0));  // the peak, where the decay begins
  CHECK(s->lr(99, 1.0) < 0.01);          // decayed by the end of the run
  // Other schedules warm up over the whole run at most.
  std::string note2;
  auto c = schedule_from("{warmup_steps: 101}", 10, 100, &note2);
  CHECK(note2 ==
        "optimizer.schedule.warmup_steps is 101 steps, longer than this run's 100 steps: the warm-up is "
        "shortened to the first 100 steps");
  CHECK(c->lr(50, 1.0) == Approx(0.5));
  // A warm-up that fits is left alone, without a note.
  std::string none;
  auto f = schedule_from("{type: cosine, warmup_steps: 99}", 10, 100, &none);
  CHECK(none.empty());
  CHECK(f->lr(99, 1.0) == Approx(1.0));
}
