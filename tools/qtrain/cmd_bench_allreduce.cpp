// `qtrain bench-allreduce`: nccl-tests-style timing of the gradient exchange for every method and
// algorithm over a sweep of sizes, next to the baseline (--baseline: the bf16 all-reduce by default,
// any method entry, or `library`: the communicator's own fp32 all-reduce) and fp32 MPI_Allreduce,
// measured in the same run. Run it under
// mpirun (e.g. tools/netbed.sh run --hosts 4 --rate 1gbit -- build/qtrain bench-allreduce).
//
// Per size and variant: time per exchange (median over iterations, every rank synchronized by a
// barrier before each; the copy that restores the input is not timed), algbw = size / time, busbw = algbw * 2(P-1)/P
// (the allreduce convention), the bytes this rank put on the wire, the speedup over the baseline of the same size and,
// when --link-gbit is given, the ideal time and the ratio to it. The ideal is the busiest host link's bytes over the
// link rate, where the ranks of a host (a node: the ranks that share memory, or --ranks-per-node) share one link:
// with one rank per host, the rank's wire bytes; with L, the bytes the host's ranks send to other hosts (all of
// them for the two-level exchange, (P - L) / (P - 1) of them for the flat exchanges whose payloads go to every
// peer alike, and one rank's worth for the ring all-reduces, where only a host's last rank sends off it). Where the
// time goes on rank 0: its encode and decode time per exchange (wall clock on the exchange thread) and the CPU time of
// its whole process per exchange (user + system, so MPI's copies and the kernel's TCP work count): cpu near time means
// the rank computed all along, cpu well below time that it waited for the network or for a core.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <optional>
#include <string_view>

#include "comm/communicator.h"
#include "exchange/gradient_exchange.h"
#include "exchange/hierarchical_exchange.h"
#include "comm/mpi_comm.h"
#include "framework/core/context.h"
#include "framework/core/philox.h"
#include "tools/qtrain/commands.h"
#include "tools/qtrain/method_list.h"

