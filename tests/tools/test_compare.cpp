// qtrain compare and predict, without training: the predict model against hand-computed cases, the
// report writer on synthetic run directories (table values computed by hand below), the --methods
// parser of compare, the finished / unfinished / stale states of a run directory, and bad input.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "framework/core/check.h"
#include "train/metrics.h"
#include "tests/support/error_of.h"
#include "tests/support/temp_dir.h"
#include "tools/qtrain/loss_curve.h"
#include "tools/qtrain/predict_model.h"
#include "tools/qtrain/report.h"
#include "tools/qtrain/run_record.h"
#include "tools/qtrain/sweep.h"

using namespace qtrain;
using namespace qtrain::cli;
using qtrain::testing::error_of;
using qtrain::testing::TempDir;
namespace fs = std::filesystem;

namespace {

predict::StepProfile compute_only(double forward, double backward) {
  predict::StepProfile p;
  p.forward_s = forward;
  p.backward_s = backward;
  return p;
}

predict::Bucket fp32_bucket(double values) {
  predict::Bucket b;
  b.values = values;
  b.allreduce_values = values;
  b.allreduce_bytes = 4 * values;
  return b;
}

// A run directory as the trainer leaves it: a 16-8-3 MLP config, train.log with the world size and
// metrics.csv from MetricsWriter with the given rows.
void write_run(const fs::path& dir, const std::string& quantization, const std::vector<MetricsRow>& rows, int ranks,
               int seed = 1) {
  fs::create_directories(dir);
  std::ofstream(dir / "config.resolved.yaml")
      << "name: synthetic\nseed: " << seed
      << "\ndevice: cpu\ndata: {dataset: mnist, path: /nonexistent, batch_size: 10}\n"
         "model:\n  input: [1, 4, 4]\n  layers:\n    - {type: flatten}\n    - {type: dense, units: 8}\n"
         "    - {type: relu}\n    - {type: dense, units: 3}\n  loss: softmax_cross_entropy\n"
         "optimizer: {type: sgd, lr: 0.1}\ntrain: {epochs: 2}\n"
      << "quantization: " << quantization << "\n";
  std::ofstream(dir / "train.log") << "[2026-01-01 00:00:00.000] data parallel: " << ranks
                                   << " rank(s) over mpi, 100.00% of gradient values quantized\n";
  MetricsWriter writer((dir / "metrics.csv").string());
  for (const MetricsRow& r : rows) writer.append(r);
}

MetricsRow row(int64_t epoch, int64_t step, double wall, double accuracy, double samples_per_s) {
  MetricsRow r;
  r.epoch = epoch;
  r.step = step;
  r.wall_time_s = wall;
  r.train_loss = 1.0 / static_cast<double>(epoch + 1);
  r.test_accuracy = accuracy;
  r.samples_per_s = samples_per_s;
  r.phases.add(Phase::data, 0.1);
  r.phases.add(Phase::forward, 0.2);
  r.phases.add(Phase::backward, 0.3);
  r.phases.add(Phase::optimizer, 0.4);
  r.exposed_comm_s = 0.5;
  r.bytes_sent_per_step = 326;
  r.fraction_quantized = 1.0;
  return r;
}

}  // namespace

TEST_CASE("predict: pure bandwidth, one bucket after backward", "[predict]") {
  predict::StepProfile p = compute_only(0.05, 0.1);
  p.buckets = {fp32_bucket(1e6)};
  const predict::StepPrediction s = predict::predict_step(p, 4, {1e9, 0.0});
  // Ring allreduce of 4 MB on 4 ranks at 1 GB/s: 2 * 3/4 * 4e6 / 1e9 = 6 ms, all after backward.
  CHECK(s.communicate_s == Approx(6e-3));
  CHECK(s.exposed_s == Approx(6e-3));
  CHECK(s.step_s == Approx(0.156));
  CHECK(s.speedup == Approx(4 * 0.15 / 0.156));
  // One replica exchanges nothing.
  const predict::StepPrediction one = predict::predict_step(p, 1, {1e9, 0.0});
  CHECK(one.step_s == Approx(0.15));
  CHECK(one.speedup == 1);
}

TEST_CASE("predict: latency-bound small payloads", "[predict]") {
  predict::Bucket b;
  b.values = 2;
  b.allreduce_values = 2;
  b.allreduce_bytes = 8;
  // 96 ranks, 5 us per message: 2 * 95 * 5e-6 = 0.95 ms; the 8 bytes add 2 * 95/96 * 8 / 12.5e9.
  CHECK(predict::communicate_time(b, 96, {12.5e9, 5e-6}) == Approx(9.5e-4 + 2.0 * 95 / 96 * 8 / 12.5e9).epsilon(1e-12));
  // Allgather: (p-1) messages and (p-1) payloads.
  predict::Bucket g;
  g.allgather_bytes = 1000;
  CHECK(predict::communicate_time(g, 96, {1e9, 5e-6}) == Approx(95 * 5e-6 + 95 * 1000 / 1e9));
  CHECK(predict::communicate_time(g, 1, {1e9, 5e-6}) == 0);
}

TEST_CASE("predict: overlap hides the first bucket's exchange under backward", "[predict]") {
  predict::StepProfile p = compute_only(0.0, 1.0);
  predict::Bucket first, last;  // ready at 75% and 100% of backward
  first.values = 3e6;
  first.rsag_bytes = 0.1e9;  // 2 ranks, 1 GB/s: 2 * 1/2 * 0.1e9 / 1e9 = 0.1 s
  last.values = 1e6;
  last.rsag_bytes = 0.02e9;  // 0.02 s
  p.buckets = {first, last};
  const predict::Network net{1e9, 0.0};
  predict::StepPrediction s = predict::predict_step(p, 2, net);
  // first: 0.75 -> 0.85, hidden; last: 1.0 -> 1.02: only 0.02 s exposed.
  CHECK(s.communicate_s == Approx(0.12));
  CHECK(s.exposed_s == Approx(0.02));
  CHECK(s.step_s == Approx(1.02));
  // The first bucket overruns backward: 0.75 -> 1.15, then the last 1.15 -> 1.17.
  p.buckets[0].rsag_bytes = 0.4e9;
  CHECK(predict::predict_step(p, 2, net).exposed_s == Approx(0.17));
  // Without overlap everything is exposed.
  p.buckets[0].rsag_bytes = 0.1e9;
  p.overlap = false;
  CHECK(predict::predict_step(p, 2, net).exposed_s == Approx(0.12));
}

