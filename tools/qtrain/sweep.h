// The bookkeeping of a `qtrain compare` sweep, apart from running processes: which variants the
// --methods list names (and the config overrides each one means), where each run lives, and whether a
// run directory holds a finished run that can be reused.
//
//   DIR/runs/<folder>/            the run directory of one variant (output.dir of its training)
//   DIR/runs/<folder>/compare.done  written atomically after the training exited successfully with all
//                                 its epochs in metrics.csv; holds the exact training command. A run
//                                 without it is unfinished (interrupted): rerun or resumed.
//   DIR/report/                   report.md and the plots
#pragma once

#include <yaml-cpp/yaml.h>

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

enum class RunState {
  absent,      // no run directory yet
  unfinished,  // started, never completed (no marker, or metrics.csv short of the epochs)
  finished,    // marker present, same command, all epochs in metrics.csv: reuse it
  stale,       // finished, but with another command (other config, epochs, ranks, ...): rerun
};
const char* run_state_name(RunState state);

// The state of `run_dir` for a training launched with `command` (argv joined) that must reach `epochs`.
RunState run_state(const std::string& run_dir, const std::string& command, int64_t epochs);

// Writes run_dir/compare.done atomically (write to a temporary file, then rename).
void write_marker(const std::string& run_dir, const std::string& label, const std::string& command, double wall_s);

// A sweep's own YAML file (sweep.yaml, compare.done); unreadable YAML is an InputError naming the file.
YAML::Node load_sweep_file(const std::string& path);
// The string value of `key` in mapping `map` read from `path`; an InputError when absent or not a string.
std::string sweep_string(const YAML::Node& map, const std::string& key, const std::string& path);

// The finished runs (with compare.done) of sweep folder `sweep_dir`, in the order of its sweep.yaml
// (else by folder name); InputError when there are none.
std::vector<RunRecord> load_finished_runs(const std::string& sweep_dir);

// argv as one shell-quoted line (the command recorded in the marker and shown in the report).
std::string shell_join(const std::vector<std::string>& argv);

}  // namespace qtrain::cli
