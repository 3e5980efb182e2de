// compare, report and predict on runs that do not exchange every step (sync.type diloco, demo): the
// schedule read from a run's config and its exchanges counted as DiLoCoSync makes them, --methods
// entries with an '@' schedule, the report's bytes averaged over whole periods beside a per-step run,
// and predict's H / F / tau arithmetic against hand-computed cases.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "framework/core/check.h"
#include "tests/support/error_of.h"
#include "tests/support/temp_dir.h"
#include "tools/qtrain/method_summary.h"
#include "tools/qtrain/predict_model.h"
#include "tools/qtrain/report.h"
#include "tools/qtrain/run_record.h"
#include "tools/qtrain/sweep.h"
#include "tools/qtrain/sync_schedule.h"
#include "train/metrics.h"

using namespace qtrain;
using namespace qtrain::cli;
using qtrain::testing::error_of;
using qtrain::testing::TempDir;
namespace fs = std::filesystem;

namespace {

using Type = SyncSchedule::Type;

SyncSchedule diloco(int64_t h, int64_t f = 1, int64_t tau = 0) { return {Type::diloco, h, f, tau}; }

// A run directory as the trainer leaves it: a 16-8-3 MLP (163 gradient values), fp32 exchanged, on
// `ranks` ranks, with the given `sync` section (YAML, empty for none) and metrics rows.
void write_run(const fs::path& dir, const std::string& sync, const std::vector<MetricsRow>& rows, int ranks) {
  fs::create_directories(dir);
  std::ofstream(dir / "config.resolved.yaml")
      << "name: synthetic\nseed: 1\ndevice: cpu\ndata: {dataset: mnist, path: /nonexistent, batch_size: 10}\n"
         "model:\n  input: [1, 4, 4]\n  layers:\n    - {type: flatten}\n    - {type: dense, units: 8}\n"
         "    - {type: relu}\n    - {type: dense, units: 3}\n  loss: softmax_cross_entropy\n"
         "optimizer: {type: sgd, lr: 0.1}\ntrain: {epochs: 2}\nquantization: {method: fp32}\n"
      << (sync.empty() ? "" : "sync: " + sync + "\n");
  std::ofstream(dir / "train.log") << "[2026-01-01 00:00:00.000] data parallel: " << ranks << " rank(s) over mpi\n";
  MetricsWriter writer((dir / "metrics.csv").string());
  for (const MetricsRow& r : rows) writer.append(r);
}

// One epoch's row: `bytes` sent in it, 0.1 s of each compute phase and `exposed` s waited for.
MetricsRow row(int64_t epoch, int64_t step, double accuracy, double bytes, double exposed) {
  MetricsRow r;
  r.epoch = epoch;
  r.step = step;
  r.wall_time_s = 10.0 * static_cast<double>(epoch);
  r.train_loss = 0.5;
  r.test_accuracy = accuracy;
  r.samples_per_s = 1000;
  for (Phase p : {Phase::data, Phase::forward, Phase::backward, Phase::optimizer}) r.phases.add(p, 0.1);
  r.phases.add(Phase::encode, 0.03);
  r.bytes_sent = bytes;
  r.bytes_sent_per_step = bytes / 16;
  r.exposed_comm_s = exposed;
  return r;
}

SyncSchedule schedule_of(const fs::path& dir, const std::string& sync) {
  write_run(dir, sync, {row(1, 10, 0.9, 0, 0)}, 2);
  return load_run(dir.string(), "x").schedule;
}

predict::Bucket fp32_bucket(double values) {
  predict::Bucket b;
  b.values = values;
  b.allreduce_values = values;
  b.allreduce_bytes = 4 * values;
  return b;
}

// 20 ms forward + 30 ms backward of compute, one fp32 bucket of 1e6 values (4 MB), under `schedule`.
predict::StepProfile profile(const SyncSchedule& schedule) {
  predict::StepProfile p;
  p.forward_s = 0.02;
  p.backward_s = 0.03;
  p.overlap = false;
  p.schedule = schedule;
  p.buckets = {fp32_bucket(1e6)};
  return p;
}

}  // namespace