TEST_CASE("predict: encode and decode scale with the algorithm", "[predict]") {
  predict::StepProfile ag = compute_only(0, 0);
  predict::Bucket b;
  b.values = b.allgather_values = 1e6;
  ag.buckets = {b};
  ag.measured_ranks = 2;
  ag.encode_s = 0.01;  // 1e6 values encoded: 1e-8 s per value
  ag.decode_s = 0.02;  // 2 payloads of 1e6 values decoded: 1e-8 s per value
  const predict::StepPrediction s = predict::predict_step(ag, 8, {1e12, 0});
  CHECK(s.encode_s == Approx(0.01));
  CHECK(s.decode_s == Approx(0.08));  // 8 payloads

  predict::StepProfile rs = compute_only(0, 0);
  predict::Bucket r;
  r.values = r.rsag_values = 1e6;
  rs.buckets = {r};
  rs.measured_ranks = 4;
  rs.encode_s = 0.0125;  // (1 + 1/4) * 1e6 values
  rs.decode_s = 0.02;    // 2 * 1e6 values
  const predict::StepPrediction t = predict::predict_step(rs, 2, {1e12, 0});
  CHECK(t.encode_s == Approx(0.015));  // (1 + 1/2) * 1e6 * 1e-8
  CHECK(t.decode_s == Approx(0.02));
}

TEST_CASE("predict: nodes of several ranks share their link; two levels send the bucket once per node", "[predict]") {
  const predict::Network net{1e9, 0.0, 10e9, 0.0};  // 1 GB/s between nodes, 10 GB/s inside
  predict::Bucket q;                                // a reduce-scatter + allgather payload
  q.values = 1e6;
  q.rsag_values = 1e6;
  q.rsag_bytes = 0.5e6;
  // One rank per node: the flat formulas (2 * 3/4 * 0.5 MB at 1 GB/s).
  CHECK(predict::communicate_time(q, predict::Topology{4, 1}, net) == Approx(0.75e-3));
  CHECK(predict::communicate_time(q, predict::Topology{4, 1}, net) == predict::communicate_time(q, 4, net));
  // 2 nodes x 2: each rank sends its 3 stripes (b/4) to the 2 ranks of the other node, twice; the
  // node's 2 ranks share the link: 2 * 2 * (2-1)/2 * 0.5 MB / 1 GB/s = 1 ms (not 0.75).
  CHECK(predict::communicate_time(q, predict::Topology{2, 2}, net) == Approx(1e-3));
  // One node of 4: the intra link.
  CHECK(predict::communicate_time(q, predict::Topology{1, 4}, net) == Approx(0.075e-3));
  // Allgather: each of a node's 2 ranks sends its payload to the other node's 2: 4 payloads per link.
  predict::Bucket g;
  g.allgather_bytes = 1e6;
  CHECK(predict::communicate_time(g, predict::Topology{2, 2}, net) == Approx(4e-3));
  // Ring allreduce: one stream per link, 2 * 3/4 * 4 MB.
  CHECK(predict::communicate_time(fp32_bucket(1e6), predict::Topology{2, 2}, net) == Approx(6e-3));

  // Two levels, 2 x 2: an fp32 reduce-scatter of 4 MB on 2 ranks inside (1/2 * 4 MB / 10 GB/s =
  // 0.2 ms), the bucket's payload between 2 nodes (2 * 1/2 * 0.5 MB / 1 GB/s = 0.5 ms), the fp32
  // allgather of the 2 stripes (1/2 * 4 MB / 10 GB/s = 0.2 ms).
  const predict::TwoLevelTimes t = predict::two_level_time(q, predict::Topology{2, 2}, net, 4);
  CHECK(t.intra_sum_s == Approx(0.2e-3));
  CHECK(t.inter_s == Approx(0.5e-3));
  CHECK(t.intra_gather_s == Approx(0.2e-3));
  CHECK(predict::two_level_time(q, predict::Topology{2, 2}, net, 2).intra_sum_s == Approx(0.1e-3));  // bf16 inside

  // The step: two levels run after backward without overlap, and encode a stripe (n/G) on N ranks.
  predict::StepProfile p = compute_only(0.0, 1.0);
  p.buckets = {q};
  p.measured_ranks = 4;
  p.encode_s = 1e-3;  // weight at 4 ranks: n (1 + 1/4) = 1.25e6 values
  p.decode_s = 0;
  const predict::StepPrediction two =
      predict::predict_step(p, predict::Topology{2, 2}, net, predict::Hierarchy::two_level);
  const double encode = 1e-3 / 1.25e6 * (0.5e6 * (1 + 1.0 / 2));
  CHECK(two.encode_s == Approx(encode));
  CHECK(two.communicate_s == Approx(0.9e-3));
  CHECK(two.exposed_s == Approx(encode + 0.9e-3));
  // Flat overlaps: the one bucket is ready at the end of backward anyway, so everything is exposed.
  const predict::StepPrediction flat = predict::predict_step(p, predict::Topology{2, 2}, net, predict::Hierarchy::flat);
  CHECK(flat.communicate_s == Approx(1e-3));
  CHECK(flat.encode_s == Approx(1e-3));
  // Two levels with one rank per node, or on one node, are the flat exchange.
  CHECK(predict::predict_step(p, predict::Topology{4, 1}, net, predict::Hierarchy::two_level).step_s ==
        predict::predict_step(p, 4, net).step_s);
}

TEST_CASE("predict: bandwidth and latency parsing", "[predict]") {
  CHECK(predict::parse_bandwidth("1gbit", "x") == Approx(125e6));
  CHECK(predict::parse_bandwidth("10Gbit", "x") == Approx(1.25e9));
  CHECK(predict::parse_bandwidth("100mbit", "x") == Approx(12.5e6));
  CHECK(predict::parse_bandwidth("12GB/s", "x") == Approx(12e9));
  CHECK(predict::parse_latency("5us", "x") == Approx(5e-6));
  CHECK(predict::parse_latency("0", "x") == 0);
  CHECK_THAT(error_of([] { predict::parse_bandwidth("fast", "--bandwidth"); }),
             Catch::Contains("--bandwidth: 'fast' does not start with a finite non-negative number"));
  // Zero in a byte unit would divide by zero; an overflowing number would be infinite.
  CHECK_THAT(error_of([] { predict::parse_bandwidth("0GB/s", "--bandwidth"); }),
             Catch::Contains("--bandwidth: the bandwidth must be > 0 and finite, got '0GB/s'"));
  CHECK_THAT(error_of([] { predict::parse_bandwidth("1e400gbit", "--bandwidth"); }),
             Catch::Contains("'1e400gbit' does not start with a finite non-negative number"));
  CHECK_THAT(error_of([] { predict::parse_latency("infus", "--latency"); }),
             Catch::Contains("'infus' does not start with a finite non-negative number"));
  CHECK_THAT(error_of([] { predict::parse_bandwidth("1gbyte", "--bandwidth"); }),
             Catch::Contains("unknown bandwidth unit"));
  CHECK_THAT(error_of([] { predict::parse_latency("5 parsecs", "--latency"); }),
             Catch::Contains("unknown latency unit"));
  // Finite but beyond any network: the step times would overflow to inf.
  CHECK_THAT(error_of([] { predict::parse_latency("1e308s", "--latency"); }),
             Catch::Contains("--latency: a per-message latency must be between 0 and 10s, got '1e308s'"));
  CHECK(predict::parse_latency("10s", "x") == 10);
}

