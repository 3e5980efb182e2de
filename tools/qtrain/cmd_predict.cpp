// `qtrain predict --from RUN_DIR|SWEEP_DIR [--gpus 2,4,...] [--bandwidth 1gbit,...] [--latency 5us]
//  [--check DIR]...`: the step-time model of predict_model.h applied to measured runs. Prints Markdown
// tables of predicted time per step and speedup over one replica per method, scale and bandwidth,
// which method is fastest where, and where quantization stops paying off. --check compares the
// prediction with runs measured at other world sizes (prediction error).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>

#include "framework/core/check.h"
#include "tools/qtrain/commands.h"
#include "tools/qtrain/predict_model.h"
#include "tools/qtrain/run_record.h"
#include "tools/qtrain/sweep.h"

namespace qtrain::cli {
namespace fs = std::filesystem;
namespace {

// A run directory (has metrics.csv) or a compare sweep folder (all its finished runs).
std::vector<RunRecord> load_runs(const std::string& path) {
  if (fs::exists(fs::path(path) / "metrics.csv") || !fs::exists(fs::path(path) / "runs")) {
    if (!fs::exists(fs::path(path) / "metrics.csv"))
      input_error("{}: no metrics.csv (not a run directory) and no runs/ folder (not a compare sweep)", path);
    std::string label = fs::path(path).filename().string();
    if (label.empty()) label = fs::path(path).parent_path().filename().string();
    return {load_run(path, label)};
  }
  SweepRecord sweep = load_sweep(path);
  // A sweep with --seeds has a run per method and seed: each is its own row.
  if (!sweep.seeds.empty())
    for (RunRecord& r : sweep.runs) r.label = fmt::format("{} seed {}", r.label, r.seed);
  return sweep.runs;
}

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t comma = list.find(',', start);
    const std::string item = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!item.empty()) out.push_back(item);
    start = comma == std::string::npos ? list.size() + 1 : comma + 1;
  }
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct PredictArgs {
  std::string from;
  std::string gpus = "2,4,8,16,32,96";
  std::string bandwidth = "1gbit,10gbit,100gbit";
  std::string latency = "5us";
  bool own_compute = false;
  std::vector<std::string> check;
};

