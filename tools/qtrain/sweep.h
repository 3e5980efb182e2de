// The bookkeeping of a `qtrain compare` sweep, apart from running processes: which variants the
// --methods list names (and the config overrides each one means), where each run lives, and whether a
// run directory holds a finished run that can be reused.
//
//   DIR/runs/<folder>/            the run directory of one variant (output.dir of its training)
//   DIR/runs/<folder>/seed<N>/    the same, one per seed, in a sweep run with --seeds
//   DIR/runs/<folder>/compare.done  written atomically after the training exited successfully having
//                                 reached its length (RunLength) in metrics.csv; holds the exact
//                                 training command. A run without it is unfinished (interrupted):
//                                 rerun or resumed.
//   DIR/replaced/<folder>[.seed<S>].<N>/  a run that had to be started again (another command, or unfinished
//                                 without --resume) is moved here, never deleted: hours of training
//                                 are not lost to a changed flag
//   DIR/report/                   report.md and the plots
#pragma once

#include <yaml-cpp/yaml.h>

#include <optional>
#include <string>
#include <vector>

#include "tools/qtrain/run_record.h"

namespace qtrain::cli {

struct Variant {
  std::string label;                   // as given: "qsgd:bits=4"
  std::string folder;                  // "qsgd_bits4"
  std::vector<std::string> overrides;  // {"quantization.method=qsgd", "quantization.bits=4"}
};

// Parses and validates --methods (unknown methods and bad parameters are InputErrors that list what
// is allowed; duplicates are errors too).
std::vector<Variant> parse_variants(const std::string& methods);

// --baseline: one method entry, parsed as --methods entries are. When `variants` holds it already
// (the same folder name), returns that variant's label; otherwise inserts it first and returns its
// label. InputError (naming --baseline and the known methods) for an unknown method, a bad parameter
// or more than one entry.
std::string add_baseline(std::vector<Variant>& variants, const std::string& baseline);

// --seeds: "N" (N >= 1) means seeds 1..N; "a,b,c" those seeds (whole numbers >= 0, as the config's
// `seed`, no repeats). InputError naming --seeds otherwise.
std::vector<int64_t> parse_seeds(const std::string& text);

// The folder under DIR/runs/ of one run: "<folder>" in a sweep without --seeds, "<folder>/seed<N>" with.
std::string run_folder(const std::string& variant_folder, std::optional<int64_t> seed);

// How long a run is meant to train: train.epochs, or fewer steps when train.max_steps stops it first.
struct RunLength {
  int64_t epochs = 0;
  int64_t max_steps = 0;  // 0: no step limit
  // Whether a run whose last metrics row is `last` got there (a run stopped by max_steps ends with a
  // row of its last step, in a partial epoch).
  bool reached_by(const MetricsRecord& last) const {
    return last.epoch >= epochs || (max_steps > 0 && last.step >= max_steps);
  }
  // "2 epochs", or "1 epoch or 100 steps (train.max_steps), whichever comes first".
  std::string str() const;
};

enum class RunState {
  absent,      // no run directory yet
  unfinished,  // started, never completed (no marker, or metrics.csv short of its length)
  finished,    // marker present, same run identity, its whole length in metrics.csv: reuse it
  stale,       // finished, but with another run identity (config, epochs, ranks, ...): rerun
};
const char* run_state_name(RunState state);

// The state of `run_dir` for a training launched with `command` (argv joined) that must reach `length`.
// Commands are compared by run_identity, so a rebuilt or moved qtrain binary reuses finished runs.
RunState run_state(const std::string& run_dir, const std::string& command, const RunLength& length);

// What makes two training commands the same run: the command without the path of the qtrain binary
// (the word before `train`), i.e. the launcher (ranks, netbed), the config and every --set except
// output.progress (how progress is shown changes nothing in the run).
std::string run_identity(const std::string& command);

// Moves run directory `run_dir` to `sweep_dir`/replaced/<folder>.<N> (<folder>.seed<S>.<N> for a run
// of one seed; the first free N from 1) and
// returns the new path; an InputError naming both paths when it cannot.
std::string set_aside(const std::string& sweep_dir, const std::string& run_dir);

// Writes run_dir/compare.done atomically (write to a temporary file, then rename).
void write_marker(const std::string& run_dir, const std::string& label, const std::string& command, double wall_s);

// A sweep's own YAML file (sweep.yaml, compare.done); unreadable YAML is an InputError naming the file.
YAML::Node load_sweep_file(const std::string& path);
// The string value of `key` in mapping `map` read from `path`; an InputError when absent or not a string.
std::string sweep_string(const YAML::Node& map, const std::string& key, const std::string& path);

// What a sweep folder holds: its finished runs (with compare.done), in the order of its sweep.yaml
// (else by folder name) and, for each method, of its seeds; and what the sweep asked for, so that a
// report can name what did not finish. InputError when there are no finished runs.
struct SweepRecord {
  std::vector<RunRecord> runs;
  std::vector<std::string> labels;  // every method of sweep.yaml, finished or not
  std::vector<int64_t> seeds;       // --seeds; empty: one run per method, with the config's seed
  std::string baseline;             // --baseline's label; empty in a sweep.yaml written before --baseline
};
SweepRecord load_sweep(const std::string& sweep_dir);
// load_sweep(sweep_dir).runs
std::vector<RunRecord> load_finished_runs(const std::string& sweep_dir);

// argv as one shell-quoted line (the command recorded in the marker and shown in the report).
std::string shell_join(const std::vector<std::string>& argv);
// The inverse of shell_join: the words of a line it wrote.
std::vector<std::string> shell_split(const std::string& line);

}  // namespace qtrain::cli
