// diloco: DiLoCo (Douillard et al. 2023, arXiv 2311.08105). Each replica takes `inner_steps` (H)
// steps with its own optimizer (the run's `optimizer`, never synchronized); then the replicas average
// the pseudo-gradient delta = theta_global - theta_local through the run's gradient exchange (any
// `quantization` method and `communication` algorithm, error feedback carried from one outer step to
// the next), an outer SGD with Nesterov momentum (`sync.outer`, the paper's lr 0.7 and momentum 0.9)
// applies it to theta_global, and every replica continues from theta_global. The replicas' parameters
// are bit-identical after every outer step (every rank decodes the same bytes and runs the same outer
// step); between them they differ, and evaluation sees theta_global.
//
// Streaming DiLoCo (Douillard et al. 2025, arXiv 2501.18512): `fragments` F cut the arena into
// ranges of consecutive values (between rows where a boundary falls inside a tensor), each with its
// own exchange and outer optimizer, synced in turn at its
// own offset within the period (fragment f when (steps + f H / F) % H == 0), so one exchange carries
// about 1/F of the model. With `overlap` tau > 0 a fragment's exchange runs on the exchange's thread
// during the next tau inner steps and is merged when it lands: the outer step on the fragment's global
// parameters, then local = mix * local + (1 - mix) * global (the paper's alpha). The global parameters
// are bit-identical on every rank at every step; the replicas only agree in plain DiLoCo (F = 1,
// tau = 0) after an outer step.
//
// Outer lr 1 without momentum is plain periodic model averaging (PyTorch's PeriodicModelAverager, the
// post-local-SGD of Lin et al. 2020), up to the rounding of delta.
#pragma once

#include <cstdint>
#include <memory>

#include "train/sync/sync_strategy.h"

namespace qtrain {

std::unique_ptr<SyncStrategy> make_diloco_sync(SyncSetup& setup);

// The schedule's keys of the `sync` section (inner_steps H, fragments F, overlap tau) with their
// defaults and ranges, read by the strategy and by the tools that model its schedule (compare,
// predict): errors name the key.
struct DiLoCoPeriod {
  int64_t inner_steps = 500;
  int64_t fragments = 1;
  int64_t overlap = 0;
};
DiLoCoPeriod read_diloco_period(ConfigNode& sync);

}  // namespace qtrain
