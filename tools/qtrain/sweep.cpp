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
#include "tools/qtrain/sync_schedule.h"

namespace qtrain::cli {
namespace fs = std::filesystem;

std::vector<Variant> parse_variants(const std::string& methods) {
  // An entry is a method with its parameters, optionally followed by '@' and a sync schedule
  // ("bf16@diloco:inner_steps=50"). The method part goes through bench-quant's parser: unknown names and
  // bad parameters fail here, before anything runs, with the message of the config parser.
  std::vector<std::string> entries, method_parts, schedules;
  for (const std::string& entry : split_on(methods, ',')) {
    if (entry.empty()) continue;
    const size_t at = entry.find('@');
    entries.push_back(entry);
    method_parts.push_back(entry.substr(0, at));
    schedules.push_back(at == std::string::npos ? "" : entry.substr(at + 1));
    if (at != std::string::npos && schedules.back().empty())
      input_error("--methods {}: expected a sync.type after '@' (e.g. bf16@diloco:inner_steps=50)", entry);
    if (method_parts.back().empty())
      input_error("--methods {}: expected a quantization method before '@' (e.g. bf16@diloco:inner_steps=50)", entry);
  }
  if (entries.empty()) input_error("--methods: the list is empty");
  std::vector<Variant> out;
  std::set<std::string> folders;
  for (size_t i = 0; i < entries.size(); ++i) {
    const MethodChoice c = parse_method_list(method_parts[i]).front();
    Variant v;
    v.label = entries[i];
    v.folder = label_to_filename(entries[i]);
    if (!folders.insert(v.folder).second) input_error("--methods: '{}' is given twice", entries[i]);
    bool first = true;
    for (const std::string& part : split_on(c.label, ':')) {
      v.overrides.push_back(first ? "quantization.method=" + part : "quantization." + part);
      first = false;
    }
    if (!schedules[i].empty())
      for (std::string& o : schedule_overrides(schedules[i], entries[i])) v.overrides.push_back(std::move(o));
    out.push_back(std::move(v));
  }
  return out;
}

std::string add_baseline(std::vector<Variant>& variants, const std::string& baseline) {
  if (baseline.find(',') != std::string::npos)
    input_error("--baseline {}: give one method (with its parameters, e.g. qsgd:bits=8), not a list", baseline);
  std::vector<Variant> parsed;
  try {
    parsed = parse_variants(baseline);
  } catch (const InputError& e) {
    // The method parser speaks of --methods; the entry came from --baseline.
    std::string message = e.what();
    if (message.rfind("--methods", 0) == 0) message.replace(0, 9, "--baseline");
    input_error("{}", message);
  }
  for (const Variant& v : variants)
    if (v.folder == parsed.front().folder) return v.label;
  variants.insert(variants.begin(), parsed.front());
  return parsed.front().label;
}

namespace {

constexpr const char* kSeedsExpected =
    "expected a count N >= 1 (seeds 1..N) or a comma-separated list of seeds (whole numbers >= 0), e.g. "
    "--seeds 3 or --seeds 1,2,3";

// A seed or a count of seeds: a whole number >= 0 written in digits (no sign, no exponent).
std::optional<int64_t> whole_number(const std::string& word) {
  if (word.empty() || word.size() > 18 || word.find_first_not_of("0123456789") != std::string::npos)
    return std::nullopt;
  return std::stoll(word);
}

}  // namespace

std::vector<int64_t> parse_seeds(const std::string& text) {
  constexpr int64_t kMaxCount = 1000;
  auto whole = [&](const std::string& word) {
    const std::optional<int64_t> v = whole_number(word);
    if (!v) input_error("--seeds {}: '{}' is not a whole number >= 0; {}", text, word, kSeedsExpected);
    return *v;
  };
  if (text.find(',') == std::string::npos) {
    const int64_t count = whole(text);
    if (count < 1 || count > kMaxCount)
      input_error("--seeds {}: a count of seeds must be in [1, {}]; {}", text, kMaxCount, kSeedsExpected);
    std::vector<int64_t> seeds;
    for (int64_t s = 1; s <= count; ++s) seeds.push_back(s);
    return seeds;
  }
  std::vector<int64_t> seeds;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    const std::string word = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    start = comma == std::string::npos ? text.size() + 1 : comma + 1;
    const int64_t seed = whole(word);
    if (std::find(seeds.begin(), seeds.end(), seed) != seeds.end())
      input_error("--seeds {}: seed {} is given twice", text, seed);
    seeds.push_back(seed);
  }
  return seeds;
}