TEST_CASE("compare: --methods become config overrides; unknown methods fail first", "[compare]") {
  const std::vector<Variant> v = parse_variants("fp32,qsgd:bits=2,onebit:mode=bucket:bucket=64");
  REQUIRE(v.size() == 3);
  CHECK(v[0].folder == "fp32");
  CHECK(v[0].overrides == std::vector<std::string>{"quantization.method=fp32"});
  CHECK(v[1].label == "qsgd:bits=2");
  CHECK(v[1].folder == "qsgd_bits2");
  CHECK(v[1].overrides == std::vector<std::string>{"quantization.method=qsgd", "quantization.bits=2"});
  CHECK(v[2].overrides ==
        std::vector<std::string>{"quantization.method=onebit", "quantization.mode=bucket", "quantization.bucket=64"});
  CHECK_THAT(error_of([] { parse_variants("fp32,int3"); }),
             Catch::Contains("--methods int3: quantization.method must be one of fp32, fp16"));
  // The values are parsed one by one: no line:column position (it used to say '--methods qsgd:bits=3:1:1').
  CHECK(error_of([] { parse_variants("qsgd:bits=3"); }) ==
        "--methods qsgd:bits=3: quantization.bits must be one of 2, 4, 8, 16, got '3'");
  CHECK_THAT(error_of([] { parse_variants("qsgd:bogus=3"); }),
             Catch::StartsWith("--methods qsgd:bogus=3: unknown key"));
  CHECK_THAT(error_of([] { parse_variants("fp32,fp32"); }), Catch::Contains("'fp32' is given twice"));
  // A parameter given twice used to keep the last value, an empty value to fall back to the default,
  // and a value that is not YAML escaped as yaml-cpp's exception ("qtrain: unexpected error").
  CHECK_THAT(error_of([] { parse_variants("qsgd:bits=2:bits=4"); }),
             Catch::Contains("--methods qsgd:bits=2:bits=4: 'bits' is given twice"));
  CHECK_THAT(error_of([] { parse_variants("qsgd:bits="); }),
             Catch::Contains("--methods qsgd:bits=: expected key=value after the method name, got 'bits='"));
  CHECK_THAT(error_of([] { parse_variants("qsgd:bits=["); }),
             Catch::Contains("--methods qsgd:bits=[: the value of 'bits' is not valid YAML"));
}

TEST_CASE("compare: finished, unfinished and stale run directories", "[compare]") {
  TempDir tmp;
  const fs::path run = tmp.path() / "runs" / "fp32";
  CHECK(run_state(run.string(), "cmd", RunLength{2}) == RunState::absent);
  write_run(run, "{method: fp32}", {row(1, 10, 5, 0.9, 100)}, 1);
  CHECK(run_state(run.string(), "cmd", RunLength{2}) == RunState::unfinished);  // no marker
  write_marker(run.string(), "fp32", "cmd", 1.0);
  CHECK(run_state(run.string(), "cmd", RunLength{2}) == RunState::unfinished);  // 1 of 2 epochs
  CHECK(run_state(run.string(), "cmd", RunLength{1}) == RunState::finished);
  CHECK(run_state(run.string(), "other cmd", RunLength{1}) == RunState::stale);
  // A run bounded by train.max_steps ends in a partial epoch: finished once it reached its steps.
  const fs::path short_run = tmp.path() / "runs" / "short";
  write_run(short_run, "{method: fp32}", {row(0, 100, 5, 0.9, 100)}, 1);
  write_marker(short_run.string(), "fp32", "cmd", 1.0);
  CHECK(run_state(short_run.string(), "cmd", RunLength{1, 100}) == RunState::finished);
  CHECK(run_state(short_run.string(), "cmd", RunLength{1, 200}) == RunState::unfinished);
  CHECK(run_state(short_run.string(), "cmd", RunLength{1}) == RunState::unfinished);
  CHECK(RunLength{2, 0}.str() == "2 epochs");
  CHECK(RunLength{1, 0}.str() == "1 epoch");
  CHECK(RunLength{1, 100}.str() == "1 epoch or 100 steps (train.max_steps), whichever comes first");
  CHECK(shell_join({"a b", "c=d", "it's"}) == "'a b' c=d 'it'\\''s'");
  CHECK(shell_split("'a b' c=d  'it'\\''s' ''") == std::vector<std::string>{"a b", "c=d", "it's", ""});
}

TEST_CASE("compare: a run's identity leaves out the qtrain binary, and a replaced run is kept", "[compare]") {
  // The same sweep launched by a qtrain built elsewhere reuses its finished runs; it used to delete and
  // retrain them (hours of training lost to a rebuilt binary).
  const std::string old_cmd = "mpirun -np 4 /old/build/qtrain train /c.yaml --set a=1";
  CHECK(run_identity(old_cmd) == run_identity("mpirun -np 4 '/new dir/qtrain' train /c.yaml --set a=1"));
  CHECK(run_identity(old_cmd) != run_identity("mpirun -np 2 /old/build/qtrain train /c.yaml --set a=1"));
  CHECK(run_identity(old_cmd) != run_identity("mpirun -np 4 /old/build/qtrain train /c.yaml --set a=2"));
  CHECK(run_identity("/bin/qtrain train /c.yaml") == run_identity("qtrain train /c.yaml"));
  // Resuming a sweep with or without --set output.progress=none must not retrain its runs.
  CHECK(run_identity("qtrain train /c.yaml --set output.progress=none --set output.progress=lines") ==
        run_identity("qtrain train /c.yaml --set output.progress=lines"));
  CHECK(run_identity("qtrain train /c.yaml --set output.dir=/r") != run_identity("qtrain train /c.yaml"));

  TempDir tmp;
  const fs::path run = tmp.path() / "runs" / "fp32";
  write_run(run, "{method: fp32}", {row(1, 10, 5, 0.9, 100)}, 1);
  write_marker(run.string(), "fp32", old_cmd, 1.0);
  CHECK(run_state(run.string(), "mpirun -np 4 /elsewhere/qtrain train /c.yaml --set a=1", RunLength{1}) ==
        RunState::finished);
  CHECK(run_state(run.string(), "mpirun -np 4 /old/build/qtrain train /c.yaml --set a=2", RunLength{1}) ==
        RunState::stale);

  // Moved aside, never deleted; a second replacement gets the next number.
  const std::string kept = set_aside(tmp.path().string(), run.string());
  CHECK(kept == (tmp.path() / "replaced" / "fp32.1").string());
  CHECK(!fs::exists(run));
  CHECK(fs::exists(fs::path(kept) / "compare.done"));
  write_run(run, "{method: fp32}", {row(1, 10, 5, 0.9, 100)}, 1);
  CHECK(set_aside(tmp.path().string(), run.string()) == (tmp.path() / "replaced" / "fp32.2").string());
}

