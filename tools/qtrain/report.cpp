// report.md and the gnuplot plots of a sweep (see report.h).
#include "tools/qtrain/report.h"

#include <fmt/format.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "framework/core/check.h"
#include "framework/core/file_io.h"
#include "tools/qtrain/loss_curve.h"
#include "tools/qtrain/stats.h"

namespace qtrain::cli {
namespace fs = std::filesystem;
namespace {

void write_text(const fs::path& path, const std::string& text) { write_file_atomically(path.string(), text); }

std::string gnuplot_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

std::string gnuplot_data_label(const std::string& label) {
  std::string out = "\"";
  for (char c : label) out += c == '"' ? '\'' : c;
  return out + "\"";
}

}  // namespace

std::string label_to_filename(const std::string& label) {
  std::string out;
  for (char c : label) {
    if (c == ':' || c == ',' || c == '/' || c == ' ')
      out += '_';
    else if (c == '=')
      continue;
    else
      out += c;
  }
  return out.empty() ? "run" : out;
}

namespace {

std::string percent(double fraction) { return fmt::format("{:.2f}%", 100 * fraction); }

// One look per method, distinct for any number of methods: the Okabe-Ito palette (safe for the
// common colour-vision deficiencies; yellow last, the faintest on white), 13 point types and 4 dash
// types. Colour and point cycle with coprime periods (8 and 13), so no two of the first 104 methods
// share both; the dash type changes with every round of the palette.
constexpr const char* kColours[] = {"#0072B2", "#E69F00", "#009E73", "#D55E00",
                                    "#CC79A7", "#56B4E9", "#000000", "#F0E442"};
constexpr int kPoints[] = {7, 5, 9, 11, 13, 15, 6, 4, 8, 10, 12, 14, 1};
std::string colour_of(size_t i) { return kColours[i % std::size(kColours)]; }
std::string method_styles(size_t count) {
  std::string s;
  for (size_t i = 0; i < count; ++i)
    s += fmt::format("set style line {} lc rgb '{}' lw 2 pt {} ps 0.9 dt {}\n", i + 1, colour_of(i),
                     kPoints[i % std::size(kPoints)], i / std::size(kColours) % 4 + 1);
  return s;
}

// Every plot: the same look in PNG and SVG, the legend outside the data, to the right.
std::string plot_block(const std::string& name, const std::string& settings, const std::string& plot) {
  std::string s;
  for (const char* term : {"png", "svg"}) {
    s += std::string(term) == "png" ? "set terminal pngcairo noenhanced size 1000,560 font 'sans,10'\n"
                                    : "set terminal svg noenhanced size 1000,560 font 'sans,10'\n";
    s += fmt::format("set output '{}.{}'\n", name, term);
    s += "reset session\nset key outside right top vertical Left reverse\n" + settings + plot + "\n";
  }
  return s;
}

// min, mean and max of `v` (no NaN inside).
struct Spread {
  double mean = 0, min = 0, max = 0;
};
Spread spread_of(const std::vector<double>& v) {
  Spread s;
  if (v.empty()) return {NAN, NAN, NAN};
  s.min = *std::min_element(v.begin(), v.end());
  s.max = *std::max_element(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / static_cast<double>(v.size());
  return s;
}
std::string spread_cells(const std::vector<double>& v, double scale) {
  if (v.empty()) return "NaN NaN NaN";
  const Spread s = spread_of(v);
  return fmt::format("{:.4f} {:.4f} {:.4f}", scale * s.mean, scale * s.min, scale * s.max);
}

// Per epoch (the rows of the method's first run), the mean, min and max over its seeds of test
// accuracy, CER and WER (percent; NaN where no run has them) and the mean wall time.
std::string epochs_data(const std::vector<const RunRecord*>& runs) {
  std::string m =
      "# epoch accuracy_mean accuracy_min accuracy_max cer_mean cer_min cer_max wer_mean wer_min wer_max wall_s "
      "(percent; mean, min, max over the seeds)\n";
  for (size_t j = 0; j < runs.front()->rows.size(); ++j) {
    std::vector<double> accuracy, cer, wer, wall;
    for (const RunRecord* r : runs) {
      if (j >= r->rows.size()) continue;
      const MetricsRecord& row = r->rows[j];
      accuracy.push_back(row.test_accuracy);
      wall.push_back(row.wall_time_s);
      if (row.has_error_rates()) {
        cer.push_back(row.test_cer);
        wer.push_back(row.test_wer);
      }
    }
    m += fmt::format("{} {} {} {} {:.3f}\n", runs.front()->rows[j].epoch, spread_cells(accuracy, 100),
                     spread_cells(cer, 100), spread_cells(wer, 100), spread_of(wall).mean);
  }
  return m;
}

// The smoothed training loss at the steps every seed recorded: mean wall time, mean, min and max.
std::string loss_data(const std::vector<const RunRecord*>& runs, double half_life) {
  std::vector<std::vector<LossPoint>> curves;
  for (const RunRecord* r : runs) curves.push_back(smoothed_loss(*r, half_life));
  std::string c = fmt::format(
      "# wall_s_mean loss_mean loss_min loss_max step (training loss, exponential moving average over steps with a "
      "half-life of {:g} steps; mean, min, max over the seeds)\n",
      half_life);
  for (const LossPoint& p : curves.front()) {
    std::vector<double> wall, loss;
    for (const std::vector<LossPoint>& curve : curves) {
      const auto it = std::find_if(curve.begin(), curve.end(), [&](const LossPoint& q) { return q.step == p.step; });
      if (it == curve.end()) break;
      wall.push_back(it->wall_s);
      loss.push_back(it->loss);
    }
    if (loss.size() < curves.size()) continue;  // a step some seed did not record
    const Spread l = spread_of(loss);
    c += fmt::format("{:.3f} {:.6f} {:.6f} {:.6f} {}\n", spread_of(wall).mean, l.mean, l.min, l.max, p.step);
  }
  return c;
}

// Curves of every method: a band (min to max over the seeds, columns band_low:band_high) under the
// mean (column y), against column x of data/<method><suffix>.
std::string curve_plot(const std::vector<MethodSummary>& methods, const std::string& suffix, int x, int y, int band_low,
                       int band_high, const std::string& with, const std::string& options = "") {
  std::string bands, lines;
  for (size_t i = 0; i < methods.size(); ++i) {
    if (methods[i].runs.empty()) continue;
    const std::string file = fmt::format("'data/{}{}'", label_to_filename(methods[i].label), suffix);
    if (methods[i].runs.size() > 1)
      bands += fmt::format(
          "{} using {}:{}:{} with filledcurves fc rgb '{}' fs transparent solid 0.18 noborder notitle, \\\n     ", file,
          x, band_low, band_high, colour_of(i));
    lines += fmt::format("{}{} using {}:{} with {} ls {}{} title {}", lines.empty() ? "" : ", \\\n     ", file, x, y,
                         with, i + 1, options, gnuplot_quote(methods[i].label));
  }
  return "plot " + bands + lines;
}

// Bits per value against the task's metric (final accuracy, or final CER for sequence tasks): one
// point per method, the mean over its seeds with error bars of one standard deviation.
std::string tradeoff_data(const std::vector<MethodSummary>& methods, bool error_rates) {
  std::string t =
      fmt::format("# method bits_per_value {}_mean {}_sd (percent, over the seeds)\n",
                  error_rates ? "final_cer" : "final_accuracy", error_rates ? "final_cer" : "final_accuracy");
  for (const MethodSummary& m : methods) {
    if (m.runs.empty()) continue;
    const std::vector<double> v =
        error_rates ? m.values(&SummaryRow::final_cer) : m.values(&SummaryRow::final_accuracy);
    if (v.empty()) {
      t += fmt::format("{} {:.4f} NaN NaN\n", gnuplot_data_label(m.label), m.runs.front().bits_per_value);
      continue;
    }
    t += fmt::format("{} {:.4f} {:.4f} {:.4f}\n", gnuplot_data_label(m.label), m.runs.front().bits_per_value,
                     100 * stats::mean(v), 100 * stats::sample_sd(v));
  }
  return t;
}

// The runs of method m, in the order of its summary rows.
std::vector<const RunRecord*> runs_of(const std::vector<RunRecord>& runs, const MethodSummary& m) {
  std::vector<const RunRecord*> out;
  for (const SummaryRow& row : m.runs)
    for (const RunRecord& r : runs)
      if (r.label == m.label && r.seed == row.seed) {
        out.push_back(&r);
        break;
      }
  return out;
}

// Data files for gnuplot: per method its curves (mean and spread over its seeds), one table each
// for the bars (means over the seeds).
void write_data_files(const std::vector<RunRecord>& runs, const std::vector<MethodSummary>& methods,
                      const fs::path& out, double half_life, bool error_rates) {
  std::string phases =
      "# method data forward backward optimizer exposed_comm encode communicate decode (ms per step)\n";
  std::string bytes = "# method MB_per_step_per_rank payload_MB\n";
  for (const MethodSummary& m : methods) {
    if (m.runs.empty()) continue;
    const std::vector<const RunRecord*> its = runs_of(runs, m);
    const std::string base = label_to_filename(m.label);
    write_text(out / "data" / (base + ".epochs.dat"), epochs_data(its));
    write_text(out / "data" / (base + ".loss.dat"), loss_data(its, half_life));
    std::array<double, 8> phase_ms{};
    double sent = 0, payload = 0;
    for (const RunRecord* r : its) {
      const double steps = static_cast<double>(std::max<int64_t>(1, r->steps()));
      // The exchange thread's phases per training step, from the rows.
      double exposed = 0, encode = 0, comm = 0, decode = 0;
      for (const MetricsRecord& row : r->rows) {
        exposed += row.exposed_comm_s;
        encode += row.phase_s[static_cast<size_t>(Phase::encode)];
        comm += row.phase_s[static_cast<size_t>(Phase::communicate)];
        decode += row.phase_s[static_cast<size_t>(Phase::decode)];
      }
      const predict::StepProfile& p = r->profile;
      const double ms[] = {p.data_s,        p.forward_s,    p.backward_s, p.optimizer_s,
                           exposed / steps, encode / steps, comm / steps, decode / steps};
      for (size_t k = 0; k < phase_ms.size(); ++k) phase_ms[k] += 1e3 * ms[k] / static_cast<double>(its.size());
      sent += r->bytes_per_step() / static_cast<double>(its.size());
      payload += r->payload_bytes / static_cast<double>(its.size());
    }
    // Labels quoted: gnuplot reads "qsgd:bits=4" as one column and shows it as the bar's name.
    const std::string quoted = gnuplot_data_label(m.label);
    phases += quoted;
    for (double v : phase_ms) phases += fmt::format(" {:.4f}", v);
    phases += "\n";
    bytes += fmt::format("{} {:.6f} {:.6f}\n", quoted, sent / 1e6, payload / 1e6);
  }
  write_text(out / "data" / "phases.dat", phases);
  write_text(out / "data" / "bytes.dat", bytes);
  write_text(out / "data" / "tradeoff.dat", tradeoff_data(methods, error_rates));
}

// The plots over steps and epochs: accuracy, training loss against time, and CER / WER.
std::string curve_plots(const std::vector<MethodSummary>& methods, const std::string& styles,
                        const std::string& over_seeds, double half_life, bool error_rates) {
  std::string script;
  const std::string per_epoch = "set xlabel 'epoch'\nset grid\nset xtics 1\nset offsets 0.1, 0.1, 0, 0\n";
  script += plot_block("accuracy",
                       "set title 'Test accuracy (top-1) after each epoch" + over_seeds +
                           "'\nset ylabel 'test accuracy (%)'\n" + per_epoch + styles,
                       curve_plot(methods, ".epochs.dat", 1, 2, 3, 4, "linespoints"));
  script += plot_block("loss_time",
                       fmt::format("set title 'Training loss vs wall-clock time: moving average over steps, half-life "
                                   "{:g} steps{}'\nset xlabel 'wall-clock time (s)'\nset ylabel 'training loss'\n"
                                   "set logscale y\nset grid\n",
                                   half_life, over_seeds) +
                           styles,
                       curve_plot(methods, ".loss.dat", 1, 2, 3, 4, "linespoints", " pi 6"));
  if (error_rates) {
    script += plot_block("cer",
                         "set title 'Test character error rate, greedy CTC decoding" + over_seeds +
                             "'\nset ylabel 'CER (%)'\n" + per_epoch + styles,
                         curve_plot(methods, ".epochs.dat", 1, 5, 6, 7, "linespoints"));
    script += plot_block("wer",
                         "set title 'Test word error rate, greedy CTC decoding" + over_seeds +
                             "'\nset ylabel 'WER (%)'\n" + per_epoch + styles,
                         curve_plot(methods, ".epochs.dat", 1, 8, 9, 10, "linespoints"));
  }
  return script;
}

// Bits per value against the final accuracy (or CER), one point per method.
std::string tradeoff_plot(const std::vector<MethodSummary>& methods, const std::string& styles, bool seeds,
                          bool error_rates) {
  std::string plot = "plot ";
  size_t point = 0;
  for (size_t i = 0; i < methods.size(); ++i) {
    if (methods[i].runs.empty()) continue;
    plot += fmt::format("{}'data/tradeoff.dat' every ::{}::{} using 2:3:4 with yerrorbars ls {} ps 1.6 title {}",
                        point == 0 ? "" : ", \\\n     ", point, point, i + 1, gnuplot_quote(methods[i].label));
    ++point;
  }
  return plot_block(
      "tradeoff",
      fmt::format("set title 'Bits per gradient value on the wire vs {}{}'\nset xlabel 'bits per value (log scale)'\n"
                  "set ylabel '{}'\nset logscale x 2\nset grid\nset offsets graph 0.05, graph 0.05, graph 0.05, graph "
                  "0.05\n",
                  error_rates ? "final test CER" : "final test accuracy",
                  seeds ? " (error bars: one standard deviation over the seeds)" : "",
                  error_rates ? "final test CER (%, lower is better)" : "final test accuracy (%)") +
          styles,
      plot);
}

// The bar charts of a step: time by phase, the exchange thread's time, and bytes.
std::string bar_plots() {
  std::string stack_plot = "plot ";
  const char* stack_titles[] = {"data", "forward", "backward", "optimizer", "exposed communication"};
  for (int c = 0; c < 5; ++c)
    stack_plot += fmt::format("'data/phases.dat' using {}{} lc rgb '{}' title '{}'{}", c + 2, c == 0 ? ":xtic(1)" : "",
                              colour_of(static_cast<size_t>(c)), stack_titles[c], c < 4 ? ", \\\n     " : "");
  std::string exchange_plot = "plot ";
  const char* exchange_titles[] = {"encode", "communicate", "decode"};
  for (int c = 0; c < 3; ++c)
    exchange_plot +=
        fmt::format("'data/phases.dat' using {}{} lc rgb '{}' title '{}'{}", c + 7, c == 0 ? ":xtic(1)" : "",
                    colour_of(static_cast<size_t>(c)), exchange_titles[c], c < 2 ? ", \\\n     " : "");
  const std::string bars =
      "set style fill solid 0.8 border -1\nset boxwidth 0.6\nset xtics rotate by -30\n"
      "set bmargin 7\nset grid ytics\nset yrange [0:*]\n";
  std::string script;
  script += plot_block("phases",
                       "set title 'Training-loop time per step by phase (exposed communication = waited for after "
                       "backward)'\nset ylabel 'ms per step'\nset style data histograms\nset style histogram "
                       "rowstacked\n" +
                           bars,
                       stack_plot);
  script += plot_block("exchange",
                       "set title 'Exchange-thread time per step (partly hidden under backward)'\nset ylabel 'ms per "
                       "step'\nset style data histograms\nset style histogram rowstacked\n" +
                           bars,
                       exchange_plot);
  script +=
      plot_block("bytes",
                 "set title 'Bytes per step sent per rank (measured, over whole sync periods) and one replica''s "
                 "payload per exchange'\n"
                 "set ylabel 'MB'\nset style data histograms\nset style histogram clustered gap 1\n" +
                     bars,
                 fmt::format("plot 'data/bytes.dat' using 2:xtic(1) lc rgb '{}' title 'sent per rank (measured)', "
                             "'' using 3 lc rgb '{}' title 'payload of one replica per exchange'",
                             colour_of(0), colour_of(1)));
  return script;
}

// report.md: the command, the table, the notes on its columns, the intervals, the findings against
// the baseline and the plots.
std::string report_markdown(const std::vector<MethodSummary>& methods, const ReportOptions& options, bool seeds,
                            bool error_rates) {
  bool any_schedule = false;  // a run that does not exchange every step: the table has its schedule
  for (const MethodSummary& m : methods)
    for (const SummaryRow& r : m.runs) any_schedule = any_schedule || !r.per_step_schedule;
  std::string md = "# qtrain compare report\n\n";
  if (!options.command.empty()) md += "```sh\n" + options.command + "\n```\n\n";
  if (seeds)
    md +=
        "Cells with ± are the mean ± sample standard deviation over a method's seeds (the seeds column); the 95% "
        "confidence intervals and the tests against the baseline follow the table.\n\n";
  md += markdown_table(methods, options.target, options.baseline);
  md += fmt::format(
      "\n- samples/s: over all training steps (evaluation excluded); speedup: samples/s over {}'s (means over the "
      "seeds).\n"
      "- time to {}: wall-clock time (training and evaluation) at the first evaluation that reached it.\n"
      "- bits per value: size of one replica's encoded gradient (headers included) x 8 / gradient values.\n"
      "- waiting for the exchange: the share of the training loop's time per step that it waited for the "
      "exchange (exposed communication, after backward or after the optimizer step).\n"
      "- sent per step per rank: bytes this rank put on the wire per step (ring allreduce counted as "
      "2(p-1)/p of the data), averaged over whole sync periods: one exchange's bytes x the schedule's exchanges "
      "per step.\n",
      options.baseline, percent(options.target));
  if (any_schedule)
    md +=
        "- schedule: every step; DiLoCo H=inner_steps (with F=fragments tau=overlap for Streaming DiLoCo: F "
        "exchanges per H steps, each hidden behind up to tau steps); DeMo (one exchange per step).\n"
        "- sent per exchange per rank: the bytes of one exchange, what the link carries at once (with fragments the "
        "mean of their exchanges, which DiLoCo cuts to equal bytes).\n";
  if (error_rates)
    md +=
        "- CER / WER: character / word error rate of greedy CTC decoding on the test set (edit distance over the "
        "reference length).\n";
  const std::string intervals = interval_table(methods, options.target);
  if (!intervals.empty())
    md +=
        "\n## 95% confidence intervals over the seeds\n\nStudent t intervals of the mean: mean ± t(0.975, n-1) x "
        "sd / sqrt(n) over a method's n seeds.\n\n" +
        intervals;
  md += fmt::format("\n## Against the baseline: {}\n\n", options.baseline);
  md +=
      "Welch's t-test (two-sided, unequal variances) of the method's seeds against the baseline's; a difference "
      "counts as detected at p < 0.05. \"± h\" is the half-width of the difference's 95% confidence interval.\n\n";
  md += baseline_findings(methods, options.baseline);
  md += "\n";
  if (error_rates) md += "![test CER vs epoch](cer.svg)\n\n![test WER vs epoch](wer.svg)\n\n";
  md +=
      "![test accuracy vs epoch](accuracy.svg)\n\n![training loss vs wall-clock time](loss_time.svg)\n\n"
      "![bits per value vs accuracy](tradeoff.svg)\n\n"
      "![time per step by phase](phases.svg)\n\n![exchange time per step](exchange.svg)\n\n"
      "![bytes per step](bytes.svg)\n";
  return md;
}

// Draws the plots with gnuplot (none when options.gnuplot is empty); a warning if it failed.
std::string draw_plots(const fs::path& out, const std::string& gnuplot) {
  if (gnuplot.empty()) return "";
  const std::string command = fmt::format("cd '{}' && {} plots.gp > gnuplot.log 2>&1", out.string(), gnuplot);
  const int status = std::system(command.c_str());
  if (status != 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return fmt::format(
        "gnuplot failed or is not installed (see {}/gnuplot.log; install gnuplot-nox): the table "
        "is in report.md, the plots were not drawn",
        out.string());
  std::error_code ignored;
  fs::remove(out / "gnuplot.log", ignored);
  return "";
}

}  // namespace

std::string write_report(const std::vector<RunRecord>& runs, const std::string& out_dir, const ReportOptions& options) {
  if (runs.empty()) input_error("report: no finished runs to report in {}", out_dir);
  const fs::path out(out_dir);
  std::error_code ec;
  fs::create_directories(out / "data", ec);
  if (ec) input_error("{}: cannot create the report folder: {}", (out / "data").string(), ec.message());

  const std::vector<MethodSummary> methods = summarize_methods(runs, options.target, options.seeds, options.labels);
  bool error_rates = false;
  int64_t longest = 1;
  for (const RunRecord& r : runs) {
    error_rates |= r.rows.back().has_error_rates();
    longest = std::max(longest, r.steps());
  }
  const double half_life = default_half_life(longest);
  write_data_files(runs, methods, out, half_life, error_rates);

  const bool seeds =
      std::any_of(methods.begin(), methods.end(), [](const MethodSummary& m) { return m.runs.size() > 1; });
  const std::string over_seeds = seeds ? " (mean over the seeds; band: lowest to highest seed)" : "";
  const std::string styles = method_styles(methods.size());
  std::string script = "# Generated by qtrain compare; regenerate with: gnuplot plots.gp (in this folder)\n";
  script += curve_plots(methods, styles, over_seeds, half_life, error_rates);
  script += tradeoff_plot(methods, styles, seeds, error_rates);
  script += bar_plots();
  write_text(out / "plots.gp", script);
  write_text(out / "report.md", report_markdown(methods, options, seeds, error_rates));
  return draw_plots(out, options.gnuplot);
}

}  // namespace qtrain::cli