TEST_CASE("schedules: exchanges counted as DiLoCoSync makes them", "[schedule]") {
  CHECK(SyncSchedule{}.exchanges(32) == 32);
  CHECK(SyncSchedule{Type::demo}.exchanges(7) == 7);
  // H = 10: at steps 10, 20, 30.
  CHECK(diloco(10).exchanges(9) == 0);
  CHECK(diloco(10).exchanges(32) == 3);
  // F = 2: fragment 0 at 10, 20, 30, fragment 1 (offset 5) at 5, 15, 25: 3 by step 16, 6 by step 32.
  CHECK(diloco(10, 2).exchanges(4) == 0);
  CHECK(diloco(10, 2).exchanges(5) == 1);
  CHECK(diloco(10, 2).exchanges(16) == 3);
  CHECK(diloco(10, 2, 2).exchanges(32) == 6);
  // F = 3, offsets 0, 3, 6: fragment 2 first at step 4, fragment 1 at 7, fragment 0 at 10.
  CHECK(diloco(10, 3).exchanges(3) == 0);
  CHECK(diloco(10, 3).exchanges(4) == 1);
  CHECK(diloco(10, 3).exchanges(7) == 2);
  CHECK(diloco(10, 3).exchanges(10) == 3);
  CHECK(diloco(10, 3).exchanges_per_step() == Approx(0.3));
  // tau = 3: by step 40 fragment 0's exchange of step 40 is still in flight, fragment 1's of step 35 landed.
  CHECK(diloco(10, 2, 3).exchanges(40) == 8);
  CHECK(diloco(10, 2, 3).landed_exchanges(40) == 7);
  CHECK(diloco(10, 2, 3).landed_exchanges(2) == 0);
  CHECK(diloco(10).landed_exchanges(40) == 4);
  CHECK(SyncSchedule{}.exchanges_per_step() == 1);

  CHECK(SyncSchedule{}.str() == "every step");
  CHECK(SyncSchedule{Type::demo}.str() == "DeMo");
  CHECK(diloco(50).str() == "DiLoCo H=50");
  CHECK(diloco(50, 4, 5).str() == "DiLoCo H=50 F=4 tau=5");
}

TEST_CASE("schedules: read from a run's config, with the strategies' defaults and ranges", "[schedule]") {
  TempDir tmp;
  const fs::path d = tmp.path() / "run";
  CHECK(schedule_of(d, "") == SyncSchedule{});
  CHECK(schedule_of(d, "{type: diloco}") == diloco(500));
  CHECK(schedule_of(d, "{type: diloco, inner_steps: 50, fragments: 4, overlap: 5, mix: 0.3, outer: {lr: 1}}") ==
        diloco(50, 4, 5));
  CHECK(schedule_of(d, "{type: demo, topk: 8}").type == Type::demo);
  const std::string config = (d / "config.resolved.yaml").string();
  CHECK_THAT(error_of([&] { schedule_of(d, "{type: diloco, inner_steps: 4, fragments: 5}"); }),
             Catch::Contains(config) && Catch::Contains("sync.fragments") && Catch::Contains("at most"));
  CHECK_THAT(error_of([&] { schedule_of(d, "{type: diloco, inner_steps: 4, overlap: 4}"); }),
             Catch::Contains("sync.overlap") && Catch::Contains("less than sync.inner_steps (4)"));
  CHECK_THAT(error_of([&] { schedule_of(d, "{type: diloco, inner_steps: 0}"); }), Catch::Contains("sync.inner_steps"));
  CHECK_THAT(error_of([&] { schedule_of(d, "{type: periodic}"); }),
             Catch::Contains("sync.type must be one of") && Catch::Contains("diloco"));
  // The per-step strategy has no keys: a stray one is an error, as in the trainer.
  CHECK_THAT(error_of([&] { schedule_of(d, "{inner_steps: 10}"); }), Catch::Contains("sync.inner_steps"));
}