TEST_CASE("compare report: table values and files from synthetic runs", "[compare][report]") {
  TempDir tmp;
  // fp32: 97.5% at epoch 2 (11 s); samples/s over both epochs: 20 steps / (10/1000 + 10/500) = 666.7.
  write_run(tmp.path() / "fp32", "{method: fp32}", {row(1, 10, 5, 0.95, 1000), row(2, 20, 11, 0.975, 500)}, 2);
  // fp16 (min_numel 0: every tensor in fp16): best 97.2% at epoch 1 (4 s), final 96.8%, 2000 samples/s.
  write_run(tmp.path() / "fp16", "{method: fp16, min_numel: 0}",
            {row(1, 10, 4, 0.972, 2000), row(2, 20, 8, 0.968, 2000)}, 2);
  const RunRecord fp32 = load_run((tmp.path() / "fp32").string(), "fp32");
  const RunRecord fp16 = load_run((tmp.path() / "fp16").string(), "fp16");
  // 16-8-3 MLP: (16*8 + 8) + (8*3 + 3) = 163 gradient values in two dense layers.
  CHECK(fp32.gradient_values == 163);
  CHECK(fp32.payload_bytes == 163 * 4);
  CHECK(fp16.payload_bytes == 163 * 2);
  CHECK(fp32.ranks == 2);
  // Per step: (2 rows * (0.1 + 0.2 + 0.3 + 0.4 + 0.5 exposed)) / 20 steps = 150 ms.
  CHECK(fp32.measured_step_s() == Approx(0.15));
  CHECK(fp32.profile.buckets.size() == 1);

  const SummaryRow a = summarize(fp32, 0.97);
  CHECK(a.final_accuracy == Approx(0.975));
  CHECK(a.best_epoch == 2);
  REQUIRE(a.time_to_target_s);
  CHECK(*a.time_to_target_s == Approx(11));
  CHECK(a.samples_per_s == Approx(20.0 / 0.03));
  CHECK(a.bits_per_value == Approx(32));
  const SummaryRow b = summarize(fp16, 0.97);
  CHECK(b.best_accuracy == Approx(0.972));
  CHECK(b.best_epoch == 1);
  CHECK(*b.time_to_target_s == Approx(4));
  CHECK(b.bits_per_value == Approx(16));
  CHECK_FALSE(summarize(fp16, 0.99).time_to_target_s);

  const std::string table = markdown_table(summarize_methods({fp32, fp16}, 0.97, {}, {}), 0.97, "fp32");
  CHECK_THAT(table, Catch::Contains("| samples/s | speedup over fp32 |"));
  // Waiting for the exchange: 0.5 s exposed per row, 2 rows / 20 steps = 50 ms of the 150 ms step.
  CHECK_THAT(table, Catch::Contains("| fp32 | 2 | 2 (20) | 97.50% | 97.50% (2) | 11.0 s | 667 | 1.00x | 150.0 | 33.3% "
                                    "| 32.00 | 0.000 MB | 1.000 |"));
  CHECK_THAT(table, Catch::Contains(
                        "| fp16 | 2 | 2 (20) | 96.80% | 97.20% (1) | 4.0 s | 2000 | 3.00x | 150.0 | 33.3% | 16.00 |"));
  // Every run exchanges every step: no schedule columns.
  CHECK_THAT(table, !Catch::Contains("schedule"));
  CHECK_THAT(markdown_table(summarize_methods({fp16}, 0.99, {}, {}), 0.99, "fp32"), Catch::Contains("| not reached |"));
  // Against the default baseline (bf16), absent here: no speedups.
  CHECK_THAT(markdown_table(summarize_methods({fp32, fp16}, 0.97, {}, {}), 0.97, "bf16"),
             Catch::Contains("| 2000 | - | 150.0 |"));

  const bool have_gnuplot = std::system("command -v gnuplot >/dev/null 2>&1") == 0;
  ReportOptions options;
  options.command = "build/qtrain compare x.yaml --methods fp32,fp16";
  options.baseline = "fp32";
  options.gnuplot = have_gnuplot ? "gnuplot" : "";
  const fs::path report = tmp.path() / "report";
  CHECK(write_report({fp32, fp16}, report.string(), options).empty());
  // A report folder under a file escaped as std::filesystem::filesystem_error.
  std::ofstream(tmp.path() / "a_file") << "x";
  CHECK_THAT(error_of([&] { write_report({fp32}, (tmp.path() / "a_file" / "r").string(), options); }),
             Catch::Contains("a_file/r/data: cannot create the report folder: Not a directory"));
  std::ifstream md(report / "report.md");
  const std::string text((std::istreambuf_iterator<char>(md)), std::istreambuf_iterator<char>());
  CHECK_THAT(text, Catch::Contains(options.command));
  CHECK_THAT(text, Catch::Contains("| fp16 | 2 | 2 (20) | 96.80% |"));
  CHECK(fs::exists(report / "plots.gp"));
  CHECK(fs::exists(report / "data" / "fp16.epochs.dat"));
  CHECK(fs::exists(report / "data" / "fp16.loss.dat"));
  // One seed per method: the report says that no interval or test can be given.
  CHECK_THAT(text, Catch::Contains("One seed per method: no confidence interval or test can be given"));
  CHECK_THAT(text, Catch::Contains("- **fp16**: final accuracy -0.70 points against fp32 (no test: it needs two seeds "
                                   "on each side); 3.00x fp32's samples/s."));
  CHECK_THAT(text, !Catch::Contains("95% confidence intervals over the seeds"));
  if (!have_gnuplot) {
    WARN("gnuplot is not installed: the images were not checked");
    return;
  }
  for (const char* name : {"accuracy", "loss_time", "tradeoff", "phases", "exchange", "bytes"})
    for (const char* ext : {".png", ".svg"}) {
      INFO(name << ext);
      CHECK(fs::file_size(report / (std::string(name) + ext)) > 1000);
    }
}

