// metrics.csv: one row per evaluation (end of an epoch, or the end of a run stopped by max_steps).
// Appends on resume, after checking that the existing header is the one this version writes and
// dropping the rows the resumed run writes again.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "framework/core/phase_timers.h"

namespace qtrain {

struct MetricsRow {
  int64_t epoch = 0;  // epochs completed (fractional progress is in `step`)
  int64_t step = 0;
  double wall_time_s = 0;
  double lr = 0;
  double train_loss = 0, train_accuracy = 0;
  double test_loss = 0, test_accuracy = 0;
  double samples_per_s = 0;
  PhaseTimers phases;     // seconds spent in each phase since the previous row
  double bytes_sent = 0;  // gradient bytes this rank sent since the previous row
  double bytes_sent_per_step = 0;
  double hidden_comm_s = 0;       // exchange time overlapped with backward (not waited for)
  double exposed_comm_s = 0;      // time the training loop waited for the exchange after backward
  double fraction_quantized = 0;  // of all gradient values, those not sent as fp32
  // Sequence tasks (CTC): character and word error rates on the test set; NaN (an empty cell) for
  // classification and for rows without an evaluation.
  double test_cer = std::nan(""), test_wer = std::nan("");
};

class MetricsWriter {
 public:
  // Keeps the existing rows up to step `keep_through_step` (a resumed run continues from there and
  // writes the later ones again; a fresh run passes 0) and drops a last line cut short.
  explicit MetricsWriter(const std::string& path, int64_t keep_through_step = INT64_MAX);
  void append(const MetricsRow& row);
  static std::string header();

 private:
  std::string path_;
};

}  // namespace qtrain