TEST_CASE("schedules: --methods entries with an '@' schedule", "[schedule][compare]") {
  const std::vector<Variant> v =
      parse_variants("fp32,bf16@diloco:inner_steps=50,qsgd:bits=4@diloco:inner_steps=50:fragments=4:outer.lr=1");
  REQUIRE(v.size() == 3);
  CHECK(v[0].overrides == std::vector<std::string>{"quantization.method=fp32"});
  CHECK(v[1].label == "bf16@diloco:inner_steps=50");
  CHECK(v[1].folder == "bf16@diloco_inner_steps50");
  CHECK(v[1].overrides ==
        std::vector<std::string>{"quantization.method=bf16", "sync.type=diloco", "sync.inner_steps=50"});
  CHECK(v[2].overrides == std::vector<std::string>{"quantization.method=qsgd", "quantization.bits=4",
                                                   "sync.type=diloco", "sync.inner_steps=50", "sync.fragments=4",
                                                   "sync.outer.lr=1"});
  // The same method under two schedules is two variants; the same entry twice is an error.
  CHECK(parse_variants("bf16,bf16@diloco").size() == 2);
  CHECK_THAT(error_of([] { parse_variants("bf16@diloco,bf16@diloco"); }), Catch::Contains("given twice"));
  CHECK_THAT(error_of([] { parse_variants("bf16@periodic"); }),
             Catch::Contains("--methods bf16@periodic: unknown sync.type 'periodic'") && Catch::Contains("diloco"));
  CHECK_THAT(error_of([] { parse_variants("bf16@"); }), Catch::Contains("expected a sync.type after '@'"));
  CHECK_THAT(error_of([] { parse_variants("@diloco"); }), Catch::Contains("expected a quantization method"));
  CHECK_THAT(error_of([] { parse_variants("bf16@diloco:inner_steps"); }),
             Catch::Contains("expected key=value of the sync section after '@diloco', got 'inner_steps'"));
  CHECK_THAT(error_of([] { parse_variants("bf16@diloco:type=demo"); }), Catch::Contains("'sync.type' is given twice"));
  CHECK_THAT(error_of([] { parse_variants("qsgd:bits=3@diloco"); }), Catch::Contains("quantization.bits"));
}

