// The report of a `qtrain compare` sweep: report.md (the tables and sentences of method_summary.h:
// what each method cost in accuracy and saved in time against the baseline, over its seeds) and
// plots drawn by gnuplot (PNG and SVG), one style per method: test accuracy vs epoch, the training
// loss (loss_curve.h) vs wall-clock time, bits per value vs accuracy, a stacked bar of the time per
// step in each phase, the exchange's time and the bytes on the wire per step; for sequence tasks
// (CTC) also the test character and word error rates vs epoch. Curves are means over the seeds with
// a band from the lowest to the highest. The numbers come from RunRecord; gnuplot only draws the data
// files written here.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tools/qtrain/method_summary.h"
#include "tools/qtrain/run_record.h"

namespace qtrain::cli {

struct ReportOptions {
  double target = 0.97;
  std::string command;              // the command that produced the sweep, shown above the table
  std::string baseline = "bf16";    // the label of the method every speedup and difference is against
  std::vector<int64_t> seeds;       // the sweep's --seeds (empty: one run per method)
  std::vector<std::string> labels;  // every method of the sweep, finished or not (empty: those of the runs)
  std::string gnuplot = "gnuplot";  // empty: write data files and the script, do not run it
};

// Writes out_dir/report.md, out_dir/data/*.dat, out_dir/plots.gp and (through gnuplot) the images
// accuracy, loss_time, tradeoff, phases, exchange and bytes (and cer, wer for sequence tasks) as .png
// and .svg. Returns a warning ("" if none), e.g. when gnuplot is missing: the table is still written.
std::string write_report(const std::vector<RunRecord>& runs, const std::string& out_dir, const ReportOptions& options);

// A label as a file name: "qsgd:bits=4" -> "qsgd_bits4".
std::string label_to_filename(const std::string& label);

}  // namespace qtrain::cli