std::string run_folder(const std::string& variant_folder, std::optional<int64_t> seed) {
  return seed ? fmt::format("{}/seed{}", variant_folder, *seed) : variant_folder;
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
  std::string e = fmt::format("{} epoch{}", epochs, epochs == 1 ? "" : "s");
  if (max_steps <= 0) return e;
  return fmt::format("{} or {} step{} (train.max_steps), whichever comes first", e, max_steps,
                     max_steps == 1 ? "" : "s");
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
  // runs/qsgd_bits4 -> replaced/qsgd_bits4.<N>; runs/qsgd_bits4/seed2 -> replaced/qsgd_bits4.seed2.<N>
  std::string folder = fs::path(run_dir).lexically_relative(fs::path(sweep_dir) / "runs").generic_string();
  if (folder.empty() || folder.rfind("..", 0) == 0) folder = fs::path(run_dir).filename().string();
  std::replace(folder.begin(), folder.end(), '/', '.');
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

std::vector<RunRecord> load_finished_runs(const std::string& sweep_dir) { return load_sweep(sweep_dir).runs; }

SweepRecord load_sweep(const std::string& sweep_dir) {
  const fs::path dir(sweep_dir);
  SweepRecord record;
  std::vector<std::pair<std::string, std::string>> order;  // folder, label
  const fs::path sweep = dir / "sweep.yaml";
  if (fs::exists(sweep)) {
    const YAML::Node node = load_sweep_file(sweep.string());
    if (node.IsMap() && node["baseline"]) record.baseline = sweep_string(node, "baseline", sweep.string());
    if (node.IsMap() && node["seeds"]) {
      const YAML::Node seeds = node["seeds"];
      if (!seeds.IsSequence() || seeds.size() == 0)
        input_error("{}: expected 'seeds' with a list of seeds, as `qtrain compare --seeds` writes it", sweep.string());
      for (const YAML::Node& s : seeds) {
        const std::optional<int64_t> seed = s.IsScalar() ? whole_number(s.Scalar()) : std::nullopt;
        if (!seed)
          input_error("{}:{}:{}: expected a seed (a whole number >= 0) in 'seeds'", sweep.string(), s.Mark().line + 1,
                      s.Mark().column + 1);
        record.seeds.push_back(*seed);
      }
    }
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
      record.labels.push_back(order.back().second);
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
      record.labels.push_back(label);
    }
  }
  for (const auto& [folder, label] : order) {
    std::vector<std::optional<int64_t>> seeds(record.seeds.begin(), record.seeds.end());
    if (seeds.empty()) seeds.push_back(std::nullopt);
    for (const std::optional<int64_t>& seed : seeds) {
      const fs::path run = dir / "runs" / run_folder(folder, seed);
      if (!fs::exists(run / "compare.done")) continue;  // unfinished: reported as missing, never averaged
      record.runs.push_back(load_run(run.string(), label));
    }
  }
  if (record.runs.empty())
    input_error("{}: no finished runs (expected DIR/runs/<method>/ with compare.done, as `qtrain compare` writes)",
                dir.string());
  return record;
}

std::string shell_join(const std::vector<std::string>& argv) {
  std::string out;
  for (const std::string& a : argv) {
    if (!out.empty()) out += ' ';
    const bool plain = !a.empty() && a.find_first_not_of(
                                         "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
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
      if (c == '\'')
        quoted = false;
      else
        word += c;
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
