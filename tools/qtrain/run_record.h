// What `qtrain compare` and `qtrain predict` read back from a finished run directory: the rows of
// metrics.csv, the world size (from train.log), the resolved config's model and exchange plan turned
// into predict::Bucket (values and payload bytes per bucket, as GradientExchange forms them; DeMo's
// own payload under sync.type demo), its sync schedule (sync_schedule.h), and the training-loss curve
// that `compare` records while the run goes (curve.csv, optional).
#pragma once

#include <array>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "framework/core/phase_timers.h"
#include "tools/qtrain/predict_model.h"
#include "tools/qtrain/sync_schedule.h"

namespace qtrain::cli {

struct MetricsRecord {
  int64_t epoch = 0, step = 0;
  double wall_time_s = 0, train_loss = 0, test_accuracy = 0, samples_per_s = 0;
  std::array<double, PhaseTimers::kCount> phase_s{};  // seconds since the previous row
  double bytes_sent = 0;                              // since the previous row, by this rank
  double bytes_sent_per_step = 0, hidden_comm_s = 0, exposed_comm_s = 0, fraction_quantized = 0;
  // Sequence tasks (CTC) only: character and word error rate on the test set; NaN otherwise.
  double test_cer = std::numeric_limits<double>::quiet_NaN(), test_wer = std::numeric_limits<double>::quiet_NaN();
  bool has_error_rates() const { return !std::isnan(test_cer); }
};

// Reads metrics.csv by column name (the columns MetricsWriter::header() writes; extra columns are
// ignored; test_cer / test_wer may be absent or empty, as in runs of classification tasks). Throws InputError naming
// the file when it is missing, empty or malformed.
std::vector<MetricsRecord> read_metrics_csv(const std::string& path);

struct CurvePoint {
  double wall_s = 0;  // since the start of the run
  int64_t step = 0;
  double train_loss = 0;  // running mean over the epoch so far
};
// curve.csv ("wall_s,step,train_loss"); empty when the file does not exist.
std::vector<CurvePoint> read_curve_csv(const std::string& path);

struct RunRecord {
  std::string dir, label;
  std::vector<MetricsRecord> rows;
  std::vector<CurvePoint> curve;
  int ranks = 1;
  // Where its ranks ran (train.log's "topology:" line; one node per rank when absent) and whether its
  // exchange went in two levels ("two levels:" in the logged plan), at which intra precision.
  int nodes = 1, ranks_per_node = 1;
  bool two_level = false;
  std::string intra = "fp32";
  // A method of this run the two levels cannot carry (exchange/hierarchical_exchange.h); empty if none.
  std::string two_level_unsuited;
  uint64_t seed = 0;       // the config's seed
  int64_t batch_size = 0;  // per replica
  std::string method;      // the config's quantization method, e.g. "qsgd(bits=4, bucket=512, norm=max)"
  double gradient_values = 0;
  double payload_bytes = 0;  // one replica's encoded gradient per step (all tensors, headers included)
  double fraction_quantized = 0;
  SyncSchedule schedule;         // the config's sync section
  predict::StepProfile profile;  // per-step averages over all rows

  int64_t steps() const { return rows.empty() ? 0 : rows.back().step; }
  double bits_per_value() const { return gradient_values > 0 ? 8 * payload_bytes / gradient_values : 0; }
  // The training loop's time per step: data + forward + backward + optimizer + exposed communication.
  double measured_step_s() const;
  // The share of the training loop's time that it waited for the exchange (exposed communication;
  // evaluations and checkpoints are not in the loop). 0 for a run without steps.
  double exposed_share() const;
  // Bytes this rank sent in the whole run (metrics.csv's bytes_sent, summed over the rows).
  double bytes_sent() const;
  // Bytes this rank sent per exchange: the run's bytes over the exchanges of its schedule that landed
  // (SyncSchedule::landed_exchanges: with overlap, one still in flight at the end has not sent its
  // bytes yet). With F > 1 fragments, the mean over the fragments' exchanges, which DiLoCo cuts to
  // carry equal bytes up to one row of a tensor. 0 without an exchange.
  double bytes_per_exchange() const;
  // Bytes per step averaged over whole sync periods: bytes_per_exchange() x exchanges per step of the
  // schedule (F / H), so that a run that stops inside a period, or whose epochs do not hold whole
  // periods, is not credited with the exchanges it did not reach. Per step itself for every_step and demo.
  double bytes_per_step() const;
};

// Loads `dir` (metrics.csv and config.resolved.yaml required; train.log and curve.csv optional).
RunRecord load_run(const std::string& dir, const std::string& label);

}  // namespace qtrain::cli