TEST_CASE("compare and predict: bad run directories", "[compare]") {
  TempDir tmp;
  CHECK_THAT(error_of([&] { load_run(tmp.path().string(), "x"); }), Catch::Contains("no metrics file"));
  std::ofstream(tmp.path() / "metrics.csv") << "epoch,step\n1,2\n";
  CHECK_THAT(error_of([&] { load_run(tmp.path().string(), "x"); }), Catch::Contains("the header has no column"));
  std::ofstream(tmp.path() / "metrics.csv") << MetricsWriter::header() << "\n";
  CHECK_THAT(error_of([&] { load_run(tmp.path().string(), "x"); }), Catch::Contains("no rows yet"));
  std::ofstream(tmp.path() / "metrics.csv") << MetricsWriter::header() << "\n1,2,3\n";
  CHECK_THAT(error_of([&] { load_run(tmp.path().string(), "x"); }), Catch::Contains("metrics.csv:2: 3 cells"));
  CHECK_THAT(error_of([&] { load_finished_runs(tmp.path().string()); }), Catch::Contains("no finished runs"));
}

TEST_CASE("predict: a run's shape and two levels come from its log", "[predict]") {
  TempDir tmp;
  const fs::path flat = tmp.path() / "flat", two = tmp.path() / "two", vote = tmp.path() / "vote";
  write_run(flat, "{method: qsgd}", {row(1, 10, 5, 0.9, 100)}, 4);
  write_run(two, "{method: qsgd}", {row(1, 10, 5, 0.9, 100)}, 4);
  write_run(vote, "{method: signsgd, min_numel: 0}", {row(1, 10, 5, 0.9, 100)}, 4);
  const RunRecord one_per_node = load_run(flat.string(), "qsgd");
  CHECK((one_per_node.nodes == 4 && one_per_node.ranks_per_node == 1 && !one_per_node.two_level));
  std::ofstream(flat / "train.log", std::ios::app)
      << "[2026-01-01 00:00:00.000] topology: 2 node(s) x 2 rank(s), "
         "communicator mpi\n  h0: rank 0 (local 0, cpu), rank 1 (local 1, cpu)\n";
  std::ofstream(two / "train.log", std::ios::app)
      << "[2026-01-01 00:00:00.000] topology: 2 node(s) x 2 rank(s), communicator mpi\n"
         "[2026-01-01 00:00:00.000] gradient exchange:\ntwo levels: 2 node(s) x 2 rank(s); inside a node an bf16 sum, "
         "then\n";
  const RunRecord f = load_run(flat.string(), "qsgd"), t = load_run(two.string(), "qsgd");
  CHECK((f.nodes == 2 && f.ranks_per_node == 2 && !f.two_level && f.two_level_unsuited.empty()));
  CHECK((t.nodes == 2 && t.ranks_per_node == 2 && t.two_level && t.intra == "bf16"));
  CHECK(load_run(vote.string(), "signsgd").two_level_unsuited == "signsgd");
}

TEST_CASE("compare and predict: damaged cells and sweep files are named", "[compare]") {
  TempDir tmp;
  const fs::path run = tmp.path() / "runs" / "fp32";
  write_run(run, "{method: fp32}", {row(1, 10, 5, 0.9, 100)}, 1);
  REQUIRE(load_run(run.string(), "x").steps() == 10);
  std::string good;
  {
    std::ifstream in(run / "metrics.csv");
    std::getline(in, good);  // header
    std::getline(in, good);
  }
  const auto with_cells = [&](const std::string& epoch, const std::string& step, const std::string& wall) {
    std::string line = good;
    line = epoch + "," + step + "," + wall + line.substr(line.find(',', line.find(',', line.find(',') + 1) + 1));
    std::ofstream(run / "metrics.csv") << MetricsWriter::header() << "\n" << line << "\n";
    return error_of([&] { load_run(run.string(), "x"); });
  };
  // These were read as numbers: a NaN or huge step (cast to int64_t, undefined), a negative step and
  // a negative time silently changed every per-step figure of predict and the report.
  CHECK_THAT(with_cells("1", "nan", "5"),
             Catch::Contains("metrics.csv:2: column step: expected a non-negative number, got 'nan'"));
  CHECK_THAT(with_cells("1", "-5", "5"), Catch::Contains("column step: expected a non-negative number, got '-5'"));
  CHECK_THAT(with_cells("1", "1e300", "5"), Catch::Contains("column step: expected a whole number, got '1e300'"));
  CHECK_THAT(with_cells("1.5", "10", "5"), Catch::Contains("column epoch: expected a whole number, got '1.5'"));
  CHECK_THAT(with_cells("1", "10", "-inf"), Catch::Contains("column wall_time_s: expected a non-negative number"));
  CHECK(with_cells("1", "10", "5") == "(no error)");

  // The sweep's own files: yaml-cpp's exceptions used to escape ("qtrain: unexpected error").
  write_marker(run.string(), "fp32", "cmd", 1.0);
  REQUIRE(load_finished_runs(tmp.path().string()).size() == 1);
  const std::string sweep = (tmp.path() / "sweep.yaml").string();
  std::ofstream(sweep) << "variants: [\n";
  CHECK_THAT(error_of([&] { load_finished_runs(tmp.path().string()); }),
             Catch::Contains(sweep + ":2:1: YAML syntax error"));
  std::ofstream(sweep) << "variants:\n  - {label: fp32}\n";
  CHECK_THAT(error_of([&] { load_finished_runs(tmp.path().string()); }),
             Catch::Contains(sweep + ":2:5: expected 'folder' with a string value"));
  std::ofstream(sweep) << "variants: 5\n";
  CHECK_THAT(error_of([&] { load_finished_runs(tmp.path().string()); }),
             Catch::Contains(sweep + ": expected 'variants' with a list"));
  std::ofstream(sweep) << "variants:\n  - {folder: ../elsewhere, label: x}\n";
  CHECK_THAT(error_of([&] { load_finished_runs(tmp.path().string()); }),
             Catch::Contains("variant folder '../elsewhere' must be a folder name under runs/"));
  fs::remove(sweep);
  const std::string marker = (run / "compare.done").string();
  std::ofstream(marker) << "label: {a: 1}\ncommand: cmd\n";
  CHECK_THAT(error_of([&] { load_finished_runs(tmp.path().string()); }),
             Catch::Contains(marker + ":1:1: expected 'label' with a string value"));
  CHECK(run_state(run.string(), "cmd", RunLength{1}) == RunState::finished);
  std::ofstream(marker) << "command: [\n";
  CHECK(run_state(run.string(), "cmd", RunLength{1}) == RunState::unfinished);  // unreadable: proves nothing
}

