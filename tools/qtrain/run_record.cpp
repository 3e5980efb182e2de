// Reading a run directory back (see run_record.h).
#include "tools/qtrain/run_record.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include "exchange/exchange_config.h"
#include "exchange/gradient_exchange.h"
#include "framework/core/check.h"
#include "train/metrics.h"
#include "framework/model/net.h"
#include "train/run_config.h"
#include "train/trainer.h"
#include "layers/registry.h"
#include "quant/method.h"
#include "quant/policy.h"
#include "train/sync/demo_codec.h"

namespace qtrain::cli {
namespace fs = std::filesystem;
namespace {

std::vector<std::string> split_csv_line(const std::string& line) {
  std::vector<std::string> out;
  std::stringstream ss(line);
  std::string cell;
  while (std::getline(ss, cell, ',')) out.push_back(cell);
  if (!line.empty() && line.back() == ',') out.emplace_back();
  return out;
}

// Every column read back (counts, times, rates, losses, accuracies, bytes) is a finite value >= 0; the
// writer leaves NaN cells empty, so "nan", "inf" or a negative value mean a damaged file.
double to_number(const std::string& cell, const std::string& path, int line, const std::string& column) {
  try {
    size_t used = 0;
    const double v = std::stod(cell, &used);
    if (used == cell.size() && std::isfinite(v) && v >= 0) return v;
  } catch (const std::exception&) {
  }
  input_error("{}:{}: column {}: expected a non-negative number, got '{}'", path, line, column, cell);
}

// An epoch or step number: a whole number that fits an int64_t exactly.
int64_t to_count(const std::string& cell, const std::string& path, int line, const std::string& column) {
  const double v = to_number(cell, path, line, column);
  if (v != std::floor(v) || v > 9007199254740992.0)  // 2^53
    input_error("{}:{}: column {}: expected a whole number, got '{}'", path, line, column, cell);
  return static_cast<int64_t>(v);
}

// What a run's train.log records of where it ran, in one read: "data parallel: 4 rank(s) over mpi,
// ...", "topology: 2 node(s) x 2 rank(s), ..." and, in the exchange plan, "two levels: 2 node(s) x
// 2 rank(s); inside a node an bf16 sum, ...". Without the log (or the lines): one rank, one node per
// rank, flat.
void read_log_facts(const std::string& path, RunRecord& run) {
  std::ifstream in(path);
  std::string line;
  bool topology = false;
  while (std::getline(in, line)) {
    size_t at = line.find("data parallel: ");
    if (at != std::string::npos) run.ranks = std::max(1, std::atoi(line.c_str() + at + 15));
    int nodes = 0, per_node = 0;
    at = line.find("topology: ");
    if (at != std::string::npos &&
        std::sscanf(line.c_str() + at, "topology: %d node(s) x %d rank(s)", &nodes, &per_node) == 2 && nodes >= 1 &&
        per_node >= 1) {
      run.nodes = nodes;
      run.ranks_per_node = per_node;
      topology = true;
    }
    at = line.find("two levels: ");
    if (at != std::string::npos) {
      run.two_level = true;
      const size_t intra = line.find("inside a node an ", at);
      if (intra != std::string::npos) run.intra = line.substr(intra + 17, line.find(' ', intra + 17) - intra - 17);
    }
  }
  if (!topology) run.nodes = run.ranks;
}

// DeMo replaces the gradient exchange by its own payload (train/sync/demo.h): one allgather of
// demo::Codec's payload per step, its size planned from the sync section as the strategy plans it
// (the defaults are CodecOptions'), and a DCT of every value each way whatever the world size. Two
// levels cannot carry it: an allgather of top-k pairs is not a sum.
void add_demo_payload(const RunConfig& config, const std::vector<ExchangeTensor>& tensors, RunRecord& run) {
  ConfigNode sync = config.sync.options;
  demo::CodecOptions o;
  o.chunk = sync.get_int("chunk", o.chunk, 1, demo::kMaxChunk);
  o.topk = std::min(sync.get_int("topk", o.topk, 1, INT64_MAX), o.chunk);
  o.sign = sync.get<bool>("sign", o.sign);
  std::vector<demo::ArenaSpan> spans;
  for (const ExchangeTensor& t : tensors) spans.push_back({t.offset, t.numel});
  const demo::Codec codec(spans, o, Device::cpu());
  predict::Bucket b;
  b.values = static_cast<double>(codec.values());
  b.allgather_bytes = static_cast<double>(codec.payload_bytes());
  b.transform_values = b.values;
  run.profile.buckets = {b};
  run.gradient_values = b.values;
  run.payload_bytes = b.allgather_bytes;
  run.two_level_unsuited = "demo";
}

}  // namespace

std::vector<MetricsRecord> read_metrics_csv(const std::string& path) {
  std::ifstream in(path);
  if (!in) input_error("{}: no metrics file (the run did not start, or this is not a qtrain run directory)", path);
  std::string line;
  if (!std::getline(in, line) || line.empty()) input_error("{}: empty metrics file", path);
  const std::vector<std::string> header = split_csv_line(line);
  std::map<std::string, size_t> col;
  for (size_t i = 0; i < header.size(); ++i) col[header[i]] = i;
  auto index = [&](const std::string& name) {
    auto it = col.find(name);
    if (it == col.end())
      input_error("{}: the header has no column '{}' (expected {})", path, name, MetricsWriter::header());
    return it->second;
  };
  const size_t c_epoch = index("epoch"), c_step = index("step"), c_wall = index("wall_time_s"),
               c_loss = index("train_loss"), c_acc = index("test_accuracy"), c_sps = index("samples_per_s"),
               c_sent = index("bytes_sent"), c_bytes = index("bytes_sent_per_step"), c_hidden = index("hidden_comm_s"),
               c_exposed = index("exposed_comm_s"), c_frac = index("fraction_quantized");
  auto optional_index = [&](const std::string& name) {
    auto it = col.find(name);
    return it == col.end() ? std::optional<size_t>() : std::optional<size_t>(it->second);
  };
  const std::optional<size_t> c_cer = optional_index("test_cer"), c_wer = optional_index("test_wer");
  std::array<size_t, PhaseTimers::kCount> c_phase{};
  for (int p = 0; p < PhaseTimers::kCount; ++p)
    c_phase[static_cast<size_t>(p)] = index(fmt::format("time_{}_s", phase_name(static_cast<Phase>(p))));

  std::vector<MetricsRecord> rows;
  int number = 1;
  while (std::getline(in, line)) {
    ++number;
    if (line.empty()) continue;
    const std::vector<std::string> cells = split_csv_line(line);
    if (cells.size() != header.size())
      input_error("{}:{}: {} cells, the header has {} (a truncated line?)", path, number, cells.size(), header.size());
    auto num = [&](size_t c) { return to_number(cells[c], path, number, header[c]); };
    MetricsRecord r;
    r.epoch = to_count(cells[c_epoch], path, number, header[c_epoch]);
    r.step = to_count(cells[c_step], path, number, header[c_step]);
    r.wall_time_s = num(c_wall);
    r.train_loss = num(c_loss);
    r.test_accuracy = num(c_acc);
    r.samples_per_s = num(c_sps);
    for (size_t p = 0; p < c_phase.size(); ++p) r.phase_s[p] = num(c_phase[p]);
    r.bytes_sent = num(c_sent);
    r.bytes_sent_per_step = num(c_bytes);
    r.hidden_comm_s = num(c_hidden);
    r.exposed_comm_s = num(c_exposed);
    r.fraction_quantized = num(c_frac);
    // Empty in the rows of classification runs (MetricsWriter writes NaN as an empty cell).
    if (c_cer && !cells[*c_cer].empty()) r.test_cer = num(*c_cer);
    if (c_wer && !cells[*c_wer].empty()) r.test_wer = num(*c_wer);
    rows.push_back(r);
  }
  if (rows.empty()) input_error("{}: no rows yet (the run has not finished an epoch)", path);
  return rows;
}

std::vector<CurvePoint> read_curve_csv(const std::string& path) {
  std::vector<CurvePoint> out;
  std::ifstream in(path);
  if (!in) return out;
  std::string line;
  std::getline(in, line);  // header
  int number = 1;
  while (std::getline(in, line)) {
    ++number;
    const std::vector<std::string> cells = split_csv_line(line);
    if (cells.size() != 3) input_error("{}:{}: expected wall_s,step,train_loss", path, number);
    out.push_back({to_number(cells[0], path, number, "wall_s"), to_count(cells[1], path, number, "step"),
                   to_number(cells[2], path, number, "train_loss")});
  }
  return out;
}

double RunRecord::measured_step_s() const {
  if (steps() == 0) return 0;
  double exposed = 0;
  for (const MetricsRecord& r : rows) exposed += r.exposed_comm_s;
  return profile.compute_s() + exposed / static_cast<double>(steps());
}

double RunRecord::exposed_share() const {
  const double step = measured_step_s();
  if (step <= 0) return 0;
  double exposed = 0;
  for (const MetricsRecord& r : rows) exposed += r.exposed_comm_s;
  return exposed / static_cast<double>(steps()) / step;
}

double RunRecord::bytes_sent() const {
  double total = 0;
  for (const MetricsRecord& r : rows) total += r.bytes_sent;
  return total;
}

double RunRecord::bytes_per_exchange() const {
  const int64_t n = schedule.landed_exchanges(steps());
  return n > 0 ? bytes_sent() / static_cast<double>(n) : 0;
}

double RunRecord::bytes_per_step() const { return bytes_per_exchange() * schedule.exchanges_per_step(); }

RunRecord load_run(const std::string& dir, const std::string& label) {
  if (!fs::is_directory(dir)) input_error("{}: not a directory", dir);
  RunRecord run;
  run.dir = dir;
  run.label = label;
  run.rows = read_metrics_csv((fs::path(dir) / "metrics.csv").string());
  run.curve = read_curve_csv((fs::path(dir) / "curve.csv").string());
  read_log_facts((fs::path(dir) / "train.log").string(), run);
  run.fraction_quantized = run.rows.back().fraction_quantized;

  const std::string config_path = (fs::path(dir) / "config.resolved.yaml").string();
  if (!fs::exists(config_path)) input_error("{}: no config.resolved.yaml (not a qtrain run directory)", dir);
  const RunConfig config = parse_run_config(config_path, {});
  run.batch_size = config.data.batch_size;
  run.seed = config.seed;
  run.method = config.quantization.base.str();
  run.schedule = parse_sync_schedule(config.sync.options);

  // Per-step averages of the measured phases; encode and decode per exchange of the whole model (per
  // step for a schedule that exchanges it every step), which is what predict fits its costs to.
  const double steps = static_cast<double>(std::max<int64_t>(1, run.steps()));
  std::array<double, PhaseTimers::kCount> total{};
  for (const MetricsRecord& r : run.rows)
    for (size_t p = 0; p < total.size(); ++p) total[p] += r.phase_s[p];
  auto per_step = [&](Phase p) { return total[static_cast<size_t>(p)] / steps; };
  const double model_exchanges =
      static_cast<double>(run.schedule.landed_exchanges(run.steps())) / static_cast<double>(run.schedule.fragments);
  auto per_exchange = [&](Phase p) {
    return model_exchanges > 0 ? total[static_cast<size_t>(p)] / model_exchanges : 0.0;
  };
  predict::StepProfile& prof = run.profile;
  prof.data_s = per_step(Phase::data);
  prof.forward_s = per_step(Phase::forward);
  prof.backward_s = per_step(Phase::backward);
  prof.optimizer_s = per_step(Phase::optimizer);
  prof.encode_s = per_exchange(Phase::encode);
  prof.decode_s = per_exchange(Phase::decode);
  prof.measured_ranks = run.ranks;
  // DiLoCo's exchange starts after the optimizer step (never under backward), DeMo's after backward.
  prof.overlap = config.exchange.overlap && run.schedule.type == SyncSchedule::Type::every_step;
  prof.schedule = run.schedule;

  const Net net(config.model, DType::f32, Device::cpu(), layer_registry(), loss_registry());
  const std::vector<ExchangeTensor> tensors = exchange_tensors(net);
  if (run.schedule.type == SyncSchedule::Type::demo) {
    add_demo_payload(config, tensors, run);
    return run;
  }
  // The exchange plan, as GradientExchange builds it: per tensor a spec and an algorithm, whose cost
  // terms the algorithm itself gives, in the exchange's buckets.
  const std::vector<int> bucket_of = GradientExchange::bucket_of(tensors, config.exchange.bucket_mb);
  for (int t = static_cast<int>(tensors.size()) - 1; t >= 0; --t) {
    const ExchangeTensor& x = tensors[static_cast<size_t>(t)];
    if (static_cast<int>(prof.buckets.size()) <= bucket_of[static_cast<size_t>(t)]) prof.buckets.emplace_back();
    predict::Bucket& b = prof.buckets.back();
    const double n = static_cast<double>(x.numel);
    b.values += n;
    run.gradient_values += n;
    const QuantSpec spec = config.quantization.resolve(x.layer_name, x.layer_type, x.numel);
    const QuantMethodInfo& info = method_info(spec.method);
    if (!info.payload || info.combine != QuantCombine::sum) run.two_level_unsuited = info.name;
    const WireCost c = GradientExchange::wire_cost(spec, x, config.exchange.algorithm_for(spec));
    switch (c.pattern) {
      case WireCost::Pattern::allreduce:
        b.allreduce_bytes += c.bytes;
        b.allreduce_values += c.values;
        if (c.sixteen_bit) b.allreduce_16bit_values += c.values;
        break;
      case WireCost::Pattern::allgather:
        b.allgather_bytes += c.bytes;
        b.allgather_values += c.values;
        break;
      case WireCost::Pattern::reduce_scatter_allgather:
        b.rsag_bytes += c.bytes;
        b.rsag_values += c.values;
        break;
    }
    run.payload_bytes += c.bytes;
  }
  return run;
}

}  // namespace qtrain::cli
