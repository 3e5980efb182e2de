// `qtrain predict --from RUN_DIR|SWEEP_DIR [--gpus 2,4,...| --nodes 2,16 --gpus-per-node 2,8]
//  [--bandwidth 1gbit,...] [--latency 5us] [--intra-bandwidth 100GB/s] [--check DIR]...`: the step-time
// model of predict_model.h applied to measured runs. Prints Markdown tables of predicted time per step
// and speedup over one replica per method, scale and bandwidth, which method is fastest where, and
// where quantization stops paying off; on nodes of several ranks, flat and two-level rows. Each run is
// predicted under its own sync schedule (DiLoCo's H, fragments and overlap; predict_model.h). --check
// compares the prediction with runs measured at other world sizes and shapes (prediction error).
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
  std::string gpus;  // default 2,4,8,16,32,96 (one rank per node)
  std::string nodes, gpus_per_node;
  std::string bandwidth = "1gbit,10gbit,100gbit";
  std::string latency = "5us";
  std::string intra_bandwidth = "100GB/s";
  std::string intra_latency = "2us";
  std::string intra = "fp32";
  bool own_compute = false;
  std::vector<std::string> check;
};

std::vector<int> positive_list(const std::string& list, const std::string& what) {
  std::vector<int> out;
  for (const std::string& g : split(list)) {
    char* end = nullptr;
    const long v = std::strtol(g.c_str(), &end, 10);
    if (*end != '\0' || v < 1 || v > 1000000) input_error("{}: expected positive integers, got '{}'", what, g);
    out.push_back(static_cast<int>(v));
  }
  if (out.empty()) input_error("{}: the list is empty", what);
  return out;
}

// A column of the tables: a cluster shape.
struct Shape {
  predict::Topology topology;
  std::string label;
};

std::vector<Shape> shapes_of(const PredictArgs& a) {
  std::vector<Shape> shapes;
  if (a.nodes.empty() && a.gpus_per_node.empty()) {
    for (int p : positive_list(a.gpus.empty() ? "2,4,8,16,32,96" : a.gpus, "--gpus"))
      shapes.push_back({{p, 1}, fmt::format("p={}", p)});
    return shapes;
  }
  if (!a.gpus.empty())
    input_error(
        "--gpus and --nodes/--gpus-per-node both given: use --gpus for one rank per node, or --nodes with "
        "--gpus-per-node for nodes of several");
  for (int n : positive_list(a.nodes.empty() ? "1" : a.nodes, "--nodes"))
    for (int g : positive_list(a.gpus_per_node.empty() ? "1" : a.gpus_per_node, "--gpus-per-node"))
      shapes.push_back({{n, g}, fmt::format("{}x{}", n, g)});
  return shapes;
}

// A row of the tables: a run, flat or in two levels.
struct Row {
  const RunRecord* run;
  predict::Hierarchy hierarchy;
  std::string label;
};

// The network settings of the command line (--bandwidth is a list: one section of tables each).
struct Networks {
  std::vector<double> bandwidths;
  double latency = 0, intra_bandwidth = 0, intra_latency = 0;
  double intra_bytes = 4;  // per value summed inside a node (--intra fp32 or bf16)
  predict::Network at(double bw) const { return {bw, latency, intra_bandwidth, intra_latency}; }
};

Networks parse_networks(const PredictArgs& a) {
  Networks n;
  for (const std::string& b : split(a.bandwidth)) n.bandwidths.push_back(predict::parse_bandwidth(b, "--bandwidth"));
  if (n.bandwidths.empty()) input_error("--bandwidth: the list is empty");
  n.latency = predict::parse_latency(a.latency, "--latency");
  n.intra_bandwidth = predict::parse_bandwidth(a.intra_bandwidth, "--intra-bandwidth");
  n.intra_latency = predict::parse_latency(a.intra_latency, "--intra-latency");
  if (a.intra != "fp32" && a.intra != "bf16") input_error("--intra: expected fp32 or bf16, got '{}'", a.intra);
  n.intra_bytes = a.intra == "bf16" ? 2 : 4;
  return n;
}

