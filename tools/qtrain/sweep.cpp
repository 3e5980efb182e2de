// Sweep bookkeeping (see sweep.h).
#include "tools/qtrain/sweep.h"

#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>
#include <algorithm>
#include <set>

#include "framework/core/check.h"
#include "framework/core/config_node.h"
#include "framework/core/file_io.h"
#include "tools/qtrain/method_list.h"
#include "tools/qtrain/report.h"
#include "tools/qtrain/run_record.h"

namespace qtrain::cli {
namespace fs = std::filesystem;

std::vector<Variant> parse_variants(const std::string& methods) {
  // The same parser as bench-quant's --methods: unknown names and bad parameters fail here, before
  // anything runs, with the message of the config parser.
  const std::vector<MethodChoice> choices = parse_method_list(methods);
  std::vector<Variant> out;
  std::set<std::string> folders;
  for (const MethodChoice& c : choices) {
    Variant v;
    v.label = c.label;
    v.folder = label_to_filename(c.label);
    if (!folders.insert(v.folder).second) input_error("--methods: '{}' is given twice", c.label);
    size_t at = 0;
    bool first = true;
    while (at <= c.label.size()) {
      const size_t colon = c.label.find(':', at);
      const std::string part = c.label.substr(at, colon == std::string::npos ? std::string::npos : colon - at);
      at = colon == std::string::npos ? c.label.size() + 1 : colon + 1;
      v.overrides.push_back(first ? "quantization.method=" + part : "quantization." + part);
      first = false;
    }
    out.push_back(std::move(v));
  }
  return out;
}

YAML::Node load_sweep_file(const std::string& path) {
  const std::optional<std::string> text = read_whole_file(path);
  if (!text) input_error("{}: cannot read: cannot open the file", path);
  try {
    return load_yaml(*text);
  } catch (const YAML::ParserException& e) {
    input_error("{}:{}:{}: YAML syntax error: {}", path, e.mark.line + 1, e.mark.column + 1, e.msg);
  } catch (const YAML::Exception& e) {
    input_error("{}: cannot read: {}", path, e.what());
  }
}

std::string sweep_string(const YAML::Node& map, const std::string& key, const std::string& path) {
  const YAML::Node v = map.IsMap() ? map[key] : YAML::Node();
  if (!v.IsDefined() || !v.IsScalar())
    input_error("{}{}: expected '{}' with a string value, as `qtrain compare` writes it", path,
                map.Mark().line >= 0 ? fmt::format(":{}:{}", map.Mark().line + 1, map.Mark().column + 1) : "", key);
  return v.Scalar();
}

const char* run_state_name(RunState state) {
  switch (state) {
    case RunState::absent: return "new";
    case RunState::unfinished: return "unfinished";
    case RunState::finished: return "finished";
    case RunState::stale: return "stale";
  }
  return "?";
}

std::string RunLength::str() const {
  const std::string e = fmt::format("{} epoch{}", epochs, epochs == 1 ? "" : "s");
  if (max_steps <= 0) return e;
  return fmt::format("{} or {} step{} (train.max_steps), whichever comes first", e, max_steps, max_steps == 1 ? "" : "s");
}

RunState run_state(const std::string& run_dir, const std::string& command, const RunLength& length) {
  if (!fs::exists(run_dir)) return RunState::absent;
  const fs::path marker = fs::path(run_dir) / "compare.done";
  if (!fs::exists(marker)) return RunState::unfinished;
  std::string recorded;
  try {
    recorded = sweep_string(load_sweep_file(marker.string()), "command", marker.string());
  } catch (const InputError&) {
    return RunState::unfinished;  // a marker we cannot read proves nothing
  }
  if (run_identity(recorded) != run_identity(command)) return RunState::stale;
  try {
    const std::vector<MetricsRecord> rows = read_metrics_csv((fs::path(run_dir) / "metrics.csv").string());
    if (!length.reached_by(rows.back())) return RunState::unfinished;
  } catch (const InputError&) {
    return RunState::unfinished;
  }
  return RunState::finished;
}

std::string run_identity(const std::string& command) {
  std::vector<std::string> words = shell_split(command);
  const auto train = std::find(words.begin(), words.end(), "train");
  if (train != words.begin() && train != words.end()) words.erase(train - 1);
  // How progress is shown changes nothing in a run (compare sets output.progress=lines after the
  // user's flags anyway), so a sweep resumed with or without --set output.progress=none reuses its runs.
  std::vector<std::string> kept;
  for (std::size_t i = 0; i < words.size(); ++i) {
    if (words[i] == "--set" && i + 1 < words.size() && words[i + 1].rfind("output.progress=", 0) == 0) {
      ++i;
      continue;
    }
    kept.push_back(words[i]);
  }
  return shell_join(kept);
}

std::string set_aside(const std::string& sweep_dir, const std::string& run_dir) {
  const fs::path replaced = fs::path(sweep_dir) / "replaced";
  std::error_code ec;
  fs::create_directories(replaced, ec);
  if (ec) input_error("{}: cannot create the folder for replaced runs: {}", replaced.string(), ec.message());
  const std::string folder = fs::path(run_dir).filename().string();
  for (int n = 1;; ++n) {
    const fs::path to = replaced / fmt::format("{}.{}", folder, n);
    if (fs::exists(to, ec) || fs::is_symlink(to, ec)) continue;
    fs::rename(run_dir, to, ec);
    if (ec) input_error("{}: cannot move the replaced run to {}: {}", run_dir, to.string(), ec.message());
    return to.string();
  }
}

void write_marker(const std::string& run_dir, const std::string& label, const std::string& command, double wall_s) {
  YAML::Emitter e;
  e << YAML::BeginMap << YAML::Key << "label" << YAML::Value << label << YAML::Key << "command" << YAML::Value
    << command << YAML::Key << "wall_s" << YAML::Value << wall_s << YAML::EndMap;
  write_file_atomically((fs::path(run_dir) / "compare.done").string(), std::string(e.c_str()) + "\n");
}

// The finished runs of a sweep folder, in the order of its sweep.yaml (else by folder name).
std::vector<RunRecord> load_finished_runs(const std::string& sweep_dir) {
  const fs::path dir(sweep_dir);
  std::vector<std::pair<std::string, std::string>> order;  // folder, label
  const fs::path sweep = dir / "sweep.yaml";
  if (fs::exists(sweep)) {
    const YAML::Node node = load_sweep_file(sweep.string());
    const YAML::Node variants = node.IsMap() ? node["variants"] : YAML::Node();
    if (!variants.IsDefined() || !variants.IsSequence())
      input_error("{}: expected 'variants' with a list of {{folder, label}}, as `qtrain compare` writes it",
                  sweep.string());
    for (const YAML::Node& v : variants) {
      const std::string folder = sweep_string(v, "folder", sweep.string());
      // The folder is a name under runs/, never a path that leads elsewhere.
      if (folder.empty() || folder.find('/') != std::string::npos || folder == "." || folder == "..")
        input_error("{}: variant folder '{}' must be a folder name under runs/", sweep.string(), folder);
      order.emplace_back(folder, sweep_string(v, "label", sweep.string()));
    }
  } else if (fs::is_directory(dir / "runs")) {
    std::vector<fs::path> folders;
    for (const auto& e : fs::directory_iterator(dir / "runs"))
      if (e.is_directory()) folders.push_back(e.path());
    std::sort(folders.begin(), folders.end());
    for (const fs::path& f : folders) {
      std::string label = f.filename().string();
      const std::string marker = (f / "compare.done").string();
      if (fs::exists(marker)) label = sweep_string(load_sweep_file(marker), "label", marker);
      order.emplace_back(f.filename().string(), label);
    }
  }
  std::vector<RunRecord> runs;
  for (const auto& [folder, label] : order) {
    const fs::path run = dir / "runs" / folder;
    if (!fs::exists(run / "compare.done")) continue;  // unfinished: not reported
    runs.push_back(load_run(run.string(), label));
  }
  if (runs.empty())
    input_error("{}: no finished runs (expected DIR/runs/<method>/ with compare.done, as `qtrain compare` writes)",
                dir.string());
  return runs;
}


std::string shell_join(const std::vector<std::string>& argv) {
  std::string out;
  for (const std::string& a : argv) {
    if (!out.empty()) out += ' ';
    const bool plain = !a.empty() && a.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                                                         "_-+=./:,@%") == std::string::npos;
    if (plain) {
      out += a;
      continue;
    }
    out += '\'';
    for (char c : a) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    out += '\'';
  }
  return out;
}

std::vector<std::string> shell_split(const std::string& line) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false, quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '\'') quoted = false;
      else word += c;
    } else if (c == '\'') {
      quoted = in_word = true;
    } else if (c == '\\' && i + 1 < line.size()) {
      word += line[++i];  // the \' of an escaped quote
      in_word = true;
    } else if (c == ' ') {
      if (in_word) words.push_back(std::move(word));
      word.clear();
      in_word = false;
    } else {
      word += c;
      in_word = true;
    }
  }
  if (in_word) words.push_back(std::move(word));
  return words;
}

}  // namespace qtrain::cli