void run_predict(const PredictArgs& a) {
  std::vector<RunRecord> runs = load_runs(a.from);
  std::vector<int> gpus;
  for (const std::string& g : split(a.gpus)) {
    char* end = nullptr;
    const long v = std::strtol(g.c_str(), &end, 10);
    if (*end != '\0' || v < 1 || v > 1000000) input_error("--gpus: expected positive integers, got '{}'", g);
    gpus.push_back(static_cast<int>(v));
  }
  if (gpus.empty()) input_error("--gpus: the list is empty");
  std::vector<double> bandwidths;
  for (const std::string& b : split(a.bandwidth)) bandwidths.push_back(predict::parse_bandwidth(b, "--bandwidth"));
  if (bandwidths.empty()) input_error("--bandwidth: the list is empty");
  const double latency = predict::parse_latency(a.latency, "--latency");

  // The methods share the model and batch: their compute differs only by measurement noise, so by
  // default every method gets the median compute of the runs (each keeps its own encode / decode).
  if (runs.size() > 1 && !a.own_compute) {
    std::vector<double> d, f, b, o;
    for (const RunRecord& r : runs) {
      d.push_back(r.profile.data_s);
      f.push_back(r.profile.forward_s);
      b.push_back(r.profile.backward_s);
      o.push_back(r.profile.optimizer_s);
    }
    for (RunRecord& r : runs) {
      r.profile.data_s = median(d);
      r.profile.forward_s = median(f);
      r.profile.backward_s = median(b);
      r.profile.optimizer_s = median(o);
    }
  }

  std::string out = fmt::format("# qtrain predict: {}\n\nMeasured inputs (per step):\n\n", a.from);
  out += "| method | measured on | compute ms (data+fwd+bwd+opt) | encode ms | decode ms | payload MB | bits per value | buckets |\n"
         "|---|---|---|---|---|---|---|---|\n";
  for (const RunRecord& r : runs)
    out += fmt::format("| {} | {} rank(s) | {:.2f} | {:.2f} | {:.2f} | {:.3f} | {:.2f} | {} |\n", r.label, r.ranks,
                       1e3 * r.profile.compute_s(), 1e3 * r.profile.encode_s, 1e3 * r.profile.decode_s,
                       r.payload_bytes / 1e6, r.bits_per_value(), r.profile.buckets.size());
  if (runs.size() > 1 && !a.own_compute) out += "\nCompute: the median over the runs (--own-compute to keep each run's).\n";

  const RunRecord* fp32 = nullptr;
  for (const RunRecord& r : runs)
    if (r.label == "fp32" || (fp32 == nullptr && r.method.rfind("fp32", 0) == 0)) fp32 = &r;

  for (double bw : bandwidths) {
    const predict::Network net{bw, latency};
    out += fmt::format("\n## {} per link, latency {:g} us\n\nTime per step in ms (speedup over one replica):\n\n| method |",
                       predict::format_bandwidth(bw), latency * 1e6);
    for (int p : gpus) out += fmt::format(" p={} |", p);
    out += "\n|---|";
    for (size_t i = 0; i < gpus.size(); ++i) out += "---|";
    out += "\n";
    std::map<int, std::pair<double, std::string>> best;  // p -> fastest
    for (const RunRecord& r : runs) {
      out += "| " + r.label + " |";
      for (int p : gpus) {
        const predict::StepPrediction s = predict::predict_step(r.profile, p, net);
        out += fmt::format(" {:.1f} ({:.1f}x) |", 1e3 * s.step_s, s.speedup);
        auto it = best.find(p);
        if (it == best.end() || s.step_s < it->second.first) best[p] = {s.step_s, r.label};
      }
      out += "\n";
    }
    out += "\nFastest:";
    for (int p : gpus) out += fmt::format(" p={}: {};", p, best[p].second);
    out.back() = '\n';
    if (fp32 == nullptr) continue;
    // Where a quantized method is slower than fp32: its extra encode + decode exceeds the exposed
    // communication it saves.
    for (const RunRecord& r : runs) {
      if (&r == fp32) continue;
      std::vector<std::string> losing;
      for (int p : gpus) {
        const predict::StepPrediction q = predict::predict_step(r.profile, p, net);
        const predict::StepPrediction f = predict::predict_step(fp32->profile, p, net);
        if (q.step_s < f.step_s) continue;
        losing.push_back(fmt::format("p={} (encode+decode {:.1f} ms vs {:.1f}; communication saved {:.1f} ms)", p,
                                     1e3 * (q.encode_s + q.decode_s), 1e3 * (f.encode_s + f.decode_s),
                                     1e3 * (f.communicate_s - q.communicate_s)));
      }
      if (losing.empty()) out += fmt::format("- {}: faster than fp32 at every scale here.\n", r.label);
      else if (losing.size() == gpus.size())
        out += fmt::format("- {}: does not pay off at this bandwidth (at {}).\n", r.label, losing.back());
      else {
        out += fmt::format("- {}: does not pay off at", r.label);
        for (const std::string& l : losing) out += " " + l + ";";
        out.back() = '\n';
      }
    }
  }

  // Prediction vs measurement: each --check run predicted from the --from run of the same method.
  for (const std::string& c : a.check) {
    const std::vector<RunRecord> measured = load_runs(c);
    out += fmt::format("\n## Predicted vs measured: {} ({} Gbit/s, latency {:g} us)\n\n", c, bandwidths.front() * 8 / 1e9,
                       latency * 1e6);
    out += "| method | ranks | predicted ms/step | measured ms/step | error | predicted exposed ms | measured exposed ms |\n"
           "|---|---|---|---|---|---|---|\n";
    for (const RunRecord& m : measured) {
      const RunRecord* source = nullptr;
      for (const RunRecord& r : runs)
        if (r.label == m.label) source = &r;
      if (source == nullptr) continue;
      const predict::StepPrediction s = predict::predict_step(source->profile, m.ranks, {bandwidths.front(), latency});
      const double measured_s = m.measured_step_s();
      double exposed = 0;
      for (const MetricsRecord& row : m.rows) exposed += row.exposed_comm_s;
      exposed /= static_cast<double>(std::max<int64_t>(1, m.steps()));
      out += fmt::format("| {} | {} | {:.1f} | {:.1f} | {:+.0f}% | {:.1f} | {:.1f} |\n", m.label, m.ranks, 1e3 * s.step_s,
                         1e3 * measured_s, 100 * (s.step_s - measured_s) / measured_s, 1e3 * s.exposed_s, 1e3 * exposed);
    }
  }
  std::fputs(out.c_str(), stdout);
}

}  // namespace

void add_predict_command(CLI::App& app) {
  auto args = std::make_shared<PredictArgs>();
  CLI::App* cmd = app.add_subcommand(
      "predict", "Predict time per step and speedup at larger scales from the measured phases of runs");
  cmd->add_option("--from", args->from, "A run directory, or a `qtrain compare` folder (all its finished runs)")
      ->type_name("DIR")
      ->required();
  cmd->add_option("--gpus", args->gpus, "Replica counts, comma-separated (default 2,4,8,16,32,96)")->type_name("LIST");
  cmd->add_option("--bandwidth", args->bandwidth, "Link bandwidths, comma-separated (default 1gbit,10gbit,100gbit)")
      ->type_name("LIST");
  cmd->add_option("--latency", args->latency, "Per-message latency, 0 to 10s (default 5us)")->type_name("TIME");
  cmd->add_flag("--own-compute", args->own_compute,
                "Use each run's own compute time (default: the median over the runs of a sweep)");
  cmd->add_option("--check", args->check,
                  "Runs measured at other world sizes (run or compare folder, repeatable): predicted vs measured "
                  "at the first --bandwidth")
      ->type_name("DIR")
      ->allow_extra_args(false);
  cmd->callback([args] { run_predict(*args); });
}

}  // namespace qtrain::cli