// The runs predict reads, each measured flat.
std::vector<RunRecord> load_flat_runs(const std::string& from) {
  std::vector<RunRecord> runs = load_runs(from);
  for (const RunRecord& r : runs)
    if (r.two_level)
      input_error(
          "{}: this run exchanged in two levels; predict fits its per-value costs to a flat run (measure one "
          "with communication.hierarchy: flat, or on one node)",
          r.dir);
  return runs;
}

// The methods share the model and batch: their compute differs only by measurement noise, so by
// default every method gets the median compute of the runs (each keeps its own encode / decode).
void share_median_compute(std::vector<RunRecord>& runs) {
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

std::string inputs_table(const PredictArgs& a, const std::vector<RunRecord>& runs, bool shared_compute) {
  std::string out = fmt::format("# qtrain predict: {}\n\nMeasured inputs:\n\n", a.from);
  out +=
      "| method | schedule | measured on | compute ms (data+fwd+bwd+opt) | encode ms | decode ms | payload MB | bits "
      "per value | buckets |\n"
      "|---|---|---|---|---|---|---|---|---|\n";
  bool periodic = false;
  for (const RunRecord& r : runs) {
    periodic = periodic || r.schedule.type == SyncSchedule::Type::diloco;
    out += fmt::format("| {} | {} | {} rank(s){} | {:.2f} | {:.2f} | {:.2f} | {:.3f} | {:.2f} | {} |\n", r.label,
                       r.schedule.str(), r.ranks,
                       r.ranks_per_node > 1 ? fmt::format(", {} node(s) x {}", r.nodes, r.ranks_per_node) : "",
                       1e3 * r.profile.compute_s(), 1e3 * r.profile.encode_s, 1e3 * r.profile.decode_s,
                       r.payload_bytes / 1e6, r.bits_per_value(), r.profile.buckets.size());
  }
  out +=
      "\nCompute per step; encode, decode and payload per exchange of the whole model (per step when it is "
      "exchanged every step).\n";
  if (periodic)
    out +=
        "DiLoCo H=inner_steps F=fragments tau=overlap: F exchanges of 1/F of the model per H steps, after the "
        "optimizer step; each is hidden behind tau inner steps of compute: exposed per step = F/H x max(0, exchange "
        "- tau x compute).\n";
  if (shared_compute) out += "Compute: the median over the runs (--own-compute to keep each run's).\n";
  return out;
}

// The explanation of the two-level rows, and which runs cannot go in two levels.
std::string several_per_node_note(const PredictArgs& a, const std::vector<RunRecord>& runs, const Networks& n) {
  std::string out = fmt::format(
      "\nNodes of several ranks: one network link per node shared by its ranks, {} per rank and "
      "{:g} us inside a node (--intra-bandwidth, --intra-latency). Two levels: an {} sum inside "
      "each node, the method between nodes, an allgather inside (after backward, no overlap).\n",
      fmt::format("{:g} GB/s", n.intra_bandwidth / 1e9), n.intra_latency * 1e6, a.intra);
  for (const RunRecord& r : runs)
    if (!r.two_level_unsuited.empty())
      out += fmt::format("{}: flat only ({} cannot go in two levels: its result is not a sum of decoded payloads).\n",
                         r.label, r.two_level_unsuited);
  return out;
}

// Time per step and speedup of every row at every shape, then the fastest row per shape.
std::string time_table(const std::vector<Row>& rows, const std::vector<Shape>& shapes, const predict::Network& net,
                       const Networks& n) {
  std::string out =
      fmt::format("\n## {} per link, latency {:g} us\n\nTime per step in ms (speedup over one replica):\n\n| method |",
                  predict::format_bandwidth(net.bandwidth_bytes_per_s), n.latency * 1e6);
  for (const Shape& s : shapes) out += fmt::format(" {} |", s.label);
  out += "\n|---|";
  for (size_t i = 0; i < shapes.size(); ++i) out += "---|";
  out += "\n";
  std::map<size_t, std::pair<double, std::string>> best;  // shape -> fastest
  for (const Row& row : rows) {
    out += "| " + row.label + " |";
    for (size_t i = 0; i < shapes.size(); ++i) {
      const predict::StepPrediction s =
          predict::predict_step(row.run->profile, shapes[i].topology, net, row.hierarchy, n.intra_bytes);
      out += fmt::format(" {:.1f} ({:.1f}x) |", 1e3 * s.step_s, s.speedup);
      auto it = best.find(i);
      if (it == best.end() || s.step_s < it->second.first) best[i] = {s.step_s, row.label};
    }
    out += "\n";
  }
  out += "\nFastest:";
  for (size_t i = 0; i < shapes.size(); ++i) out += fmt::format(" {}: {};", shapes[i].label, best[i].second);
  out.back() = '\n';
  return out;
}

// Where a quantized method is slower than fp32 (both flat): its extra encode + decode exceeds the
// exposed communication it saves.
std::string payoff_lines(const std::vector<RunRecord>& runs, const RunRecord& fp32, const std::vector<Shape>& shapes,
                         const predict::Network& net) {
  std::string out;
  for (const RunRecord& r : runs) {
    if (&r == &fp32) continue;
    std::vector<std::string> losing;
    for (const Shape& shape : shapes) {
      const predict::StepPrediction q = predict::predict_step(r.profile, shape.topology, net, predict::Hierarchy::flat);
      const predict::StepPrediction f =
          predict::predict_step(fp32.profile, shape.topology, net, predict::Hierarchy::flat);
      if (q.step_s < f.step_s) continue;
      losing.push_back(fmt::format("{} (encode+decode {:.1f} ms vs {:.1f}; communication saved {:.1f} ms)", shape.label,
                                   1e3 * (q.encode_s + q.decode_s), 1e3 * (f.encode_s + f.decode_s),
                                   1e3 * (f.communicate_s - q.communicate_s)));
    }
    if (losing.empty())
      out += fmt::format("- {}: faster than fp32 at every scale here.\n", r.label);
    else if (losing.size() == shapes.size())
      out += fmt::format("- {}: does not pay off at this bandwidth (at {}).\n", r.label, losing.back());
    else {
      out += fmt::format("- {}: does not pay off at", r.label);
      for (const std::string& l : losing) out += " " + l + ";";
      out.back() = '\n';
    }
  }
  return out;
}

// Where the two levels beat the same method flat.
std::string two_level_lines(const std::vector<RunRecord>& runs, const std::vector<Shape>& shapes,
                            const predict::Network& net, const Networks& n) {
  std::string out;
  for (const RunRecord& r : runs) {
    if (!r.two_level_unsuited.empty()) continue;
    std::vector<std::string> gains;
    for (const Shape& shape : shapes) {
      if (shape.topology.nodes == 1 || shape.topology.ranks_per_node == 1) continue;
      const double flat = predict::predict_step(r.profile, shape.topology, net, predict::Hierarchy::flat).step_s;
      const double two =
          predict::predict_step(r.profile, shape.topology, net, predict::Hierarchy::two_level, n.intra_bytes).step_s;
      gains.push_back(fmt::format("{} {:.2f}x", shape.label, flat / two));
    }
    out += fmt::format("- {}: two levels over flat (step time ratio, >1 = two levels faster): {}.\n", r.label,
                       fmt::join(gains, ", "));
  }
  return out;
}

// Prediction vs measurement: each run of `check` predicted from the --from run of the same method.
std::string check_section(const std::string& check, const std::vector<RunRecord>& runs, const Networks& n) {
  const std::vector<RunRecord> measured = load_runs(check);
  std::string out = fmt::format("\n## Predicted vs measured: {} ({} Gbit/s, latency {:g} us)\n\n", check,
                                n.bandwidths.front() * 8 / 1e9, n.latency * 1e6);
  out +=
      "| method | ranks | shape | exchange | predicted ms/step | measured ms/step | error | predicted exposed ms | "
      "measured exposed ms |\n"
      "|---|---|---|---|---|---|---|---|---|\n";
  for (const RunRecord& m : measured) {
    const RunRecord* source = nullptr;
    for (const RunRecord& r : runs)
      if (r.label == m.label) source = &r;
    if (source == nullptr) continue;
    const predict::Topology topology{m.nodes, m.ranks_per_node};
    const predict::StepPrediction s = predict::predict_step(
        source->profile, topology, n.at(n.bandwidths.front()),
        m.two_level ? predict::Hierarchy::two_level : predict::Hierarchy::flat, m.intra == "bf16" ? 2 : 4);
    const double measured_s = m.measured_step_s();
    double exposed = 0;
    for (const MetricsRecord& row : m.rows) exposed += row.exposed_comm_s;
    exposed /= static_cast<double>(std::max<int64_t>(1, m.steps()));
    out += fmt::format("| {} | {} | {}x{} | {} | {:.1f} | {:.1f} | {:+.0f}% | {:.1f} | {:.1f} |\n", m.label, m.ranks,
                       m.nodes, m.ranks_per_node, m.two_level ? "two levels, " + m.intra + " inside" : "flat",
                       1e3 * s.step_s, 1e3 * measured_s, 100 * (s.step_s - measured_s) / measured_s, 1e3 * s.exposed_s,
                       1e3 * exposed);
  }
  return out;
}

void run_predict(const PredictArgs& a) {
  const std::vector<Shape> shapes = shapes_of(a);  // the arguments first, before reading any run
  std::vector<RunRecord> runs = load_flat_runs(a.from);
  const Networks networks = parse_networks(a);
  bool several_per_node = false;
  for (const Shape& s : shapes) several_per_node |= s.topology.nodes > 1 && s.topology.ranks_per_node > 1;
  const bool shared_compute = runs.size() > 1 && !a.own_compute;
  if (shared_compute) share_median_compute(runs);

  std::string out = inputs_table(a, runs, shared_compute);
  const RunRecord* fp32 = nullptr;
  // The reference for "does quantization pay off": fp32 exchanged every step.
  for (const RunRecord& r : runs)
    if (r.schedule.type == SyncSchedule::Type::every_step &&
        (r.label == "fp32" || (fp32 == nullptr && r.method.rfind("fp32", 0) == 0)))
      fp32 = &r;
  std::vector<Row> rows;
  for (const RunRecord& r : runs) {
    rows.push_back({&r, predict::Hierarchy::flat, several_per_node ? r.label + ", flat" : r.label});
    if (several_per_node && r.two_level_unsuited.empty())
      rows.push_back({&r, predict::Hierarchy::two_level, fmt::format("{}, two levels ({} inside)", r.label, a.intra)});
  }
  if (several_per_node) out += several_per_node_note(a, runs, networks);
  for (double bw : networks.bandwidths) {
    const predict::Network net = networks.at(bw);
    out += time_table(rows, shapes, net, networks);
    if (fp32 == nullptr) continue;
    out += payoff_lines(runs, *fp32, shapes, net);
    if (several_per_node) out += two_level_lines(runs, shapes, net, networks);
  }
  for (const std::string& c : a.check) out += check_section(c, runs, networks);
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
  cmd->add_option("--gpus", args->gpus, "Replica counts, one per node, comma-separated (default 2,4,8,16,32,96)")
      ->type_name("LIST");
  cmd->add_option("--nodes", args->nodes,
                  "Node counts, comma-separated, for nodes of several ranks (with --gpus-per-node)")
      ->type_name("LIST");
  cmd->add_option("--gpus-per-node", args->gpus_per_node,
                  "Ranks per node, comma-separated: every --nodes x --gpus-per-node shape, flat and in two levels")
      ->type_name("LIST");
  cmd->add_option("--intra-bandwidth", args->intra_bandwidth,
                  "Inside a node, per rank and direction (default 100GB/s; NVLink 300GB/s, PCIe 4 x16 25GB/s)")
      ->type_name("RATE");
  cmd->add_option("--intra-latency", args->intra_latency, "Per-message latency inside a node (default 2us)")
      ->type_name("TIME");
  cmd->add_option("--intra", args->intra, "The two levels' precision inside a node: fp32 (default) or bf16")
      ->type_name("fp32|bf16");
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
