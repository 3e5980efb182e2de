// The numbers of a `qtrain compare` report: what each run cost and saved (SummaryRow), the same over
// a method's seeds (MethodSummary: mean and standard deviation, a 95% confidence interval), and the
// Markdown that report.md shows of them: the table, the intervals, and one sentence per method on its
// difference from the baseline with Welch's t-test (stats.h) behind it.
//
// A method whose seeds did not all finish is summarized over the seeds it has and marked as such
// (the seeds column, and "on 2 of 3 seeds" in its sentence); it is never averaged as if complete.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tools/qtrain/run_record.h"

namespace qtrain::cli {

// One run.
struct SummaryRow {
  std::string label;
  uint64_t seed = 0;
  int ranks = 1;
  int64_t epochs = 0;  // completed epochs
  int64_t steps = 0;   // optimizer steps in all: more than epochs x steps per epoch when train.max_steps
                       // ended the run in a partial epoch
  double final_accuracy = 0, best_accuracy = 0;
  int64_t best_epoch = 0;
  std::optional<double> time_to_target_s;  // wall_time_s of the first evaluation at or above the target
  double samples_per_s = 0;                // all steps: sum(steps) / sum(steps / samples_per_s of the row)
  double bits_per_value = 0;               // payload bits per gradient value, headers included
  double fraction_quantized = 0;
  double step_ms = 0;                   // the training loop's time per step
  std::string schedule = "every step";  // SyncSchedule::str()
  bool per_step_schedule = true;        // one exchange of the whole model per step (every_step)
  // Measured, per rank (0 in a world of one): per step over whole sync periods, and per exchange.
  double bytes_sent_per_step = 0, bytes_per_exchange = 0;
  double exposed_share = 0;  // of the training loop's time, waiting for the exchange
  // Sequence tasks: test character / word error rate of the last epoch and the lowest CER.
  std::optional<double> final_cer, final_wer, best_cer;
  int64_t best_cer_epoch = 0;
};
SummaryRow summarize(const RunRecord& run, double target);

// One method over its seeds.
struct MethodSummary {
  std::string label;
  std::vector<SummaryRow> runs;         // one per finished seed, in the sweep's seed order
  std::vector<uint64_t> missing_seeds;  // asked for with --seeds, not finished
  size_t seeds_asked() const { return runs.size() + missing_seeds.size(); }
  bool complete() const { return missing_seeds.empty(); }
  // A figure of every finished run, e.g. values(&SummaryRow::final_accuracy).
  std::vector<double> values(double SummaryRow::*field) const;
  std::vector<double> values(std::optional<double> SummaryRow::*field) const;  // the runs that have it
};

// `runs` grouped by label, in the order of `labels` (every method of the sweep, finished or not; a
// label of `runs` missing from it comes after, in order of appearance). `seeds` are the sweep's
// --seeds (empty: one run per method, nothing can be missing but a method's only run).
std::vector<MethodSummary> summarize_methods(const std::vector<RunRecord>& runs, double target,
                                             const std::vector<int64_t>& seeds, const std::vector<std::string>& labels);

// The table of report.md: one row per method with finished runs. With one run per method its cells
// are that run's figures; with several, mean ± standard deviation over the seeds (and a seeds column
// when the sweep asked for seeds). Speedup: mean samples/s over the baseline's; "-" without it. When
// a run synchronizes other than every step (DiLoCo, DeMo), the table gains the schedule and the bytes
// of one exchange beside the bytes per step, so that per-step and periodic runs read side by side.
std::string markdown_table(const std::vector<MethodSummary>& methods, double target, const std::string& baseline);

// The 95% confidence intervals (Student t over the seeds) of the table's accuracy, error-rate, time and
// throughput figures; "" when no method has two finished seeds.
std::string interval_table(const std::vector<MethodSummary>& methods, double target);

// One line per method on how it differs from `baseline`: the final accuracy (CER and WER for
// sequence tasks) with Welch's t-test, e.g. "no detectable difference (p=0.41; ...)" or "loses
// 1.20 ± 0.40 points (p=0.003)", and its speedup; or why no test can be given (one seed, no baseline).
std::string baseline_findings(const std::vector<MethodSummary>& methods, const std::string& baseline);

}  // namespace qtrain::cli
