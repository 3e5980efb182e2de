// Training checkpoints: parameters (by their names, e.g. "dense1.weight"), buffers (likewise, e.g.
// "bn1.running_mean"), optimizer state (whole arenas, "optimizer/<state>"), the sync strategy's state
// that is the same on every rank ("sync/<its name>"), and the position in training (step, epoch,
// batch) in one safetensors file, written atomically. What differs between ranks is in each rank's
// own file (rank_state.h). All randomness in qtrain is counter-based (Philox keyed by seed and
// step), so the step is the complete RNG state.
#pragma once

#include <string>
#include <vector>

#include "framework/core/safetensors.h"
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
  // Evaluation loads only (no optimizer): whether the net got the strategy's global parameters
  // instead of rank 0's replica (save_checkpoint's `evaluate`).
  bool global_parameters = false;
};

// `sync_state`: the strategy's shared state, stored as "sync/<name>". `evaluate`: the name of the
// sync_state entry that holds the parameters an evaluation should see (a strategy's global parameters
// where the replicas differ at this step), or "" for the parameters themselves.
void save_checkpoint(const std::string& path, Net& net, Optimizer& optimizer,
                     const std::vector<NamedTensor>& sync_state, const TrainingPosition& position, uint64_t seed,
                     const std::string& resolved_config, const std::string& evaluate = "");

// Restores parameters, buffers, optimizer state and the strategy's shared state into `net`,
// `optimizer` and `sync_state` (which must have the same layout) and returns the position. Corrupt
// files and mismatched models are InputErrors naming the file. Without an optimizer (evaluation), the
// optimizer's and the strategy's state are left unread, and the parameters are those an evaluation
// should see (the strategy's global parameters where the checkpoint names them).
TrainingPosition load_checkpoint(const std::string& path, Net& net, Optimizer* optimizer,
                                 const std::vector<NamedTensor>& sync_state = {});

}  // namespace qtrain