TEST_CASE("schedules: the report puts DiLoCo beside a per-step run, bytes over whole periods", "[schedule][report]") {
  TempDir tmp;
  // Per step: 200 kB a step, 10 steps an epoch; per step 40 ms of compute (0.4 s / 10) and 50 ms waited
  // for the exchange (0.5 s / 10): 90 ms, 55.6% of it waiting.
  write_run(tmp.path() / "step", "", {row(1, 10, 0.95, 2e6, 0.5), row(2, 20, 0.975, 2e6, 0.5)}, 2);
  // DiLoCo H = 10, 16 steps an epoch: one exchange (step 10) in the first, two (20, 30) in the second,
  // 1 MB each. The whole-period average is 1 MB / 10 steps = 100 kB; the run's bytes over its steps
  // (3 MB / 32 = 93.75 kB) or the last epoch's (2 MB / 16 = 125 kB) would not be.
  write_run(tmp.path() / "diloco", "{type: diloco, inner_steps: 10}",
            {row(1, 16, 0.9, 1e6, 0.16), row(2, 32, 0.97, 2e6, 0.16)}, 2);
  // Streaming, F = 2, tau = 2: 3 exchanges of 0.5 MB in each epoch (5, 10, 15 and 20, 25, 30); per
  // step 2 x 0.5 MB / 10 = 100 kB, at 0.5 MB a burst.
  write_run(tmp.path() / "streaming", "{type: diloco, inner_steps: 10, fragments: 2, overlap: 2}",
            {row(1, 16, 0.9, 1.5e6, 0.0), row(2, 32, 0.96, 1.5e6, 0.0)}, 2);
  const RunRecord step = load_run((tmp.path() / "step").string(), "fp32");
  const RunRecord dl = load_run((tmp.path() / "diloco").string(), "bf16@diloco");
  const RunRecord st = load_run((tmp.path() / "streaming").string(), "bf16@streaming");
  CHECK(step.bytes_per_step() == Approx(2e5));
  CHECK(step.bytes_per_exchange() == Approx(2e5));
  CHECK(dl.bytes_sent() == Approx(3e6));
  CHECK(dl.bytes_per_exchange() == Approx(1e6));
  CHECK(dl.bytes_per_step() == Approx(1e5));
  CHECK(st.bytes_per_exchange() == Approx(5e5));
  CHECK(st.bytes_per_step() == Approx(1e5));
  // tau = 3 and 40 steps (as measured on 2 ranks at 100 Mbit/s): 7 exchanges of 0.5 MB had landed
  // and were counted; the 8th, begun at step 40, had not sent its bytes when the last row was written.
  write_run(tmp.path() / "in_flight", "{type: diloco, inner_steps: 10, fragments: 2, overlap: 3}",
            {row(1, 40, 0.9, 3.5e6, 0.0)}, 2);
  const RunRecord in_flight = load_run((tmp.path() / "in_flight").string(), "in flight");
  CHECK(in_flight.bytes_per_exchange() == Approx(5e5));
  CHECK(in_flight.bytes_per_step() == Approx(1e5));
  // Per step 25 ms of compute (0.8 s / 32) and 10 ms waited for (0.32 s / 32): 10 of 35 ms.
  CHECK(dl.measured_step_s() == Approx(0.035));
  CHECK(dl.exposed_share() == Approx(10.0 / 35));
  // Encode per exchange of the model: 0.06 s over DiLoCo's 3 exchanges, over F = 2's 6 / 2, per step's 20.
  CHECK(dl.profile.encode_s == Approx(0.02));
  CHECK(st.profile.encode_s == Approx(0.02));
  CHECK(step.profile.encode_s == Approx(0.003));
  CHECK(!dl.profile.overlap);

  const std::vector<MethodSummary> methods = summarize_methods({step, dl, st}, 0.97, {}, {});
  const std::string table = markdown_table(methods, 0.97, "fp32");
  CHECK_THAT(table, Catch::Contains("| method | ranks | schedule | epochs (steps) |"));
  CHECK_THAT(table, Catch::Contains("| waiting for the exchange | bits per value | sent per step per rank | sent per "
                                    "exchange per rank | fraction quantized |"));
  CHECK_THAT(table, Catch::Contains("| fp32 | 2 | every step | 2 (20) |"));
  CHECK_THAT(table, Catch::Contains("| 90.0 | 55.6% | 32.00 | 0.200 MB | 0.200 MB |"));
  CHECK_THAT(table, Catch::Contains("| bf16@diloco | 2 | DiLoCo H=10 | 2 (32) | 97.00% | 97.00% (2) | 20.0 s |"));
  CHECK_THAT(table, Catch::Contains("| 35.0 | 28.6% | 32.00 | 0.100 MB | 1.000 MB |"));
  CHECK_THAT(table, Catch::Contains("| bf16@streaming | 2 | DiLoCo H=10 F=2 tau=2 | 2 (32) |"));
  CHECK_THAT(table, Catch::Contains("| not reached |"));
  CHECK_THAT(table, Catch::Contains("| 25.0 | 0.0% | 32.00 | 0.100 MB | 0.500 MB |"));

  ReportOptions options;
  options.baseline = "fp32";
  options.gnuplot = "";
  const fs::path report = tmp.path() / "report";
  CHECK(write_report({step, dl, st}, report.string(), options).empty());
  std::ifstream md(report / "report.md");
  const std::string text((std::istreambuf_iterator<char>(md)), std::istreambuf_iterator<char>());
  CHECK_THAT(text, Catch::Contains("| DiLoCo H=10 |") && Catch::Contains("| every step |"));
  CHECK_THAT(text, Catch::Contains("averaged over whole sync periods"));
  CHECK_THAT(text, Catch::Contains("- sent per exchange per rank:"));
  std::ifstream bytes(report / "data" / "bytes.dat");
  const std::string data((std::istreambuf_iterator<char>(bytes)), std::istreambuf_iterator<char>());
  CHECK_THAT(data, Catch::Contains("\"bf16@diloco\" 0.100000"));
}

TEST_CASE("schedules: a DeMo run's payload is its codec's, exchanged by allgather", "[schedule][predict]") {
  TempDir tmp;
  write_run(tmp.path() / "demo", "{type: demo, chunk: 64, topk: 4}", {row(1, 10, 0.9, 0, 0)}, 2);
  const RunRecord r = load_run((tmp.path() / "demo").string(), "demo");
  CHECK(r.schedule.type == Type::demo);
  REQUIRE(r.profile.buckets.size() == 1);
  const predict::Bucket& b = r.profile.buckets.front();
  CHECK(b.values == 163);
  CHECK(b.transform_values == 163);
  CHECK(b.allreduce_bytes == 0);
  CHECK(b.allgather_bytes == r.payload_bytes);
  // Tensors of 128, 8, 24 and 3 values: 2 + 1 + 1 + 1 chunks of at most 4 kept coefficients, each an
  // index byte and an fp32 value, far below 163 fp32 values.
  CHECK(r.payload_bytes < 4 * 163);
  CHECK(r.two_level_unsuited == "demo");
}