namespace qtrain::cli {
namespace {

struct Options {
  std::vector<double> sizes_mb{1, 4, 16, 64, 256};
  std::string methods = method_variant_list();
  std::string baseline = "bf16";  // a method entry (its exchange with algorithm auto), or "library"
  std::vector<std::string> algorithms{"auto"};
  int iterations = 10;
  int warmup = 2;
  int64_t column = 1024;
  double link_gbit = 0;
  std::string backend = "mpi";
  std::string device;  // cpu, cuda or auto; empty: cuda for the nccl backend, else cpu
  std::string mpi_allreduce = "ring";
  double piece_mb = ExchangeConfig{}.piece_mb;
  std::string hierarchy = ExchangeConfig{}.hierarchy;
  std::string intra = ExchangeConfig{}.intra;
  std::string payload_path = ExchangeConfig{}.payload_path;
  int64_t ranks_per_node = 0;
  std::string json;
  bool no_library = false;
};

// --baseline: "library" (nothing: the communicator's own fp32 all-reduce) or one method entry.
std::optional<MethodChoice> parse_baseline(const std::string& text) {
  if (text == "library") return std::nullopt;
  if (text.find(',') != std::string::npos)
    input_error("bench-allreduce --baseline {}: give one method (e.g. bf16, fp32, qsgd:bits=8) or 'library'", text);
  try {
    return parse_method_list(text).front();
  } catch (const InputError& e) {
    std::string message = e.what();  // the method parser speaks of --methods
    if (message.rfind("--methods", 0) == 0) message.replace(0, 9, "bench-allreduce --baseline");
    input_error("{}", message);
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// CPU seconds (user + system) of this process so far.
double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto sec = [](const timeval& t) { return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec); };
  return sec(u.ru_utime) + sec(u.ru_stime);
}

// Gradient-like data of n values: normal values from Philox, distinct per rank, never zero.
Tensor gradient_like(int64_t n, int rank) {
  Tensor data = Tensor::empty({n}, DType::f32);
  const PhiloxKey key = derive_philox_key(42, static_cast<uint64_t>(rank), 0xB3);
  float* d = data.data<float>();
  for (int64_t i = 0; i < n; i += 2) {
    const PhiloxBlock b = philox_subsequence_block(key, static_cast<uint64_t>(i / 2));
    const double u1 = uniform_from_bits(b.v[0]), u2 = uniform_from_bits(b.v[1]);
    const double r = std::sqrt(-2.0 * std::log(u1)) * 1e-3;
    d[i] = static_cast<float>(r * std::cos(2 * M_PI * u2)) + 1e-7f;
    if (i + 1 < n) d[i + 1] = static_cast<float>(r * std::sin(2 * M_PI * u2)) - 1e-7f;
  }
  return data;
}

// The check of one case: how many ranks' results differ from rank 0's, and the result's relative L2
// distance to the fp32 mean.
struct Checked {
  bool done = false;  // false: not checked (the library's all-reduce, which promises no identical bits)
  int wrong = 0;
  double rel_error = 0;
};

// One row: a method's exchange under one algorithm (or the library's all-reduce): its median time,
// rank 0's statistics and CPU time per exchange.
struct Timed {
  double time = 0, wire = 0, encode = 0, decode = 0, cpu = 0;
  std::string algorithm;
  bool two_levels = false;
  Checked check;
};

// The benchmark over every size: one communicator and context, the rows printed (and written as JSON)
// on rank 0.
class AllreduceBench {
 public:
  AllreduceBench(const Options& o, int local_rank)
      : o_(o),
        // The gradient lives where a training run's would: the CPU, or this rank's GPU (by local rank).
        device_(o.device.empty() ? select_device(o.backend == "nccl" ? "cuda" : "cpu", local_rank, "--backend nccl")
                                 : select_device(o.device, local_rank, "--device")),
        comm_(make_communicator(o.backend, device_)),
        P_(comm_->size()),
        // Ranks per host, for the ideal time: the node layout where the communicator knows it.
        per_host_(P_ > 1 && comm_->has_subgroups() ? node_layout(*comm_, o.ranks_per_node).ranks_per_node : 1),
        root_(comm_->rank() == 0),
        methods_(parse_method_list(o.methods)),
        baseline_(parse_baseline(o.baseline)),
        ctx_(make_context(device_, 1, 0)) {
    if (root_ && !o.json.empty()) json_.open(o.json);
  }

  void run() {
    print_header();
    for (double mb : o_.sizes_mb) run_size(mb);
    // As nccl-tests: a case whose ranks disagree fails the run, after every row is printed.
    if (wrong_cases_ > 0)
      QT_FAIL("bench-allreduce: in {} case(s) the ranks' results differ (the #wrong column); replicas would diverge",
              wrong_cases_);
  }

 private:
  void print_header() const {
    if (!root_) return;
    std::printf("# qtrain bench-allreduce: %d ranks over %s on %s, median of %d iterations after %d warm-up\n", P_,
                comm_->name(), device_.str().c_str(), o_.iterations, o_.warmup);
    std::printf(
        "# speedup: time of the baseline, %s, at the same size / time of the row\n",
        baseline_ ? (baseline_->label + " (algorithm auto)").c_str() : "the library's fp32 all-reduce (native)");
    std::printf(
        "# every case is checked once before it is timed: #wrong = ranks whose result differs from rank 0's "
        "(must be 0), relerr = its relative L2 distance to the fp32 mean (signsgd: a vote, not a mean)\n");
    std::printf("%10s %-24s %-25s %10s %9s %9s %12s %8s %8s %8s %8s %6s %9s%s\n", "size(MB)", "method", "algorithm",
                "time(ms)", "algbw", "busbw", "wire(MB)", "speedup", "enc(ms)", "dec(ms)", "cpu(ms)", "#wrong",
                "relerr", o_.link_gbit > 0 ? "   ideal(ms) /ideal" : "");
  }

