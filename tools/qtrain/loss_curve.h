// The training-loss curve of a compare report: an exponential moving average over steps that runs
// on across epoch boundaries.
//
// What a run records is the trainer's running mean of the loss since the start of the epoch, every
// --curve-every steps (curve.csv; at each epoch's end in metrics.csv). Drawn as it is, that curve is a
// saw-tooth: it restarts every epoch and lags within one. The mean loss of the steps between two
// records of one epoch follows from the two running means, weighted by the steps each covers:
//   mean over (s1, s2] = (L2 (s2 - e) - L1 (s1 - e)) / (s2 - s1),   e = the step that ended the last epoch,
// and the first record of an epoch is itself the mean over (e, s2]. Those interval means feed an EMA
// with a per-step factor: an interval of k steps with mean x moves the average by 1 - (1 - a)^k of
// the way to x. (Steps are weighted alike; the samples of a short last batch count as a full step.)
// A run resumed from a checkpoint restarts its running mean at the checkpoint, not at the epoch's
// start: the first interval after a resume mixes in the steps before it, one interval's error.
#pragma once

#include <cstdint>
#include <vector>

#include "tools/qtrain/run_record.h"

namespace qtrain::cli {

struct LossPoint {
  int64_t step = 0;
  double wall_s = 0;
  double loss = 0;  // the moving average at this step
};

// The EMA of `run` (curve.csv where it has two points or more, else the per-epoch rows of
// metrics.csv) with the given half-life in steps (> 0).
std::vector<LossPoint> smoothed_loss(const RunRecord& run, double half_life_steps);

// A half-life for `steps` steps in all: 1/40 of the run, at least one step.
double default_half_life(int64_t steps);

}  // namespace qtrain::cli