TEST_CASE("predict: DiLoCo's exchange once per H steps, a fragment's per H / F, hidden behind tau steps",
          "[schedule][predict]") {
  // 2 ranks at 100 MB/s, no latency: the 4 MB ring allreduce sends 2 x 1/2 x 4 MB = 40 ms.
  const predict::Network net{1e8, 0.0};
  const predict::StepPrediction every = predict::predict_step(profile({}), 2, net);
  CHECK(every.exchange_s == Approx(0.04));
  CHECK(every.step_s == Approx(0.09));
  // H = 10: 40 ms once per 10 steps.
  const predict::StepPrediction h10 = predict::predict_step(profile(diloco(10)), 2, net);
  CHECK(h10.exchange_s == Approx(0.04));
  CHECK(h10.communicate_s == Approx(0.004));
  CHECK(h10.exposed_s == Approx(0.004));
  CHECK(h10.step_s == Approx(0.054));
  CHECK(h10.speedup == Approx(2 * 0.05 / 0.054));
  // F = 2: a fragment of 2 MB (20 ms) every 5 steps: the same 4 ms per step.
  const predict::StepPrediction f2 = predict::predict_step(profile(diloco(10, 2)), 2, net);
  CHECK(f2.exchange_s == Approx(0.02));
  CHECK(f2.exposed_s == Approx(0.004));
  // tau = 1: the 20 ms fragment hides behind one 50 ms step.
  const predict::StepPrediction hidden = predict::predict_step(profile(diloco(10, 2, 1)), 2, net);
  CHECK(hidden.exposed_s == 0);
  CHECK(hidden.communicate_s == Approx(0.004));
  CHECK(hidden.step_s == Approx(0.05));
  CHECK(hidden.speedup == Approx(2));
  // At 10 MB/s the fragment takes 200 ms; tau = 2 hides 100 ms of it: 2/10 x 100 ms = 20 ms per step.
  const predict::StepPrediction slow = predict::predict_step(profile(diloco(10, 2, 2)), 2, {1e7, 0.0});
  CHECK(slow.exchange_s == Approx(0.2));
  CHECK(slow.exposed_s == Approx(0.02));
  CHECK(slow.step_s == Approx(0.07));
  // Each fragment pays its messages' latency: 4 ranks, 1 ms per message, F = 4 of H = 8: a fragment
  // sends 2 x 3/4 x 1 MB = 1.5 MB (15 ms) plus 2 x 3 messages (6 ms); 4/8 x 21 ms per step.
  const predict::StepPrediction latency = predict::predict_step(profile(diloco(8, 4)), 4, {1e8, 1e-3});
  CHECK(latency.exchange_s == Approx(0.021));
  CHECK(latency.exposed_s == Approx(0.0105));
  // One replica exchanges nothing, whatever the schedule.
  CHECK(predict::predict_step(profile(diloco(10)), 1, net).step_s == Approx(0.05));
}

TEST_CASE("predict: encode and decode of a fragment are its share of the model's", "[schedule][predict]") {
  // Measured on 2 ranks: 10 ms encode and 20 ms decode per exchange of the whole model (an allgather of
  // 1e6 values: decode touches 2 payloads). On 4 ranks decode touches 4: 40 ms.
  predict::StepProfile p = profile(diloco(10, 2));
  p.buckets.front() = predict::Bucket{};
  p.buckets.front().values = 1e6;
  p.buckets.front().allgather_values = 1e6;
  p.buckets.front().allgather_bytes = 1e5;
  p.encode_s = 0.01;
  p.decode_s = 0.02;
  p.measured_ranks = 2;
  // A fragment: half of each, and 3 x 5e4 bytes at 1e8 B/s = 1.5 ms: 5 + 1.5 + 20 ms.
  const predict::StepPrediction s = predict::predict_step(p, 4, {1e8, 0.0});
  CHECK(s.exchange_s == Approx(0.0265));
  CHECK(s.encode_s == Approx(0.2 * 0.005));
  CHECK(s.decode_s == Approx(0.2 * 0.02));
  CHECK(s.exposed_s == Approx(0.2 * 0.0265));
}