  // The median over the timed iterations of `body` (the slowest rank's time each), after `reset`
  // restores the input before the barrier, untimed (the exchange works in place); cpu_per_iteration_
  // is then this process's CPU time per timed iteration.
  template <typename Reset, typename Body>
  double barrier_time(Reset&& reset, Body&& body) {
    std::vector<double> times;
    double cpu = 0;
    for (int i = 0; i < o_.warmup + o_.iterations; ++i) {
      reset();
      comm_->barrier();
      const double c0 = cpu_seconds();
      const auto t0 = std::chrono::steady_clock::now();
      body();
      ctx_.synchronize();  // on a GPU, until the exchange's last kernel has run
      const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (i >= o_.warmup) cpu += cpu_seconds() - c0;
      // The slowest rank defines the collective's time (doubles travel as their bit patterns).
      uint64_t bits = 0;
      std::memcpy(&bits, &t, sizeof bits);
      double slowest = 0;
      for (uint64_t b : comm_->all_gather_u64(bits)) {
        double x = 0;
        std::memcpy(&x, &b, sizeof x);
        slowest = std::max(slowest, x);
      }
      if (i >= o_.warmup) times.push_back(slowest);
    }
    cpu_per_iteration_ = cpu / o_.iterations;
    return median(times);
  }

  // One size's rows: the library's all-reduce, the baseline, then every method under every algorithm.
  void run_size(double mb) {
    mb_ = mb;
    n_ = std::max<int64_t>(o_.column, static_cast<int64_t>(mb * 1024 * 1024 / 4) / o_.column * o_.column);
    data_ = gradient_like(n_, comm_->rank());
    if (device_.is_cuda()) data_ = data_.to(device_);
    work_ = Tensor::empty({n_}, DType::f32, device_);
    // fp32 MPI_Allreduce (the communicator's native sum with qtrain's ring switched off, so the
    // library picks its own algorithm); the exchange rows then use --mpi-allreduce.
    auto* mpi = dynamic_cast<MpiComm*>(comm_.get());
    const size_t ring_min = mpi ? mpi->ring_min_bytes() : 0;
    if (mpi) mpi->set_ring(0, mpi->ring_segment_bytes());
    // The reference every case is checked against: the fp32 mean of the ranks' data, on the host.
    reference_ = data_.clone();
    comm_->all_reduce_sum(ctx_, reference_.raw(), n_, ReduceType::f32);
    ctx_.synchronize();
    if (!reference_.device().is_cpu()) reference_ = reference_.to(Device::cpu());
    Timed library;
    if (!o_.no_library) {
      library.time =
          barrier_time([&] { reset(); }, [&] { comm_->all_reduce_sum(ctx_, work_.raw(), n_, ReduceType::f32); });
      library.cpu = cpu_per_iteration_;
      library.wire = 2.0 * (P_ - 1) / P_ * bytes();
      library.algorithm = "native";
    }
    if (mpi && o_.mpi_allreduce == "ring") mpi->set_ring(ring_min, mpi->ring_segment_bytes());
    t_library_ = library.time;
    // The baseline first: every row's speedup is over it.
    std::optional<Timed> base;
    if (baseline_) {
      base = time_exchange(*baseline_, "auto");
      if (!base)
        input_error("bench-allreduce --baseline {}: the baseline cannot run here (see the line above)", o_.baseline);
    }
    t_base_ = base ? base->time : t_library_;
    // The library's all-reduce is not checked (MPI_Allreduce promises no identical bits): "-".
    if (!o_.no_library) print(mpi ? "MPI_Allreduce fp32" : fmt::format("{} all-reduce fp32", comm_->name()), library);
    if (base) print(baseline_->label + " (baseline)", *base);
    for (const MethodChoice& m : methods_) {
      for (const std::string& alg : o_.algorithms) {
        if (base && m.label == baseline_->label && alg == "auto") continue;  // the baseline row above
        const std::optional<Timed> t = time_exchange(m, alg);
        if (t) print(m.label, *t);
      }
    }
  }

