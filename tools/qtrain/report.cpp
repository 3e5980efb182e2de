// report.md and the gnuplot plots of a sweep (see report.h).
#include "tools/qtrain/report.h"

#include <fmt/format.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "framework/core/check.h"
#include "framework/core/file_io.h"

namespace qtrain::cli {
namespace fs = std::filesystem;
namespace {

void write_text(const fs::path& path, const std::string& text) { write_file_atomically(path.string(), text); }

std::string percent(double fraction) { return fmt::format("{:.2f}%", 100 * fraction); }

// The phases of the training loop's wall clock, in the order they are stacked.
struct StackPart {
  const char* title;
  Phase phase;
};
constexpr StackPart kLoopParts[] = {{"data", Phase::data},
                                    {"forward", Phase::forward},
                                    {"backward", Phase::backward},
                                    {"optimizer", Phase::optimizer}};

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

// The common preamble of every plot: the same look in PNG and SVG.
std::string plot_block(const std::string& name, const std::string& settings, const std::string& plot) {
  std::string s;
  for (const char* term : {"png", "svg"}) {
    s += std::string(term) == "png" ? "set terminal pngcairo noenhanced size 900,540 font 'sans,10'\n"
                                    : "set terminal svg noenhanced size 900,540 font 'sans,10'\n";
    s += fmt::format("set output '{}.{}'\n", name, term);
    s += "reset session\n" + settings + plot + "\n";
  }
  return s;
}

// Whether any run is a sequence task (has test CER / WER): then the table and plots show them.
bool any_error_rates(const std::vector<SummaryRow>& rows) {
  return std::any_of(rows.begin(), rows.end(), [](const SummaryRow& r) { return r.best_cer.has_value(); });
}

}  // namespace

std::string label_to_filename(const std::string& label) {
  std::string out;
  for (char c : label) {
    if (c == ':' || c == ',' || c == '/' || c == ' ') out += '_';
    else if (c == '=') continue;
    else out += c;
  }
  return out.empty() ? "run" : out;
}

SummaryRow summarize(const RunRecord& run, double target, const RunRecord* baseline) {
  QT_CHECK(!run.rows.empty(), "summarize: {} has no metrics rows", run.dir);
  SummaryRow s;
  s.label = run.label;
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
  if (baseline != nullptr) {
    const SummaryRow b = summarize(*baseline, target, nullptr);
    if (b.samples_per_s > 0) s.speedup = s.samples_per_s / b.samples_per_s;
  }
  s.bits_per_value = run.bits_per_value();
  s.fraction_quantized = run.fraction_quantized;
  s.step_ms = 1e3 * run.measured_step_s();
  s.bytes_sent_per_step = run.rows.back().bytes_sent_per_step;
  if (run.rows.back().has_error_rates()) {
    s.final_cer = run.rows.back().test_cer;
    s.final_wer = run.rows.back().test_wer;
  }
  return s;
}

std::string markdown_table(const std::vector<SummaryRow>& rows, double target) {
  // The error-rate columns appear when any run is a sequence task; "-" for a run without them.
  const bool error_rates = any_error_rates(rows);
  auto rate = [](const std::optional<double>& v) { return v ? percent(*v) : std::string("-"); };
  std::string s = fmt::format(
      "| method | ranks | epochs (steps) | final accuracy | best accuracy (epoch) | {}time to {} | samples/s | speedup over "
      "fp32 | ms per step | bits per value | sent per step per rank | fraction quantized |\n"
      "|---|---|---|---|---|{}---|---|---|---|---|---|---|\n",
      error_rates ? "final CER | final WER | best CER (epoch) | " : "", percent(target), error_rates ? "---|---|---|" : "");
  for (const SummaryRow& r : rows) {
    const std::string rates =
        !error_rates ? ""
        : r.best_cer ? fmt::format("{} | {} | {} ({}) | ", rate(r.final_cer), rate(r.final_wer), rate(r.best_cer), r.best_cer_epoch)
                     : "- | - | - | ";
    s += fmt::format("| {} | {} | {} ({}) | {} | {} ({}) | {}{} | {:.0f} | {} | {:.1f} | {:.2f} | {} | {:.3f} |\n", r.label,
                     r.ranks, r.epochs, r.steps, percent(r.final_accuracy), percent(r.best_accuracy), r.best_epoch, rates,
                     r.time_to_target_s ? fmt::format("{:.1f} s", *r.time_to_target_s) : "not reached",
                     r.samples_per_s, r.speedup ? fmt::format("{:.2f}x", *r.speedup) : "-", r.step_ms,
                     r.bits_per_value,
                     r.ranks > 1 ? fmt::format("{:.3f} MB", r.bytes_sent_per_step / 1e6) : "- (one rank)",
                     r.fraction_quantized);
  }
  return s;
}

std::string write_report(const std::vector<RunRecord>& runs, const std::string& out_dir, const ReportOptions& options) {
  if (runs.empty()) input_error("report: no finished runs to report in {}", out_dir);
  const fs::path out(out_dir);
  std::error_code ec;
  fs::create_directories(out / "data", ec);
  if (ec) input_error("{}: cannot create the report folder: {}", (out / "data").string(), ec.message());

  const RunRecord* baseline = nullptr;
  for (const RunRecord& r : runs)
    if (r.label == options.baseline) baseline = &r;
  std::vector<SummaryRow> rows;
  for (const RunRecord& r : runs) rows.push_back(summarize(r, options.target, baseline));

  // Data files for gnuplot: one per run for the curves, one table each for the bars.
  std::string phases = "# method data forward backward optimizer exposed_comm encode communicate decode (ms per step)\n";
  std::string bytes = "# method MB_per_step_per_rank payload_MB\n";
  for (const RunRecord& r : runs) {
    const std::string base = label_to_filename(r.label);
    // CER and WER in percent, NaN (which gnuplot skips) for runs of classification tasks.
    std::string m = "# epoch test_accuracy_percent wall_s train_loss test_cer_percent test_wer_percent\n";
    for (const MetricsRecord& row : r.rows)
      m += fmt::format("{} {:.4f} {:.3f} {:.6f} {} {}\n", row.epoch, 100 * row.test_accuracy, row.wall_time_s,
                       row.train_loss, row.has_error_rates() ? fmt::format("{:.4f}", 100 * row.test_cer) : "NaN",
                       row.has_error_rates() ? fmt::format("{:.4f}", 100 * row.test_wer) : "NaN");
    write_text(out / "data" / (base + ".metrics.dat"), m);
    std::string c = "# wall_s step train_loss\n";
    if (r.curve.size() >= 2)
      for (const CurvePoint& p : r.curve) c += fmt::format("{:.3f} {} {:.6f}\n", p.wall_s, p.step, p.train_loss);
    else
      for (const MetricsRecord& row : r.rows) c += fmt::format("{:.3f} {} {:.6f}\n", row.wall_time_s, row.step, row.train_loss);
    write_text(out / "data" / (base + ".curve.dat"), c);

    const double steps = static_cast<double>(std::max<int64_t>(1, r.steps()));
    double exposed = 0;
    for (const MetricsRecord& row : r.rows) exposed += row.exposed_comm_s;
    const predict::StepProfile& p = r.profile;
    double comm = 0;
    for (const MetricsRecord& row : r.rows) comm += row.phase_s[static_cast<size_t>(Phase::communicate)];
    // Labels quoted: gnuplot reads "qsgd:bits=4" as one column and shows it as the bar's name.
    const std::string quoted = gnuplot_data_label(r.label);
    phases += fmt::format("{} {:.4f} {:.4f} {:.4f} {:.4f} {:.4f} {:.4f} {:.4f} {:.4f}\n", quoted, 1e3 * p.data_s,
                          1e3 * p.forward_s, 1e3 * p.backward_s, 1e3 * p.optimizer_s, 1e3 * exposed / steps,
                          1e3 * p.encode_s, 1e3 * comm / steps, 1e3 * p.decode_s);
    bytes += fmt::format("{} {:.6f} {:.6f}\n", quoted, r.rows.back().bytes_sent_per_step / 1e6, r.payload_bytes / 1e6);
  }
  write_text(out / "data" / "phases.dat", phases);
  write_text(out / "data" / "bytes.dat", bytes);

  // The gnuplot script: every run overlaid on the curves; one bar per run on the others.
  const bool error_rates = any_error_rates(rows);
  std::string acc_plot = "plot ", loss_plot = "plot ", cer_plot = "plot ", wer_plot = "plot ";
  for (size_t i = 0; i < runs.size(); ++i) {
    const std::string base = label_to_filename(runs[i].label);
    const std::string sep = i + 1 < runs.size() ? ", \\\n     " : "";
    acc_plot += fmt::format("'data/{}.metrics.dat' using 1:2 with linespoints lw 2 title {}{}", base,
                            gnuplot_quote(runs[i].label), sep);
    loss_plot += fmt::format("'data/{}.curve.dat' using 1:3 with linespoints lw 2 pt 7 ps 0.4 title {}{}", base,
                             gnuplot_quote(runs[i].label), sep);
    cer_plot += fmt::format("'data/{}.metrics.dat' using 1:5 with linespoints lw 2 title {}{}", base,
                            gnuplot_quote(runs[i].label), sep);
    wer_plot += fmt::format("'data/{}.metrics.dat' using 1:6 with linespoints lw 2 title {}{}", base,
                            gnuplot_quote(runs[i].label), sep);
  }
  std::string script = "# Generated by qtrain compare; regenerate with: gnuplot plots.gp (in this folder)\n";
  script += plot_block("accuracy",
                       "set title 'Test accuracy after each epoch'\nset xlabel 'epoch'\nset ylabel 'test accuracy (%)'\n"
                       "set key bottom right\nset grid\nset xtics 1\nset offsets 0.1, 0.1, 0, 0\n",
                       acc_plot);
  script += plot_block("loss_time",
                       "set title 'Training loss (running mean over the epoch) vs wall-clock time'\n"
                       "set xlabel 'wall-clock time (s)'\nset ylabel 'training loss'\nset logscale y\n"
                       "set key top right\nset grid\n",
                       loss_plot);
  if (error_rates) {
    const std::string settings = "set xlabel 'epoch'\nset key top right\nset grid\nset xtics 1\nset offsets 0.1, 0.1, 0, 0\n";
    script += plot_block("cer", "set title 'Test character error rate after each epoch (greedy CTC decoding)'\n"
                                "set ylabel 'CER (%)'\n" + settings, cer_plot);
    script += plot_block("wer", "set title 'Test word error rate after each epoch (greedy CTC decoding)'\n"
                                "set ylabel 'WER (%)'\n" + settings, wer_plot);
  }
  std::string stack_plot = "plot ";
  const char* stack_titles[] = {"data", "forward", "backward", "optimizer", "exposed communication"};
  for (int c = 0; c < 5; ++c)
    stack_plot += fmt::format("'data/phases.dat' using {}{} title '{}'{}", c + 2, c == 0 ? ":xtic(1)" : "",
                              stack_titles[c], c < 4 ? ", \\\n     " : "");
  std::string exchange_plot = "plot ";
  const char* exchange_titles[] = {"encode", "communicate", "decode"};
  for (int c = 0; c < 3; ++c)
    exchange_plot += fmt::format("'data/phases.dat' using {}{} title '{}'{}", c + 7, c == 0 ? ":xtic(1)" : "",
                                 exchange_titles[c], c < 2 ? ", \\\n     " : "");
  script += plot_block("phases",
                       "set title 'Training-loop time per step by phase (exposed communication = waited for after "
                       "backward)'\nset ylabel 'ms per step'\nset style data histograms\nset style histogram "
                       "rowstacked\nset style fill solid 0.8 border -1\nset boxwidth 0.6\nset key outside right\n"
                       "set xtics rotate by -30\nset bmargin 7\nset grid ytics\nset yrange [0:*]\n",
                       stack_plot);
  script += plot_block("exchange",
                       "set title 'Exchange-thread time per step (partly hidden under backward)'\nset ylabel 'ms per "
                       "step'\nset style data histograms\nset style histogram rowstacked\nset style fill solid 0.8 "
                       "border -1\nset boxwidth 0.6\nset key outside right\nset xtics rotate by -30\nset bmargin 7\n"
                       "set grid ytics\nset yrange [0:*]\n",
                       exchange_plot);
  script += plot_block("bytes",
                       "set title 'Gradient bytes per step: sent per rank (measured) and one replica''s payload'\n"
                       "set ylabel 'MB per step'\nset style data histograms\nset style histogram clustered gap 1\n"
                       "set style fill solid 0.8 border -1\nset key top right\nset xtics rotate by -30\n"
                       "set grid ytics\nset yrange [0:*]\n",
                       "plot 'data/bytes.dat' using 2:xtic(1) title 'sent per rank (measured)', "
                       "'' using 3 title 'payload of one replica (encoded gradient)'");
  write_text(out / "plots.gp", script);

  std::string md = "# qtrain compare report\n\n";
  if (!options.command.empty()) md += "```sh\n" + options.command + "\n```\n\n";
  md += markdown_table(rows, options.target);
  md += fmt::format(
      "\n- samples/s: over all training steps (evaluation excluded); speedup: samples/s over {}'s.\n"
      "- time to {}: wall-clock time (training and evaluation) at the first evaluation that reached it.\n"
      "- bits per value: size of one replica's encoded gradient (headers included) x 8 / gradient values.\n"
      "- sent per step per rank: bytes this rank put on the wire per step (ring allreduce counted as "
      "2(p-1)/p of the data).\n\n",
      options.baseline, percent(options.target));
  if (error_rates)
    md += "- CER / WER: character / word error rate of greedy CTC decoding on the test set (edit distance over the "
          "reference length).\n\n![test CER vs epoch](cer.svg)\n\n![test WER vs epoch](wer.svg)\n\n";
  md += "![test accuracy vs epoch](accuracy.svg)\n\n![training loss vs wall-clock time](loss_time.svg)\n\n"
        "![time per step by phase](phases.svg)\n\n![exchange time per step](exchange.svg)\n\n"
        "![bytes per step](bytes.svg)\n";
  write_text(out / "report.md", md);

  if (options.gnuplot.empty()) return "";
  const std::string command = fmt::format("cd '{}' && {} plots.gp > gnuplot.log 2>&1", out.string(), options.gnuplot);
  const int status = std::system(command.c_str());
  if (status != 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return fmt::format("gnuplot failed or is not installed (see {}/gnuplot.log; install gnuplot-nox): the table "
                       "is in report.md, the plots were not drawn",
                       out.string());
  std::error_code ignored;
  fs::remove(out / "gnuplot.log", ignored);
  return "";
}

}  // namespace qtrain::cli
