// Training checkpoints: parameters (by their names, e.g. "dense1.weight"), buffers (likewise, e.g.
// "bn1.running_mean"), optimizer state (whole
// arenas, "optimizer/<state>"), and the position in training (step, epoch, batch) in one safetensors
// file, written atomically. All randomness in qtrain is counter-based (Philox keyed by seed and
// step), so the step is the complete RNG state.
#pragma once

#include <string>

#include "framework/model/net.h"
#include "optim/optimizer.h"

namespace qtrain {

struct TrainingPosition {
  int64_t step = 0;            // optimizer steps taken
  int64_t epoch = 0;           // current epoch (0-based)
  int64_t batch_in_epoch = 0;  // batches of `epoch` already consumed
  // Ranks of the run that wrote it (0: not recorded, checkpoints of older versions). The position
  // within the epoch and the per-rank state files mean something only for that many ranks.
  int64_t world_size = 0;
  // The resolved config the checkpoint was written with (load_checkpoint fills it; "" if absent).
  std::string config;
};

void save_checkpoint(const std::string& path, Net& net, Optimizer& optimizer, const TrainingPosition& position,
                     uint64_t seed, const std::string& resolved_config);

// Restores parameters, buffers and optimizer state into `net` and `optimizer` (which must have the same layout)
// and returns the position. Corrupt files and mismatched models are InputErrors naming the file.
TrainingPosition load_checkpoint(const std::string& path, Net& net, Optimizer* optimizer);

}  // namespace qtrain