  double bytes() const { return 4.0 * static_cast<double>(n_); }
  void reset() { work_.copy_from(data_); }

  // One exchange of the data, untimed, checked against rank 0's result and the fp32 mean.
  Checked check_case(GradientExchange& ex, uint64_t& step) {
    reset();
    ex.exchange(ctx_, work_, step++);
    ctx_.synchronize();
    const Tensor result = work_.device().is_cpu() ? work_ : work_.to(Device::cpu());
    const std::string_view raw(static_cast<const char*>(result.raw()), result.nbytes());
    const std::vector<uint64_t> all = comm_->all_gather_u64(std::hash<std::string_view>{}(raw));
    Checked c;
    c.done = true;
    for (uint64_t h : all) c.wrong += h != all[0] ? 1 : 0;
    double diff = 0, norm = 0;
    const float* r = result.data<float>();
    const float* sum = reference_.data<float>();
    for (int64_t i = 0; i < n_; ++i) {
      const double mean = static_cast<double>(sum[i]) / P_;
      diff += (r[i] - mean) * (r[i] - mean);
      norm += mean * mean;
    }
    c.rel_error = norm > 0 ? std::sqrt(diff / norm) : 0;
    return c;
  }

  // One method's exchange under one algorithm, or nothing (and a "skipped" row) when the method does
  // not run under that algorithm.
  std::optional<Timed> time_exchange(const MethodChoice& m, const std::string& alg) {
    ExchangeConfig cc;
    cc.algorithm = alg;
    cc.overlap = false;
    cc.bucket_mb = 1e6;
    cc.piece_mb = o_.piece_mb;
    cc.payload_path = o_.payload_path;
    cc.hierarchy = o_.hierarchy;
    cc.intra = o_.intra;
    cc.ranks_per_node = o_.ranks_per_node;
    // A matrix of n / column rows of `column` values (PowerSGD's view of it).
    std::vector<ExchangeTensor> tensors{{"gradient", "bench", "dense", 0, n_, o_.column, n_ / o_.column}};
    std::unique_ptr<GradientExchange> ex;
    try {
      ex = std::make_unique<GradientExchange>(*comm_, device_, 1, cc, m.config, tensors);
    } catch (const InputError& e) {
      if (root_) std::printf("%10.1f %-24s %-25s skipped: %s\n", mb_, m.label.c_str(), alg.c_str(), e.what());
      return std::nullopt;
    }
    uint64_t step = 0;
    Timed t;
    t.check = check_case(*ex, step);
    (void)ex->take_stats();  // the check's exchange is not timed
    t.time = barrier_time([&] { reset(); }, [&] { ex->exchange(ctx_, work_, step++); });
    const ExchangeStats st = ex->take_stats();
    const double steps = static_cast<double>(std::max<int64_t>(st.steps, 1));
    t.wire = st.bytes_sent / steps;
    t.encode = st.phases.seconds(Phase::encode) / steps;
    t.decode = st.phases.seconds(Phase::decode) / steps;
    t.cpu = cpu_per_iteration_;
    t.algorithm = reduce_algorithm_name(ex->algorithm(0));
    t.two_levels = ex->two_levels();
    return t;
  }

  // The bytes on the busiest host link (see the top of this file) when each rank puts `wire` bytes on the wire.
  double host_link_bytes(double wire, const std::string& algorithm, bool two_levels) const {
    const double L = per_host_;
    if (per_host_ == P_) return 0.0;  // one host: nothing crosses a link
    if (two_levels) return L * wire;
    if (algorithm == "allgather" || algorithm == "reduce_scatter_allgather")
      return L * wire * (P_ - L) / std::max(P_ - 1.0, 1.0);
    return wire;  // a ring: one of the host's ranks sends to the next host
  }