TEST_CASE("compare report: error-rate columns and plots for sequence tasks", "[compare][report]") {
  TempDir tmp;
  auto seq_row = [](int64_t epoch, double cer, double wer) {
    MetricsRow r = row(epoch, 10 * epoch, 5.0 * static_cast<double>(epoch), 0.1, 100);
    r.test_cer = cer;
    r.test_wer = wer;
    return r;
  };
  // fp32: CER 30% then 18%, lowest at epoch 2; qsgd 2-bit: 18% at epoch 1, 20% at the end.
  write_run(tmp.path() / "fp32", "{method: fp32}", {seq_row(1, 0.30, 0.70), seq_row(2, 0.18, 0.41)}, 4);
  write_run(tmp.path() / "q2", "{method: qsgd, bits: 2}", {seq_row(1, 0.18, 0.40), seq_row(2, 0.20, 0.45)}, 4);
  const RunRecord fp32 = load_run((tmp.path() / "fp32").string(), "fp32");
  const RunRecord q2 = load_run((tmp.path() / "q2").string(), "qsgd:bits=2");
  REQUIRE(fp32.rows.back().has_error_rates());
  CHECK(fp32.rows.back().test_wer == Approx(0.41));
  const SummaryRow b = summarize(q2, 0.97);
  REQUIRE(b.best_cer);
  CHECK(*b.best_cer == Approx(0.18));
  CHECK(b.best_cer_epoch == 1);
  CHECK(*b.final_cer == Approx(0.20));
  CHECK(*b.final_wer == Approx(0.45));
  const std::string table = markdown_table(summarize_methods({fp32, q2}, 0.97, {}, {}), 0.97, "fp32");
  CHECK_THAT(table, Catch::Contains("| best accuracy (epoch) | final CER | final WER | best CER (epoch) | time to"));
  CHECK_THAT(table, Catch::Contains(
                        "| fp32 | 4 | 2 (20) | 10.00% | 10.00% (1) | 18.00% | 41.00% | 18.00% (2) | not reached |"));
  CHECK_THAT(table,
             Catch::Contains("| qsgd:bits=2 | 4 | 2 (20) | 10.00% | 10.00% (1) | 20.00% | 45.00% | 18.00% (1) |"));

  // Classification runs keep the table without the error-rate columns.
  write_run(tmp.path() / "mlp", "{method: fp32}", {row(1, 10, 5, 0.9, 100)}, 1);
  const RunRecord mlp = load_run((tmp.path() / "mlp").string(), "fp32");
  CHECK_FALSE(mlp.rows.back().has_error_rates());
  CHECK_THAT(markdown_table(summarize_methods({mlp}, 0.97, {}, {}), 0.97, "fp32"), !Catch::Contains("CER"));
  // Mixed: a run without error rates shows "-" in those columns.
  RunRecord mlp2 = mlp;
  mlp2.label = "mlp";
  CHECK_THAT(markdown_table(summarize_methods({fp32, mlp2}, 0.97, {}, {}), 0.97, "fp32"),
             Catch::Contains("| 90.00% (1) | - | - | - |"));

  const bool have_gnuplot = std::system("command -v gnuplot >/dev/null 2>&1") == 0;
  ReportOptions options;
  options.gnuplot = have_gnuplot ? "gnuplot" : "";
  options.baseline = "fp32";
  const fs::path report = tmp.path() / "report";
  CHECK(write_report({fp32, q2}, report.string(), options).empty());
  std::ifstream data(report / "data" / "qsgd_bits2.epochs.dat");
  const std::string text((std::istreambuf_iterator<char>(data)), std::istreambuf_iterator<char>());
  // epoch, accuracy mean/min/max, CER mean/min/max, WER mean/min/max, wall time (one seed: min = max = mean)
  CHECK_THAT(text, Catch::Contains("2 10.0000 10.0000 10.0000 20.0000 20.0000 20.0000 45.0000 45.0000 45.0000 10.000"));
  if (!have_gnuplot) {
    WARN("gnuplot is not installed: the images were not checked");
    return;
  }
  for (const char* name : {"cer", "wer"})
    for (const char* ext : {".png", ".svg"}) {
      INFO(name << ext);
      CHECK(fs::file_size(report / (std::string(name) + ext)) > 1000);
    }
}

TEST_CASE("compare: --seeds is a count or a list; anything else is named", "[compare][seeds]") {
  CHECK(parse_seeds("3") == std::vector<int64_t>{1, 2, 3});
  CHECK(parse_seeds("1") == std::vector<int64_t>{1});
  CHECK(parse_seeds("7,0,42") == std::vector<int64_t>{7, 0, 42});
  CHECK(error_of([] { parse_seeds("0"); }) ==
        "--seeds 0: a count of seeds must be in [1, 1000]; expected a count N >= 1 (seeds 1..N) or a comma-separated "
        "list of seeds (whole numbers >= 0), e.g. --seeds 3 or --seeds 1,2,3");
  CHECK_THAT(error_of([] { parse_seeds("a,b"); }),
             Catch::StartsWith("--seeds a,b: 'a' is not a whole number >= 0; expected"));
  CHECK_THAT(error_of([] { parse_seeds("1,,2"); }), Catch::StartsWith("--seeds 1,,2: '' is not a whole number"));
  CHECK_THAT(error_of([] { parse_seeds("-1"); }), Catch::StartsWith("--seeds -1: '-1' is not a whole number"));
  CHECK_THAT(error_of([] { parse_seeds("1.5"); }), Catch::StartsWith("--seeds 1.5: '1.5' is not a whole number"));
  CHECK_THAT(error_of([] { parse_seeds(""); }), Catch::StartsWith("--seeds : '' is not a whole number"));
  CHECK_THAT(error_of([] { parse_seeds("1001"); }), Catch::Contains("a count of seeds must be in [1, 1000]"));
  CHECK_THAT(error_of([] { parse_seeds("99999999999999999999"); }), Catch::Contains("is not a whole number"));
  CHECK(error_of([] { parse_seeds("1,2,1"); }) == "--seeds 1,2,1: seed 1 is given twice");
  CHECK(run_folder("qsgd_bits4", std::nullopt) == "qsgd_bits4");
  CHECK(run_folder("qsgd_bits4", 2) == "qsgd_bits4/seed2");
}

