// Per-run and per-method figures of a compare report, and their Markdown (see method_summary.h).
#include "tools/qtrain/method_summary.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "framework/core/check.h"
#include "tools/qtrain/stats.h"

namespace qtrain::cli {
namespace {

// A difference from the baseline counts as detected below this two-sided p-value.
constexpr double kSignificance = 0.05;

std::string percent(double fraction) { return fmt::format("{:.2f}%", 100 * fraction); }

bool any_error_rates(const std::vector<MethodSummary>& methods) {
  for (const MethodSummary& m : methods)
    for (const SummaryRow& r : m.runs)
      if (r.best_cer) return true;
  return false;
}

// "97.50%" for one run, "97.28 ± 0.15%" for several.
std::string percent_cell(const std::vector<double>& v) {
  if (v.empty()) return "-";
  if (v.size() == 1) return percent(v.front());
  return fmt::format("{:.2f} ± {:.2f}%", 100 * stats::mean(v), 100 * stats::sample_sd(v));
}

// A plain number with `decimals` decimals, "mean ± sd" for several runs.
std::string number_cell(const std::vector<double>& v, int decimals) {
  if (v.empty()) return "-";
  if (v.size() == 1) return fmt::format("{:.{}f}", v.front(), decimals);
  return fmt::format("{:.{}f} ± {:.{}f}", stats::mean(v), decimals, stats::sample_sd(v), decimals);
}

std::string seed_list(const std::vector<uint64_t>& seeds) {
  std::string out;
  for (uint64_t s : seeds) out += (out.empty() ? "" : ", ") + std::to_string(s);
  return out;
}

std::vector<uint64_t> seeds_of(const MethodSummary& m) {
  std::vector<uint64_t> out;
  for (const SummaryRow& r : m.runs) out.push_back(r.seed);
  return out;
}

// "3 (1, 2, 3)" or "2 of 3 (1, 2; 3 missing)".
std::string seeds_cell(const MethodSummary& m) {
  if (m.complete()) return fmt::format("{} ({})", m.runs.size(), seed_list(seeds_of(m)));
  return fmt::format("{} of {} ({}{}{} missing)", m.runs.size(), m.seeds_asked(), seed_list(seeds_of(m)),
                     m.runs.empty() ? "" : "; ", seed_list(m.missing_seeds));
}

bool any_schedule(const std::vector<MethodSummary>& methods) {
  for (const MethodSummary& m : methods)
    for (const SummaryRow& r : m.runs)
      if (!r.per_step_schedule) return true;
  return false;
}

bool several_seeds(const std::vector<MethodSummary>& methods) {
  return std::any_of(methods.begin(), methods.end(), [](const MethodSummary& m) { return m.seeds_asked() > 1; });
}

// Time to the target accuracy: the seeds that reached it, and how many did.
std::string time_cell(const MethodSummary& m) {
  const std::vector<double> reached = m.values(&SummaryRow::time_to_target_s);
  if (reached.empty()) return "not reached";
  std::string cell = number_cell(reached, 1) + " s";
  if (reached.size() < m.runs.size())
    cell += fmt::format(" ({} of {} seeds reached it)", reached.size(), m.runs.size());
  return cell;
}

// "96.90 to 97.66%" (x100 when `as_percent`), or why there is none.
std::string interval_cell(const std::vector<double>& v, bool as_percent, int decimals) {
  if (v.empty()) return "-";
  const stats::Sample s = stats::describe(v);
  if (!s.ci_low) return "one seed: none";
  const double scale = as_percent ? 100 : 1;
  return fmt::format("{:.{}f} to {:.{}f}{}", scale * *s.ci_low, decimals, scale * *s.ci_high, decimals,
                     as_percent ? "%" : "");
}

std::string p_value(double p) { return p < 0.001 ? "p<0.001" : fmt::format("p={:.2g}", p); }

// How a method's figure differs from the baseline's, in points, as a reader can act on it.
std::string difference_sentence(const std::string& what, bool higher_is_better, const std::vector<double>& method,
                                const std::vector<double>& base, const std::string& baseline) {
  if (method.empty() || base.empty()) return "";
  const double points = 100 * (stats::mean(method) - stats::mean(base));
  const std::optional<stats::WelchTest> w = stats::welch_test(method, base);
  if (!w)
    return fmt::format("{} {:+.2f} points against {} (no test: it needs two seeds on each side)", what, points,
                       baseline);
  const double half = 100 * w->half_width;
  if (w->p >= kSignificance)
    return fmt::format(
        "{}: no detectable difference from {} ({}; the difference, {:+.2f} ± {:.2f} points at 95%, is "
        "within the seed-to-seed spread)",
        what, baseline, p_value(w->p), points, half);
  const bool better = (points > 0) == higher_is_better;
  if (higher_is_better)
    return fmt::format("{}: {} {:.2f} ± {:.2f} points against {} ({})", what, better ? "gains" : "loses",
                       std::fabs(points), half, baseline, p_value(w->p));
  return fmt::format("{}: {:.2f} ± {:.2f} points {} than {}'s, {} ({})", what, std::fabs(points), half,
                     points > 0 ? "higher" : "lower", baseline, better ? "better" : "worse", p_value(w->p));
}

}  // namespace

std::vector<double> MethodSummary::values(double SummaryRow::*field) const {
  std::vector<double> out;
  for (const SummaryRow& r : runs) out.push_back(r.*field);
  return out;
}

std::vector<double> MethodSummary::values(std::optional<double> SummaryRow::*field) const {
  std::vector<double> out;
  for (const SummaryRow& r : runs)
    if (r.*field) out.push_back(*(r.*field));
  return out;
}

SummaryRow summarize(const RunRecord& run, double target) {
  QT_CHECK(!run.rows.empty(), "summarize: {} has no metrics rows", run.dir);
  SummaryRow s;
  s.label = run.label;
  s.seed = run.seed;
  s.ranks = run.ranks;
  s.epochs = run.rows.back().epoch;
  s.steps = run.rows.back().step;
  s.final_accuracy = run.rows.back().test_accuracy;
  double steps = 0, time = 0;
  int64_t previous_step = 0;
  for (const MetricsRecord& r : run.rows) {
    if (r.test_accuracy > s.best_accuracy) {
      s.best_accuracy = r.test_accuracy;
      s.best_epoch = r.epoch;
    }
    if (!s.time_to_target_s && r.test_accuracy >= target) s.time_to_target_s = r.wall_time_s;
    if (r.has_error_rates() && (!s.best_cer || r.test_cer < *s.best_cer)) {
      s.best_cer = r.test_cer;
      s.best_cer_epoch = r.epoch;
    }
    const double n = static_cast<double>(r.step - previous_step);
    previous_step = r.step;
    if (r.samples_per_s > 0) {
      steps += n;
      time += n / r.samples_per_s;
    }
  }
  s.samples_per_s = time > 0 ? steps / time : 0;
  s.bits_per_value = run.bits_per_value();
  s.fraction_quantized = run.fraction_quantized;
  s.step_ms = 1e3 * run.measured_step_s();
  s.schedule = run.schedule.str();
  s.per_step_schedule = run.schedule.type == SyncSchedule::Type::every_step;
  s.bytes_sent_per_step = run.bytes_per_step();
  s.bytes_per_exchange = run.bytes_per_exchange();
  s.exposed_share = run.exposed_share();
  if (run.rows.back().has_error_rates()) {
    s.final_cer = run.rows.back().test_cer;
    s.final_wer = run.rows.back().test_wer;
  }
  return s;
}

std::vector<MethodSummary> summarize_methods(const std::vector<RunRecord>& runs, double target,
                                             const std::vector<int64_t>& seeds,
                                             const std::vector<std::string>& labels) {
  std::vector<MethodSummary> out;
  auto find = [&](const std::string& label) -> MethodSummary& {
    for (MethodSummary& m : out)
      if (m.label == label) return m;
    out.push_back(MethodSummary{label, {}, {}});
    return out.back();
  };
  for (const std::string& l : labels) find(l);
  for (const RunRecord& r : runs) find(r.label).runs.push_back(summarize(r, target));
  for (MethodSummary& m : out) {
    // The sweep's seed order; a seed it asked for without a finished run is missing.
    std::vector<SummaryRow> ordered;
    for (int64_t seed : seeds) {
      const auto it = std::find_if(m.runs.begin(), m.runs.end(),
                                   [&](const SummaryRow& r) { return r.seed == static_cast<uint64_t>(seed); });
      if (it == m.runs.end())
        m.missing_seeds.push_back(static_cast<uint64_t>(seed));
      else
        ordered.push_back(*it);
    }
    if (!seeds.empty()) m.runs = ordered;
  }
  return out;
}

std::string markdown_table(const std::vector<MethodSummary>& methods, double target, const std::string& baseline) {
  // The error-rate columns appear when any run is a sequence task; "-" for a run without them.
  const bool error_rates = any_error_rates(methods);
  const bool seeds = several_seeds(methods);
  // The schedule and the bytes of one exchange appear when any run does not exchange every step.
  const bool schedules = any_schedule(methods);
  const MethodSummary* base = nullptr;
  for (const MethodSummary& m : methods)
    if (m.label == baseline && !m.runs.empty()) base = &m;
  std::string s = fmt::format(
      "| method | {}ranks | {}epochs (steps) | final accuracy | best accuracy{} | {}time to {} | samples/s | speedup "
      "over {} | ms per step | waiting for the exchange | bits per value | sent per step per rank | {}fraction "
      "quantized |\n"
      "|---|{}---|{}---|---|---|{}---|---|---|---|---|---|---|{}---|\n",
      seeds ? "seeds | " : "", schedules ? "schedule | " : "", seeds ? "" : " (epoch)",
      error_rates ? (seeds ? "final CER | final WER | best CER | " : "final CER | final WER | best CER (epoch) | ")
                  : "",
      percent(target), baseline, schedules ? "sent per exchange per rank | " : "", seeds ? "---|" : "",
      schedules ? "---|" : "", error_rates ? "---|---|---|" : "", schedules ? "---|" : "");
  for (const MethodSummary& m : methods) {
    if (m.runs.empty()) continue;  // named below the table
    const SummaryRow& first = m.runs.front();
    const bool one = m.runs.size() == 1 && !seeds;
    std::string rates;
    if (error_rates) {
      const std::vector<double> best_cer = m.values(&SummaryRow::best_cer);
      rates = best_cer.empty() ? "- | - | - | "
                               : fmt::format("{} | {} | {}{} | ", percent_cell(m.values(&SummaryRow::final_cer)),
                                             percent_cell(m.values(&SummaryRow::final_wer)), percent_cell(best_cer),
                                             one ? fmt::format(" ({})", first.best_cer_epoch) : "");
    }
    const std::vector<double> rate = m.values(&SummaryRow::samples_per_s);
    const double base_rate = base ? stats::mean(base->values(&SummaryRow::samples_per_s)) : 0;
    auto megabytes = [&](double SummaryRow::*field) {
      return first.ranks > 1 ? fmt::format("{:.3f} MB", stats::mean(m.values(field)) / 1e6)
                             : std::string("- (one rank)");
    };
    s += fmt::format(
        "| {} | {}{} | {}{} ({}) | {} | {}{} | {}{} | {} | {} | {:.1f} | {:.1f}% | {:.2f} | {} | {}{:.3f} |\n", m.label,
        seeds ? seeds_cell(m) + " | " : "", first.ranks, schedules ? first.schedule + " | " : "", first.epochs,
        first.steps, percent_cell(m.values(&SummaryRow::final_accuracy)),
        percent_cell(m.values(&SummaryRow::best_accuracy)), one ? fmt::format(" ({})", first.best_epoch) : "", rates,
        time_cell(m), number_cell(rate, 0), base_rate > 0 ? fmt::format("{:.2f}x", stats::mean(rate) / base_rate) : "-",
        stats::mean(m.values(&SummaryRow::step_ms)), 100 * stats::mean(m.values(&SummaryRow::exposed_share)),
        stats::mean(m.values(&SummaryRow::bits_per_value)), megabytes(&SummaryRow::bytes_sent_per_step),
        schedules ? megabytes(&SummaryRow::bytes_per_exchange) + " | " : "",
        stats::mean(m.values(&SummaryRow::fraction_quantized)));
  }
  std::string unfinished;
  for (const MethodSummary& m : methods)
    if (m.runs.empty()) unfinished += (unfinished.empty() ? "" : ", ") + m.label;
  if (!unfinished.empty()) s += fmt::format("\nNo finished run (not in the table): {}.\n", unfinished);
  return s;
}

std::string interval_table(const std::vector<MethodSummary>& methods, double target) {
  if (std::none_of(methods.begin(), methods.end(), [](const MethodSummary& m) { return m.runs.size() >= 2; }))
    return "";
  const bool error_rates = any_error_rates(methods);
  std::string s = fmt::format(
      "| method | seeds | final accuracy | best accuracy | {}time to {} | samples/s |\n|---|---|---|---|{}---|---|\n",
      error_rates ? "final CER | final WER | " : "", percent(target), error_rates ? "---|---|" : "");
  for (const MethodSummary& m : methods) {
    if (m.runs.empty()) continue;
    const std::vector<double> times = m.values(&SummaryRow::time_to_target_s);
    std::string time = interval_cell(times, false, 1);
    if (time != "-" && time != "one seed: none") time += " s";
    if (!times.empty() && times.size() < m.runs.size())
      time += fmt::format(" ({} of {} seeds)", times.size(), m.runs.size());
    s += fmt::format("| {} | {} | {} | {} | {}{} | {} |\n", m.label, seeds_cell(m),
                     interval_cell(m.values(&SummaryRow::final_accuracy), true, 2),
                     interval_cell(m.values(&SummaryRow::best_accuracy), true, 2),
                     error_rates ? fmt::format("{} | {} | ", interval_cell(m.values(&SummaryRow::final_cer), true, 2),
                                               interval_cell(m.values(&SummaryRow::final_wer), true, 2))
                                 : "",
                     times.empty() ? "not reached" : time,
                     interval_cell(m.values(&SummaryRow::samples_per_s), false, 0));
  }
  return s;
}

std::string baseline_findings(const std::vector<MethodSummary>& methods, const std::string& baseline) {
  const MethodSummary* base = nullptr;
  for (const MethodSummary& m : methods)
    if (m.label == baseline && !m.runs.empty()) base = &m;
  if (base == nullptr)
    return fmt::format("The baseline, {}, has no finished run: no speedups or differences from it can be given.\n",
                       baseline);
  std::string s;
  if (std::all_of(methods.begin(), methods.end(), [](const MethodSummary& m) { return m.runs.size() <= 1; }))
    s += "One seed per method: no confidence interval or test can be given, so a difference of a point or so may be "
         "seed-to-seed noise. Run with `--seeds 3` (or more) for intervals and tests.\n\n";
  if (!base->complete())
    s += fmt::format("The baseline finished {} of its {} seeds; its figures are over those.\n\n", base->runs.size(),
                     base->seeds_asked());
  struct Figure {
    const char* name;
    std::optional<double> SummaryRow::*optional_field;
    double SummaryRow::*field;
    bool higher_is_better;
  };
  // Sequence tasks are judged by their error rates; classification by top-1 accuracy.
  const std::vector<Figure> figures =
      any_error_rates(methods) ? std::vector<Figure>{{"final CER", &SummaryRow::final_cer, nullptr, false},
                                                     {"final WER", &SummaryRow::final_wer, nullptr, false}}
                               : std::vector<Figure>{{"final accuracy", nullptr, &SummaryRow::final_accuracy, true}};
  const double base_rate = stats::mean(base->values(&SummaryRow::samples_per_s));
  for (const MethodSummary& m : methods) {
    if (&m == base || m.runs.empty()) continue;
    std::string line = fmt::format("- **{}**", m.label);
    if (!m.complete()) line += fmt::format(" (on {} of its {} seeds)", m.runs.size(), m.seeds_asked());
    line += ": ";
    for (const Figure& f : figures) {
      const auto values = [&](const MethodSummary& x) {
        return f.field ? x.values(f.field) : x.values(f.optional_field);
      };
      const std::string sentence = difference_sentence(f.name, f.higher_is_better, values(m), values(*base), baseline);
      if (!sentence.empty()) line += sentence + "; ";
    }
    const double rate = stats::mean(m.values(&SummaryRow::samples_per_s));
    line += base_rate > 0 ? fmt::format("{:.2f}x {}'s samples/s.\n", rate / base_rate, baseline)
                          : std::string("no samples/s to compare.\n");
    s += line;
  }
  return s;
}

}  // namespace qtrain::cli
