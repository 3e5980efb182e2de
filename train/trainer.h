// Trainer: the training loop of one replica. Builds the net, optimizer, schedule and data loaders
// from a RunConfig, then runs epochs of forward / loss / backward / optimizer steps with per-phase
// timing, evaluation, metrics.csv, progress output and atomic checkpoints; resumes exactly.
#pragma once

#include <chrono>
#include <cmath>

#include <memory>
#include <string>

#include "comm/communicator.h"
#include "data/loader.h"
#include "train/checkpoint.h"
#include "train/metrics.h"
#include "framework/core/memory_budget.h"
#include "framework/model/net.h"
#include "framework/core/phase_timers.h"
#include "train/run_config.h"
#include "train/sync/sync_strategy.h"
#include "optim/schedule.h"

namespace spdlog {
class logger;
}

namespace qtrain {

struct DeviceBatch;  // a batch on the net's device (trainer.cpp)

struct TrainOptions {
  std::string resume_dir;  // continue the run in this directory from its checkpoint
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;                // GPU index on this host
  int local_size = 1;                // ranks on this host (they share its memory)
  std::string host;                  // this rank's host (node) name, for the topology line of the log
  int64_t check_replicas_every = 0;  // verify bit-identical parameters on every rank every N steps
};

struct EvalResult {
  double loss = 0;
  double accuracy = 0;  // sequence tasks: the fraction of utterances decoded exactly
  int64_t samples = 0;
  // Sequence tasks only (NaN otherwise): character / word error rate of greedy CTC decoding.
  double cer = std::nan(""), wer = std::nan("");
};

struct TrainSummary {
  int64_t steps = 0;
  int64_t epochs_completed = 0;
  EvalResult test;
  double wall_time_s = 0;
  std::string run_dir;
};

// InputError (naming `config_file`) when the net cannot take the dataset's samples: another sample
// shape than model.input, or a sequence loss on class labels (or the reverse). train and eval check it.
void check_net_fits_dataset(Net& net, const Dataset& data, const std::string& dataset_name,
                            const std::string& config_file);
// The large allocations of training `net` at `batch` (parameters, gradients, `optimizer_arrays` arrays
// of optimizer state, buffers, activations and input), for check_memory_fits: train and bench-model.
MemoryFootprint training_footprint(const NetSizes& sizes, const Shape& input, int64_t batch,
                                   const std::string& optimizer_label, int64_t optimizer_arrays);

// The gradient tensors of `net` as the exchange sees them (arena order, with their layers, columns and
// rows): what the trainer's sync strategy and the cost model of run records are built from.
std::vector<ExchangeTensor> exchange_tensors(const Net& net);

// Evaluates `net` over all batches of `loader` for `epoch` 0 (no shuffling needed for evaluation).
EvalResult evaluate(Net& net, Context& ctx, Loader& loader);

class Trainer {
 public:
  Trainer(RunConfig config, TrainOptions options);
  ~Trainer();
  TrainSummary run();

  Net& net() { return *net_; }
  const std::string& run_dir() const { return run_dir_; }
  const std::string& checkpoint_path() const { return checkpoint_path_; }

 private:
  // What an epoch accumulates for its metrics row and log line.
  struct EpochTally {
    PhaseTimers timers;
    double loss_sum = 0, exposed_s = 0;
    int64_t steps = 0;
    int64_t correct = 0, seen = 0;
    double lr = 0;  // of the last step
    std::chrono::steady_clock::time_point start;
  };
  // The constructor's steps, in order.
  void open_data();
  void build_sync();
  void prepare_run_dir();
  void open_log();
  void resume(int64_t steps_per_epoch);

  void log_start(int64_t steps_per_epoch);
  void log_topology();
  void train_step(const DeviceBatch& b, TrainingPosition& pos, EpochTally& tally);
  void end_epoch(int64_t epoch, bool stop, const EpochTally& tally, TrainingPosition& pos, TrainSummary& summary,
                 MetricsWriter* metrics, std::chrono::steady_clock::time_point t_start);
  void log_epoch(int64_t epoch, bool epoch_done, const MetricsRow& row, const ExchangeStats& ex, int64_t steps);
  void write_checkpoint(const TrainingPosition& position);
  // Each takes the strategy's state as sync_->state() named it once for the checkpoint.
  void load_rank_state(const std::vector<SyncState>& sync_state);
  std::string evaluated_state(const std::vector<SyncState>& sync_state, int64_t step);
  // What this rank's own checkpoint file holds at `step`.
  std::vector<NamedTensor> rank_state(const std::vector<SyncState>& sync_state, int64_t step);
  void check_resume_config();
  void log_info(const std::string& line);
  void check_replicas(int64_t step);
  EvalResult evaluate_model(int64_t step);
  void sync_buffers();
  void check_same_config();

  RunConfig config_;
  TrainOptions options_;
  std::string run_dir_, checkpoint_path_;
  Device device_;
  std::unique_ptr<Context> ctx_;
  std::unique_ptr<Communicator> comm_;
  std::unique_ptr<Net> net_;
  std::unique_ptr<SyncStrategy> sync_;
  std::vector<std::vector<int>> tensors_of_layer_;  // sync tensor indices per layer
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<Dataset> train_set_, test_set_;
  std::unique_ptr<Loader> train_loader_, test_loader_;
  std::unique_ptr<Schedule> schedule_;
  std::shared_ptr<spdlog::logger> log_;
  TrainingPosition start_;
  std::string resolved_yaml_;
  std::vector<uint8_t> buffer_gather_;  // sync_buffers()' receive space, kept between calls
  std::vector<size_t> buffer_sizes_, buffer_offsets_;
};

}  // namespace qtrain