TEST_CASE("compare: --baseline joins the runs unless --methods names it", "[compare][baseline]") {
  std::vector<Variant> v = parse_variants("fp32,qsgd:bits=4");
  CHECK(add_baseline(v, "bf16") == "bf16");
  REQUIRE(v.size() == 3);
  CHECK(v[0].label == "bf16");  // first: the baseline runs before the methods measured against it
  CHECK(v[0].overrides == std::vector<std::string>{"quantization.method=bf16"});
  CHECK(add_baseline(v, "fp32") == "fp32");
  CHECK(add_baseline(v, "qsgd:bits=4") == "qsgd:bits=4");
  CHECK(v.size() == 3);
  std::vector<Variant> w = parse_variants("fp32");
  CHECK(add_baseline(w, "qsgd:bits=8") == "qsgd:bits=8");
  CHECK(w[0].overrides == std::vector<std::string>{"quantization.method=qsgd", "quantization.bits=8"});
  CHECK_THAT(error_of([&] { add_baseline(w, "int3"); }),
             Catch::StartsWith("--baseline int3: quantization.method must be one of fp32, fp16, bf16, dettmers8"));
  CHECK_THAT(error_of([&] { add_baseline(w, "qsgd:bits=3"); }),
             Catch::StartsWith("--baseline qsgd:bits=3: quantization.bits must be one of 2, 4, 8, 16"));
  CHECK(error_of([&] { add_baseline(w, "fp32,fp16"); }) ==
        "--baseline fp32,fp16: give one method (with its parameters, e.g. qsgd:bits=8), not a list");
  CHECK_THAT(error_of([&] { add_baseline(w, ""); }), Catch::Contains("--baseline: the list is empty"));
  CHECK(w.size() == 2);  // errors add nothing
}