  // A row on rank 0 (enc and dec: rank 0's encode and decode seconds per exchange, 0 for the library's
  // all-reduce), and its JSON line; every rank counts the cases whose ranks disagree.
  void print(const std::string& method, const Timed& r) {
    wrong_cases_ += r.check.wrong > 0 ? 1 : 0;
    if (!root_) return;
    const double t = r.time, algbw = bytes() / t / 1e9, busbw = algbw * 2.0 * (P_ - 1) / std::max(P_, 1);
    std::printf("%10.1f %-24s %-25s %10.3f %9.3f %9.3f %12.3f %8.2f %8.1f %8.1f %8.1f %6s %9s", mb_, method.c_str(),
                r.algorithm.c_str(), 1e3 * t, algbw, busbw, r.wire / 1e6, t_base_ / t, 1e3 * r.encode, 1e3 * r.decode,
                1e3 * r.cpu, r.check.done ? std::to_string(r.check.wrong).c_str() : "-",
                r.check.done ? fmt::format("{:.2e}", r.check.rel_error).c_str() : "-");
    double ideal = 0;
    // The library's own all-reduce follows no model here once hosts hold several ranks (it may
    // reduce inside a host first): its row has no ideal then.
    if (o_.link_gbit > 0 && (r.algorithm != "native" || per_host_ == 1)) {
      // Nothing leaves a host when every rank shares one (a flat run on one machine): no ideal.
      ideal = host_link_bytes(r.wire, r.algorithm, r.two_levels) / (o_.link_gbit * 1e9 / 8);
      if (ideal > 0) std::printf("   %9.3f %6.2f", 1e3 * ideal, t / ideal);
    }
    std::printf("\n");
    std::fflush(stdout);
    if (json_.is_open())
      json_ << fmt::format(
          "{{\"size_mb\": {}, \"method\": \"{}\", \"algorithm\": \"{}\", \"ranks\": {}, \"time_s\": {:.6g}, "
          "\"algbw_gbs\": {:.6g}, \"busbw_gbs\": {:.6g}, \"wire_bytes\": {:.0f}, \"baseline\": \"{}\", "
          "\"speedup_vs_baseline\": {:.4g}, \"speedup_vs_mpi_allreduce\": {:.4g}, \"ideal_s\": {:.6g}, "
          "\"encode_s\": {:.6g}, \"decode_s\": {:.6g}, \"cpu_s\": {:.6g}, \"wrong\": {}, \"rel_error\": {}}}\n",
          mb_, method, r.algorithm, P_, t, algbw, busbw, r.wire, baseline_ ? baseline_->label : "library", t_base_ / t,
          t_library_ / t, ideal, r.encode, r.decode, r.cpu, r.check.done ? std::to_string(r.check.wrong) : "null",
          r.check.done ? fmt::format("{:.6g}", r.check.rel_error) : "null");
  }

