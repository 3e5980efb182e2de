// The synchronization schedule of a run as `compare`, its report and `predict` need it: which strategy
// the `sync` section chose, how often it exchanges and how much of the model one exchange carries. The
// trainer's strategies (train/sync/) read the same keys; this reads only what the schedule depends on
// (type, and DiLoCo's inner_steps, fragments, overlap through its own read_diloco_period), and leaves the
// other keys (sync.outer, sync.mix, DeMo's chunk and topk) to them: a run that trained had them checked.
//
//   every_step, demo   one exchange per step, of the whole model
//   diloco             every H = inner_steps steps; with F = fragments, fragment f is exchanged when
//                      (steps + f H / F) % H == 0 (diloco.h), so a period of H steps holds F exchanges
//                      of about 1/F of the model each; tau = overlap steps of compute may hide each one
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "framework/core/config_node.h"

namespace qtrain::cli {

struct SyncSchedule {
  enum class Type { every_step, diloco, demo };
  Type type = Type::every_step;
  int64_t inner_steps = 1;  // H: the steps of one period (1 unless diloco)
  int64_t fragments = 1;    // F
  int64_t overlap = 0;      // tau

  // "every step", "DiLoCo H=50", "DiLoCo H=50 F=4 tau=5", "DeMo".
  std::string str() const;
  // Exchanges begun by the end of step `steps` (steps 1..steps), one per fragment synced: every_step
  // and demo exchange at every step; diloco's fragment f at the steps s with (s + f H / F) % H == 0.
  int64_t exchanges(int64_t steps) const;
  // Of those, the ones that landed by the end of step `steps`: with overlap tau, an exchange begun at
  // step s runs on the exchange's thread until step s + tau, and one still in flight at the end of a
  // run has, as a rule, not yet sent its bytes when the trainer writes its last metrics row (they are
  // counted as its buckets go out).
  int64_t landed_exchanges(int64_t steps) const { return exchanges(std::max<int64_t>(0, steps - overlap)); }
  // Exchanges per step over whole periods: 1, or F / H.
  double exchanges_per_step() const { return static_cast<double>(fragments) / static_cast<double>(inner_steps); }
  bool operator==(const SyncSchedule&) const = default;
};

// From a run's `sync` section (config.resolved.yaml, after --set). An unknown type or a value out of
// its range is an InputError naming the key and the file, as the trainer's would be.
SyncSchedule parse_sync_schedule(ConfigNode sync);

// A schedule written on compare's command line, the part after '@' of a --methods entry:
// "diloco:inner_steps=50:fragments=4" -> {"sync.type=diloco", "sync.inner_steps=50",
// "sync.fragments=4"}. The first word is the type; every other is a key=value of the `sync` section
// (a nested key with dots: outer.lr=1). `entry` names the whole entry in errors.
std::vector<std::string> schedule_overrides(const std::string& schedule, const std::string& entry);

}  // namespace qtrain::cli
