// The EMA of the training loss across epochs (see loss_curve.h).
#include "tools/qtrain/loss_curve.h"

#include <algorithm>
#include <cmath>

#include "framework/core/check.h"

namespace qtrain::cli {

double default_half_life(int64_t steps) { return std::max(1.0, static_cast<double>(steps) / 40); }

std::vector<LossPoint> smoothed_loss(const RunRecord& run, double half_life_steps) {
  QT_CHECK(half_life_steps > 0, "smoothed_loss: the half-life must be positive, got {}", half_life_steps);
  std::vector<CurvePoint> records = run.curve;
  if (records.size() < 2) {
    records.clear();
    for (const MetricsRecord& r : run.rows) records.push_back({r.wall_time_s, r.step, r.train_loss});
  }
  // The steps that ended an epoch, from metrics.csv: a record at step s belongs to the epoch that
  // started after the largest of them below s.
  std::vector<int64_t> epoch_ends;
  for (const MetricsRecord& r : run.rows) epoch_ends.push_back(r.step);
  auto epoch_start = [&](int64_t step) {
    int64_t start = 0;
    for (int64_t e : epoch_ends)
      if (e < step) start = std::max(start, e);
    return start;
  };
  const double keep_per_step = std::pow(0.5, 1 / half_life_steps);
  std::vector<LossPoint> out;
  int64_t previous_step = 0;
  double previous_mean = 0, average = 0;
  for (const CurvePoint& p : records) {
    if (p.step <= previous_step) continue;  // a repeated or out-of-order record adds nothing
    const int64_t e = epoch_start(p.step);
    double interval = p.train_loss;  // the first record of an epoch: the mean over (e, step]
    if (previous_step > e)
      interval =
          (p.train_loss * static_cast<double>(p.step - e) - previous_mean * static_cast<double>(previous_step - e)) /
          static_cast<double>(p.step - previous_step);
    // The records keep 6 decimals: their rounding can push a near-zero interval mean below zero.
    interval = std::max(interval, 0.0);
    const double keep = std::pow(keep_per_step, static_cast<double>(p.step - previous_step));
    average = out.empty() ? interval : keep * average + (1 - keep) * interval;
    out.push_back({p.step, p.wall_s, average});
    previous_step = p.step;
    previous_mean = p.train_loss;
  }
  return out;
}

}  // namespace qtrain::cli