namespace {

// A sweep folder as `compare --seeds` leaves it: sweep.yaml, and per method and seed a finished run
// whose final accuracy is given (two epochs; epoch 1 at 90%).
void write_seeded_run(const fs::path& sweep, const std::string& folder, const std::string& label,
                      const std::string& quantization, int seed, double final_accuracy, double samples_per_s) {
  const fs::path run = sweep / "runs" / run_folder(folder, seed);
  write_run(run, quantization,
            {row(1, 10, 5, 0.90, samples_per_s), row(2, 20, 10 + seed, final_accuracy, samples_per_s)}, 4, seed);
  write_marker(run.string(), label, "cmd", 1.0);
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace

TEST_CASE("compare report: seeds give means, intervals and Welch's test; a missing seed is marked",
          "[compare][report][seeds]") {
  TempDir tmp;
  const fs::path sweep = tmp.path() / "sweep";
  fs::create_directories(sweep);
  std::ofstream(sweep / "sweep.yaml")
      << "command: build/qtrain compare x.yaml --seeds 3\nbaseline: fp32\nseeds: [1, 2, 3]\n"
         "variants:\n  - {label: fp32, folder: fp32}\n  - {label: fp16, folder: fp16}\n"
         "  - {label: qsgd:bits=2, folder: qsgd_bits2}\n  - {label: onebit, folder: onebit}\n";
  // fp32: 97.0 / 97.2 / 97.4 (mean 97.2, sd 0.2 points); 1000 samples/s.
  for (int seed : {1, 2, 3})
    write_seeded_run(sweep, "fp32", "fp32", "{method: fp32}", seed, 0.970 + 0.002 * (seed - 1), 1000);
  // fp16: 97.1 / 96.9 / 97.5 (mean 97.1667, sd 0.3055): within the spread.
  const double fp16[] = {0.971, 0.969, 0.975};
  for (int seed : {1, 2, 3}) write_seeded_run(sweep, "fp16", "fp16", "{method: fp16}", seed, fp16[seed - 1], 2000);
  // qsgd 2-bit: 95.8 / 96.0 / 96.2: 1.2 points below fp32 with the same spread.
  for (int seed : {1, 2, 3})
    write_seeded_run(sweep, "qsgd_bits2", "qsgd:bits=2", "{method: qsgd, bits: 2}", seed, 0.958 + 0.002 * (seed - 1),
                     3000);
  // onebit: seeds 1 and 2 finished, seed 3 unfinished (no marker): reported on two seeds, marked.
  for (int seed : {1, 2})
    write_seeded_run(sweep, "onebit", "onebit", "{method: onebit}", seed, 0.965 + 0.001 * seed, 4000);
  write_run(sweep / "runs" / "onebit" / "seed3", "{method: onebit}", {row(1, 10, 5, 0.5, 4000)}, 4, 3);

  const SweepRecord record = load_sweep(sweep.string());
  CHECK(record.seeds == std::vector<int64_t>{1, 2, 3});
  CHECK(record.baseline == "fp32");
  CHECK(record.labels == std::vector<std::string>{"fp32", "fp16", "qsgd:bits=2", "onebit"});
  REQUIRE(record.runs.size() == 11);
  CHECK(record.runs[3].label == "fp16");
  CHECK(record.runs[3].seed == 1);

  const std::vector<MethodSummary> methods = summarize_methods(record.runs, 0.97, record.seeds, record.labels);
  REQUIRE(methods.size() == 4);
  CHECK(methods[3].runs.size() == 2);
  CHECK(methods[3].missing_seeds == std::vector<uint64_t>{3});
  CHECK_FALSE(methods[3].complete());
  CHECK(methods[0].complete());

  const std::string table = markdown_table(methods, 0.97, "fp32");
  CHECK_THAT(
      table,
      Catch::Contains("| method | seeds | ranks | epochs (steps) | final accuracy | best accuracy | time to 97.00% |"));
  // Means ± sample standard deviations; time to 97%: fp32's seeds reach it at 11, 12 and 13 s.
  CHECK_THAT(table,
             Catch::Contains("| fp32 | 3 (1, 2, 3) | 4 | 2 (20) | 97.20 ± 0.20% | 97.20 ± 0.20% | 12.0 ± 1.0 s | "
                             "1000 ± 0 | 1.00x |"));
  // fp16's seed 2 (96.9%) never reaches 97%: the time is over seeds 1 and 3 (11 and 13 s), and says so.
  CHECK_THAT(table, Catch::Contains("| fp16 | 3 (1, 2, 3) | 4 | 2 (20) | 97.17 ± 0.31% | 97.17 ± 0.31% | 12.0 ± 1.4 s "
                                    "(2 of 3 seeds reached it) | 2000 ± 0 | 2.00x |"));
  CHECK_THAT(table, Catch::Contains(
                        "| qsgd:bits=2 | 3 (1, 2, 3) | 4 | 2 (20) | 96.00 ± 0.20% | 96.00 ± 0.20% | not reached |"));
  CHECK_THAT(table, Catch::Contains("| onebit | 2 of 3 (1, 2; 3 missing) | 4 | 2 (20) | 96.65 ± 0.07% |"));

  // 95% intervals: fp32 97.2 -+ t(0.975, 2) 0.2 / sqrt(3) = 97.2 -+ 0.4968.
  const std::string intervals = interval_table(methods, 0.97);
  CHECK_THAT(
      intervals,
      Catch::Contains("| fp32 | 3 (1, 2, 3) | 96.70 to 97.70% | 96.70 to 97.70% | 9.5 to 14.5 s | 1000 to 1000 |"));
  CHECK_THAT(intervals, Catch::Contains("| onebit | 2 of 3 (1, 2; 3 missing) | "));

  const std::string findings = baseline_findings(methods, "fp32");
  CHECK_THAT(findings, !Catch::Contains("One seed per method"));
  // fp16 - fp32 = -0.033 points; standard error sqrt(0.2^2/3 + 0.3055^2/3) = 0.2108, Welch t = -0.158 on
  // df = 3.45, p = 0.88: within the spread; half-width t(0.975, 3.45) 0.2108 = 2.95 x 0.2108 = 0.62.
  CHECK_THAT(
      findings,
      Catch::Contains(
          "- **fp16**: final accuracy: no detectable difference from fp32 (p=0.88; the "
          "difference, -0.03 ± 0.62 points at 95%, is within the seed-to-seed spread); 2.00x fp32's samples/s."));
  // qsgd 2-bit - fp32 = -1.2 points, se = sqrt(2 x 0.2^2 / 3) = 0.1633, t = -7.35 on 4 degrees of freedom:
  // p = 0.0018; half-width t(0.975, 4) x 0.1633 = 2.776 x 0.1633 = 0.45.
  CHECK_THAT(findings,
             Catch::Contains("- **qsgd:bits=2**: final accuracy: loses 1.20 ± 0.45 points against fp32 (p=0.0018); "
                             "3.00x fp32's samples/s."));
  CHECK_THAT(findings, Catch::Contains("- **onebit** (on 2 of its 3 seeds): final accuracy:"));

  // The whole report, through --report-only's path.
  ReportOptions options;
  options.baseline = record.baseline;
  options.seeds = record.seeds;
  options.labels = record.labels;
  options.gnuplot = "";
  CHECK(write_report(record.runs, (sweep / "report").string(), options).empty());
  const std::string md = read_text(sweep / "report" / "report.md");
  CHECK_THAT(md, Catch::Contains("## 95% confidence intervals over the seeds"));
  CHECK_THAT(md, Catch::Contains("## Against the baseline: fp32"));
  CHECK_THAT(md, Catch::Contains(table));
  // Curves: mean, min and max over the seeds per epoch (fp32's epoch 2: 97.2, 97.0, 97.4).
  CHECK_THAT(read_text(sweep / "report" / "data" / "fp32.epochs.dat"),
             Catch::Contains("\n2 97.2000 97.0000 97.4000 NaN NaN NaN NaN NaN NaN 12.000\n"));
  CHECK_THAT(read_text(sweep / "report" / "data" / "tradeoff.dat"),
             Catch::Contains("\"fp32\" 32.0000 97.2000 0.2000\n"));

  // A baseline without finished runs: no speedups, said so.
  CHECK_THAT(baseline_findings(methods, "bf16"), Catch::Contains("The baseline, bf16, has no finished run"));
  CHECK_THAT(markdown_table(methods, 0.97, "bf16"), Catch::Contains("| 1000 ± 0 | - |"));
  // A method whose every seed is missing is named below the table, never left out silently.
  fs::remove(sweep / "runs" / "onebit" / "seed1" / "compare.done");
  fs::remove(sweep / "runs" / "onebit" / "seed2" / "compare.done");
  const SweepRecord fewer = load_sweep(sweep.string());
  CHECK_THAT(markdown_table(summarize_methods(fewer.runs, 0.97, fewer.seeds, fewer.labels), 0.97, "fp32"),
             Catch::Contains("No finished run (not in the table): onebit."));
  // Damaged seeds in sweep.yaml are named.
  std::ofstream(sweep / "sweep.yaml") << "seeds: [1, x]\nvariants:\n  - {label: fp32, folder: fp32}\n";
  CHECK_THAT(error_of([&] { load_sweep(sweep.string()); }),
             Catch::Contains("sweep.yaml:1:12: expected a seed (a whole number >= 0) in 'seeds'"));
}

TEST_CASE("compare report: the loss curve is a moving average that runs on across epochs", "[compare][report]") {
  // Per-step losses 4, 2 (epoch 1) and 1, 1 (epoch 2), recorded as the trainer does: the running mean
  // since the epoch's start after every step.
  RunRecord run;
  run.rows.resize(2);
  run.rows[0].epoch = 1;
  run.rows[0].step = 2;
  run.rows[0].train_loss = 3;
  run.rows[1].epoch = 2;
  run.rows[1].step = 4;
  run.rows[1].train_loss = 1;
  run.curve = {{1, 1, 4}, {2, 2, 3}, {3, 3, 1}, {4, 4, 1}};
  // Half-life of one step: each step moves the average half way to its loss.
  const std::vector<LossPoint> ema = smoothed_loss(run, 1);
  REQUIRE(ema.size() == 4);
  CHECK(ema[0].loss == Approx(4));
  CHECK(ema[1].loss == Approx(3));  // (4 + 2) / 2
  CHECK(ema[2].loss == Approx(2));  // (3 + 1) / 2: epoch 2 starts from the average, not afresh
  CHECK(ema[3].loss == Approx(1.5));
  CHECK(ema[3].wall_s == 4);
  // Records every 2 steps: the interval means (4+2)/2 = 3, then 1 (epoch 2); factor 1 - 0.25.
  run.curve = {{2, 2, 3}, {4, 4, 1}};
  const std::vector<LossPoint> coarse = smoothed_loss(run, 1);
  REQUIRE(coarse.size() == 2);
  CHECK(coarse[1].loss == Approx(0.25 * 3 + 0.75 * 1));
  // Within an epoch the interval mean comes from two running means: steps 3-4 of a 4-step epoch with
  // running means 3 (after step 2) and 2 (after step 4) averaged 1.
  RunRecord one;
  one.rows.resize(1);
  one.rows[0].epoch = 1;
  one.rows[0].step = 4;
  one.curve = {{1, 2, 3}, {2, 4, 2}};
  CHECK(smoothed_loss(one, 1e9)[1].loss == Approx(3).epsilon(1e-6));   // barely moves from 3
  CHECK(smoothed_loss(one, 1e-3)[1].loss == Approx(1).epsilon(1e-6));  // jumps to the interval's 1
  // Without curve.csv: the per-epoch rows (each the mean of its epoch).
  run.curve.clear();
  CHECK(smoothed_loss(run, 1)[1].loss == Approx(0.25 * 3 + 0.75 * 1));
  CHECK(default_half_life(4000) == 100);
  CHECK(default_half_life(10) == 1);
}
