// The report of a `qtrain compare` sweep: report.md (a Markdown table of what each method cost in
// accuracy and saved in time) and plots drawn by gnuplot (PNG and SVG): test accuracy vs epoch,
// training loss vs wall-clock time, a stacked bar of the time per step in each phase, and the bytes on
// the wire per step; for sequence tasks (CTC) also the test character and word error rates vs epoch,
// with their columns in the table. The numbers come from RunRecord; gnuplot only draws the data files written here.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tools/qtrain/run_record.h"

namespace qtrain::cli {

struct SummaryRow {
  std::string label;
  int ranks = 1;
  int64_t epochs = 0;  // completed epochs
  int64_t steps = 0;   // optimizer steps in all: more than epochs x steps per epoch when train.max_steps
                       // ended the run in a partial epoch
  double final_accuracy = 0, best_accuracy = 0;
  int64_t best_epoch = 0;
  std::optional<double> time_to_target_s;  // wall_time_s of the first evaluation at or above the target
  double samples_per_s = 0;                // all steps: sum(steps) / sum(steps / samples_per_s of the row)
  std::optional<double> speedup;           // samples_per_s over the baseline's (fp32)
  double bits_per_value = 0;               // payload bits per gradient value, headers included
  double fraction_quantized = 0;
  double step_ms = 0;                      // the training loop's time per step
  double bytes_sent_per_step = 0;          // measured, per rank (0 in a world of one)
  // Sequence tasks: test character / word error rate of the last epoch and the lowest CER.
  std::optional<double> final_cer, final_wer, best_cer;
  int64_t best_cer_epoch = 0;
};

SummaryRow summarize(const RunRecord& run, double target, const RunRecord* baseline);
std::string markdown_table(const std::vector<SummaryRow>& rows, double target);

struct ReportOptions {
  double target = 0.97;
  std::string command;         // the command that produced the sweep, shown above the table
  std::string baseline = "fp32";
  std::string gnuplot = "gnuplot";  // empty: write data files and the script, do not run it
};

// Writes out_dir/report.md, out_dir/data/*.dat, out_dir/plots.gp and (through gnuplot) the images
// accuracy, loss_time, phases, exchange and bytes (and cer, wer for sequence tasks) as .png and .svg. Returns a warning ("" if none), e.g. when
// gnuplot is missing: the table is still written.
std::string write_report(const std::vector<RunRecord>& runs, const std::string& out_dir, const ReportOptions& options);

// A label as a file name: "qsgd:bits=4" -> "qsgd_bits4".
std::string label_to_filename(const std::string& label);

}  // namespace qtrain::cli
