// SyncStrategy: how the replicas of a run synchronize. The trainer owns one and calls it at four fixed
// points of every step (before backward, per finished gradient tensor, after backward, after the
// optimizer step); everything else about synchronization (what crosses the wire, how often, what state
// it keeps) is the strategy's. Today's per-step gradient exchange (every_step.h) is one strategy;
// schedules that sync every H steps (periodic averaging, DiLoCo) are others.
//
// A strategy that lets replicas drift between synchronizations says so through replicas_identical():
// the trainer then keeps each rank's parameters in that rank's own checkpoint file, points the
// bit-identity check of --debug-check-replicas at the strategy's global parameters (which every rank
// must hold alike at every step; none: no check), and evaluates them (or, if it keeps none, rank 0's
// replica, and says so). Optimizer state that is never synchronized
// (optimizer_state_per_rank) goes to the rank files too.
//
// A new strategy is its own files plus one line in train/sync/registry.cpp.
#pragma once

#include <string>
#include <vector>

#include "exchange/gradient_exchange.h"
#include "framework/core/config_node.h"
#include "framework/core/registry.h"
#include "train/run_config.h"

namespace qtrain {

// One piece of a strategy's state, for checkpoints.
struct SyncState {
  std::string name;  // under the strategy's own prefix ("exchange/dense1.weight/residual")
  Tensor tensor;     // the live buffer: copying into it restores the state (before the first step)
  // True: it differs between ranks and goes to each rank's own file (rank_state.h); false: it is the
  // same on every rank and rank 0's checkpoint holds it.
  bool per_rank = true;
};

// What a strategy is built from: the run as the trainer knows it before the first step.
struct SyncSetup {
  Communicator& comm;
  Device device;
  const RunConfig& config;
  // The `sync` section, `type` already read: the strategy reads its own keys and calls finish().
  ConfigNode& options;
  std::vector<ExchangeTensor> tensors;  // the gradient tensors in arena order (Net's ParamEntry)
  Tensor params;                        // the parameter arena the optimizer updates
};

class SyncStrategy {
 public:
  virtual ~SyncStrategy() = default;

  // Step `step` (0-based) starts its backward into `grads`, the flat gradient arena.
  virtual void before_backward(Tensor grads, uint64_t step) = 0;
  // Tensor t's gradient is final (called from backward, in any order); `compute` produced it.
  virtual void tensor_ready(Context& compute, int t) = 0;
  // Backward is over: when this returns, `grads` holds what the optimizer applies. The time it takes is
  // the run's exposed communication. `compute` is the context backward ran on (work queued on its
  // stream follows backward's).
  virtual void after_backward(Context& compute) = 0;
  // The optimizer has updated `params` for step `step` (the one before_backward named).
  virtual void after_optimizer_step(Context& ctx, Tensor& params, uint64_t step) = 0;

  // Whether every rank holds the same parameters after `steps` steps.
  virtual bool replicas_identical(int64_t steps) const = 0;
  // Whether the (inner) optimizer's state differs between ranks.
  virtual bool optimizer_state_per_rank() const = 0;
  // The parameters an evaluation should see where replicas differ (a global model the strategy keeps,
  // the same on every rank), or nullptr: then each replica evaluates its own.
  virtual const Tensor* global_parameters() const = 0;
  // Everything a resume needs besides the parameters and the optimizer's state.
  virtual std::vector<SyncState> state() = 0;

  // Statistics since the last call (bytes per tensor of tensors()), and the log's description.
  virtual ExchangeStats take_stats() = 0;
  virtual const std::vector<ExchangeTensor>& tensors() const = 0;
  virtual double fraction_quantized() const = 0;  // of all gradient values, those not sent as fp32
  virtual std::string summary() const = 0;        // one line: "12.50% of gradient values quantized, ..."
  virtual std::string describe() const = 0;       // the plan, one line per tensor
};

using SyncRegistry = Registry<SyncStrategy, SyncSetup&>;
// The strategies by their `sync.type` names.
const SyncRegistry& sync_registry();

}  // namespace qtrain