  const Options& o_;
  const Device device_;
  std::unique_ptr<Communicator> comm_;
  const int P_;
  const int per_host_;
  const bool root_;
  const std::vector<MethodChoice> methods_;
  const std::optional<MethodChoice> baseline_;
  Context ctx_;
  std::ofstream json_;
  double cpu_per_iteration_ = 0;  // of the last barrier_time call, mean over its timed iterations
  int wrong_cases_ = 0;           // cases (rows) in which some rank's result differed from rank 0's
  // The size being measured: its MB, values, input, work copy and fp32 reference; the library's and
  // the baseline's time at it.
  double mb_ = 0;
  int64_t n_ = 0;
  Tensor data_, work_, reference_;
  double t_library_ = 0, t_base_ = 0;
};

}  // namespace

void add_bench_allreduce_command(CLI::App& app, const MpiRuntime& mpi) {
  auto o = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "bench-allreduce",
      "Time the gradient exchange of every method against a baseline (default the bf16 all-reduce; run under mpirun)");
  cmd->add_option("--sizes", o->sizes_mb, "Gradient sizes in MB of fp32 values")->delimiter(',');
  cmd->add_option("--methods", o->methods, "Comma-separated methods with parameters, e.g. qsgd:bits=4:bucket=512");
  cmd->add_option("--baseline", o->baseline,
                  "What the speedup column is over, at each size: a method (its exchange, algorithm auto; default "
                  "bf16, the bf16 all-reduce; e.g. fp32) or 'library' (the communicator's own fp32 all-reduce)")
      ->type_name("METHOD");
  cmd->add_option("--algorithms", o->algorithms, "auto, allreduce, allgather, reduce_scatter_allgather")
      ->delimiter(',');
  cmd->add_option("--iterations", o->iterations, "Timed iterations per case")->check(CLI::PositiveNumber);
  cmd->add_option("--warmup", o->warmup, "Untimed iterations per case")->check(kNonNegative);
  cmd->add_option("--column", o->column, "Column length of the synthetic tensor (for per-column methods)")
      ->check(CLI::PositiveNumber);
  cmd->add_option(
      "--link-gbit", o->link_gbit,
      "Link rate in Gbit/s of each host's link: report the ideal time (the busiest host link's bytes / rate)");
  cmd->add_option("--backend", o->backend, "mpi (default), nccl, local or auto, as communication.backend")
      ->check(CLI::IsMember({"mpi", "nccl", "local", "auto"}));
  cmd->add_option("--device", o->device,
                  "Where the gradient lives: cpu, cuda (this rank's GPU by local rank) or auto; default cuda with "
                  "--backend nccl, else cpu")
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}));
  cmd->add_option("--mpi-allreduce", o->mpi_allreduce,
                  "How the exchange's fp32/fp16 sums run on the mpi backend: ring (qtrain's) or library")
      ->check(CLI::IsMember({"ring", "library"}));
  cmd->add_option("--piece-mb", o->piece_mb,
                  "reduce_scatter_allgather pipelines each stripe in pieces of this many MB of fp32 values "
                  "(communication.piece_mb; 0: whole stripes)")
      ->capture_default_str()
      ->check(kNonNegative);
  cmd->add_option("--hierarchy", o->hierarchy,
                  "flat, two_level or auto (two levels when the ranks span several nodes of several ranks), as "
                  "communication.hierarchy")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "flat", "two_level"}));
  cmd->add_option("--payload-path", o->payload_path,
                  "Where GPU payloads of reduce-scatter + allgather travel: auto (device memory over nccl) or host "
                  "(communication.payload_path)")
      ->check(CLI::IsMember({"auto", "host"}));
  cmd->add_option("--intra", o->intra, "The sum inside a node with two levels: fp32 or bf16 (communication.intra)")
      ->capture_default_str()
      ->check(CLI::IsMember({"fp32", "bf16"}));
  cmd->add_option("--ranks-per-node", o->ranks_per_node,
                  "Nodes of this many consecutive ranks (communication.ranks_per_node; 0: the hosts)")
      ->check(kNonNegative);
  cmd->add_option("--json", o->json, "Also write one JSON object per line to this file (rank 0)");
  // For counting what one exchange costs the process (tools/gpu_check.sh counts the host synchronizations
  // per call under the CUDA emulator): with it, the baseline's exchange is the only thing timed.
  cmd->add_flag("--no-library", o->no_library,
                "Leave out the row of the library's own fp32 all-reduce (needs a method as --baseline; JSON "
                "speedup_vs_mpi_allreduce is then 0)");
  cmd->callback([o, &mpi] {
    if (o->no_library && o->baseline == "library")
      input_error("bench-allreduce --no-library: the speedups need a baseline; give --baseline METHOD");
    AllreduceBench(*o, mpi.local_rank()).run();
  });
}

}  // namespace qtrain::cli
