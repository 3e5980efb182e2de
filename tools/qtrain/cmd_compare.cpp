// `qtrain compare CONFIG --methods fp32,fp16,dettmers8,... [--seeds 3] [--baseline bf16] [--ranks 4]
// [--netbed 1gbit] [--out DIR]`: trains one config under several quantization methods (and the
// baseline's), each optionally under a sync schedule of its own ("bf16@diloco:inner_steps=50"), one
// run directory per method and seed (DIR/runs/), then writes DIR/report/ (report.md and plots). Each training is a
// child process: `qtrain train`, under `mpirun` for --ranks > 1, inside tools/netbed.sh's bandwidth-limited testbed
// with --netbed. Finished runs are reused, so an interrupted sweep continues where it stopped (sweep.h).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <iterator>
#include <tuple>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include <yaml-cpp/yaml.h>

#include "framework/core/check.h"
#include "train/run_config.h"
#include "framework/core/file_io.h"
#include "tools/qtrain/commands.h"
#include "tools/qtrain/report.h"
#include "tools/qtrain/run_record.h"
#include "tools/qtrain/sweep.h"
#include "tools/qtrain/sync_schedule.h"

#ifndef QTRAIN_SOURCE_DIR
#define QTRAIN_SOURCE_DIR "."
#endif

namespace qtrain::cli {
namespace fs = std::filesystem;

namespace {

std::vector<std::string>& startup_env() {
  static std::vector<std::string> env;
  return env;
}

// The training in progress: compare forwards SIGINT / SIGTERM / SIGHUP to it (tools/netbed.sh then
// tears its testbed down), so that stopping compare never leaves an orphaned training behind.
volatile sig_atomic_t g_child_pid = 0;
volatile sig_atomic_t g_signal = 0;
extern "C" void forward_signal(int sig) {
  g_signal = sig;
  if (g_child_pid > 0) ::kill(static_cast<pid_t>(g_child_pid), sig);
}
void install_signal_forwarding() {
  struct sigaction sa {};
  sa.sa_handler = forward_signal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
}

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string format_duration(double s) {
  const int64_t t = static_cast<int64_t>(std::llround(s));
  return t >= 3600 ? fmt::format("{}h{:02}m", t / 3600, t / 60 % 60) : fmt::format("{}m{:02}s", t / 60, t % 60);
}

// The sweep-wide progress: one redrawn line on a terminal, plain lines otherwise.
class SweepProgress {
 public:
  explicit SweepProgress(size_t variants) : variants_(variants), tty_(::isatty(STDERR_FILENO) != 0) {}
  void update(size_t index, const std::string& label, double variant_fraction, const std::string& detail) {
    const double total = (static_cast<double>(index) + std::clamp(variant_fraction, 0.0, 1.0)) / variants_;
    const std::string text = fmt::format("{:3.0f}% | run {}/{} {} | {} | elapsed {}", 100 * total, index + 1, variants_,
                                         label, detail, format_duration(seconds_since(start_)));
    if (tty_) {
      constexpr int kWidth = 24;
      const int filled = static_cast<int>(kWidth * total);
      std::fprintf(stderr, "\r\033[2K[%s%s] %s", std::string(static_cast<size_t>(filled), '#').c_str(),
                   std::string(static_cast<size_t>(kWidth - filled), '.').c_str(), text.c_str());
      std::fflush(stderr);
      return;
    }
    // Not a terminal (a log file): a line when the run changes, else at most every 15 s.
    if (index != last_index_ || seconds_since(last_line_) >= 15) {
      std::fprintf(stderr, "compare: %s\n", text.c_str());
      last_line_ = Clock::now();
    }
    last_index_ = index;
  }
  void message(const std::string& line) {
    if (tty_) std::fprintf(stderr, "\r\033[2K");
    std::fprintf(stderr, "compare: %s\n", line.c_str());
  }

 private:
  size_t variants_;
  bool tty_;
  Clock::time_point start_ = Clock::now();
  Clock::time_point last_line_ = Clock::now();
  size_t last_index_ = SIZE_MAX;
};

// A progress line of a training run in `lines` mode: "epoch 1/2 batch 50/118 step 50 loss 0.3 ...".
struct ProgressLine {
  long long epoch = 0, epochs = 0, batch = 0, batches = 0, step = 0;
  double loss = 0;
};
bool parse_progress_line(const std::string& line, ProgressLine& p) {
  return std::sscanf(line.c_str(), "epoch %lld/%lld batch %lld/%lld step %lld loss %lf", &p.epoch, &p.epochs, &p.batch,
                     &p.batches, &p.step, &p.loss) == 6;
}

// Runs argv with the environment qtrain started with (before MPI_Init added its own variables, which
// would confuse a child mpirun), stdout and stderr merged into `on_line`, one call per line; `on_tick`
// about once a second. Returns the exit status (128 + signal when killed).
// A resumed run appends to the curve.csv of its earlier attempt. A kill can leave the last line cut
// short (no newline), and the next row would be glued onto it, making the file unreadable for good:
// the cut line is dropped and the file rewritten first. Returns the last recorded wall time and step;
// the steps the run repeats from its checkpoint up to that step are not recorded twice.
std::pair<double, int64_t> continue_curve(const fs::path& path) {
  std::optional<std::string> read = read_whole_file(path.string());
  if (!read) return {0.0, -1};
  std::string text = std::move(*read);
  const size_t end = text.rfind('\n');
  text = end == std::string::npos ? std::string() : text.substr(0, end + 1);
  if (text.empty()) text = "wall_s,step,train_loss\n";
  write_file_atomically(path.string(), text);
  double wall = 0;
  int64_t step = -1;
  for (const CurvePoint& p : read_curve_csv(path.string())) {
    wall = std::max(wall, p.wall_s);
    step = std::max(step, p.step);
  }
  return {wall, step};
}

int run_child(const std::vector<std::string>& argv, const std::function<void(const std::string&)>& on_line,
              const std::function<void()>& on_tick) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) input_error("compare: pipe failed: {}", std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDERR_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<std::string> env = startup_env();
  if (::geteuid() == 0) {  // Open MPI refuses root unless told; the documented flags of this machine
    env.emplace_back("OMPI_ALLOW_RUN_AS_ROOT=1");
    env.emplace_back("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1");
  }
  std::vector<char*> envp;
  for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc == 0) g_child_pid = pid;
  if (rc == 0 && g_signal != 0) ::kill(pid, g_signal);  // a signal that came while it was starting
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    input_error("compare: cannot start '{}': {}", argv[0], std::strerror(rc));
  }
  std::string pending;
  char buf[4096];
  for (;;) {
    pollfd p{fds[0], POLLIN, 0};
    const int ready = ::poll(&p, 1, 1000);
    if (ready > 0) {
      const ssize_t n = ::read(fds[0], buf, sizeof buf);
      if (n <= 0) break;
      pending.append(buf, static_cast<size_t>(n));
      size_t nl;
      while ((nl = pending.find('\n')) != std::string::npos) {
        on_line(pending.substr(0, nl));
        pending.erase(0, nl + 1);
      }
    } else if (ready < 0 && errno != EINTR) {
      break;
    }
    on_tick();
  }
  if (!pending.empty()) on_line(pending);
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  g_child_pid = 0;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

struct CompareArgs {
  std::string config;
  std::string methods;
  std::string seeds;  // --seeds as given; empty: one run per method with the config's seed
  std::string baseline = "bf16";
  bool baseline_given = false;  // --report-only: the sweep's own baseline unless --baseline is given
  int ranks = 1;
  std::string netbed;
  int ranks_per_host = 1;  // --netbed: ranks on each emulated host (nodes of several ranks)
  int64_t epochs = 0;
  std::string out;
  std::vector<std::string> overrides;
  bool resume = false;
  std::string report_only;
  double target = 0.97;
  int64_t curve_every = 10;
  std::string netbed_script = std::string(QTRAIN_SOURCE_DIR) + "/tools/netbed.sh";
  std::string gnuplot = "gnuplot";
};

std::string read_command(const fs::path& dir) {
  const fs::path sweep = dir / "sweep.yaml";
  if (!fs::exists(sweep)) return "";
  const YAML::Node node = load_sweep_file(sweep.string());
  return node.IsMap() && node["command"] ? sweep_string(node, "command", sweep.string()) : "";
}

void make_report(const fs::path& dir, const CompareArgs& a) {
  ReportOptions options;
  options.target = a.target;
  options.command = read_command(dir);
  options.gnuplot = a.gnuplot;
  const SweepRecord sweep = load_sweep(dir.string());
  options.seeds = sweep.seeds;
  options.labels = sweep.labels;
  // The sweep's own baseline; a sweep written before --baseline existed was measured against fp32.
  options.baseline = sweep.baseline.empty() ? "fp32" : sweep.baseline;
  if (a.baseline_given) {
    // --report-only --baseline: any method of the sweep.
    std::vector<Variant> variants;
    for (const std::string& label : sweep.labels) variants.push_back(parse_variants(label).front());
    const size_t before = variants.size();
    options.baseline = add_baseline(variants, a.baseline);
    if (variants.size() != before) {
      std::string known;
      for (const std::string& label : sweep.labels) known += (known.empty() ? "" : ", ") + label;
      input_error("compare --report-only --baseline {}: not a method of the sweep in {} (its methods: {})", a.baseline,
                  dir.string(), known);
    }
  }
  const std::string warning = write_report(sweep.runs, (dir / "report").string(), options);
  if (!warning.empty()) std::fprintf(stderr, "compare: warning: %s\n", warning.c_str());
  std::fprintf(stderr, "compare: report of %zu run(s) in %s\n", sweep.runs.size(),
               (dir / "report" / "report.md").c_str());
}

// The checks of compare's arguments that read no file but the config's name: before anything else.
void check_sweep_args(const CompareArgs& a) {
  // compare starts every rank on this machine (or on its emulated hosts): beyond a few hundred the
  // launch alone stalls the machine (100000 ranks sat in mpirun for minutes without a word).
  constexpr int kMaxRanks = 256;
  if (a.ranks < 1 || a.ranks > kMaxRanks)
    input_error("compare: --ranks must be in [1, {}] (every rank runs on this machine), got {}", kMaxRanks, a.ranks);
  if (!a.netbed.empty() && a.ranks < 2) input_error("compare: --netbed needs --ranks of at least 2");
  if (a.ranks_per_host != 1 && a.netbed.empty())
    input_error("compare: --ranks-per-host places ranks on the hosts of --netbed; give --netbed too");
  if (a.ranks_per_host < 1 || a.ranks % a.ranks_per_host != 0)
    input_error("compare: --ranks {} does not split into hosts of --ranks-per-host {}", a.ranks, a.ranks_per_host);
  if (!fs::exists(a.config)) input_error("{}: config file not found", a.config);
}

// One run per entry; nullopt: the config's own seed.
std::vector<std::optional<int64_t>> sweep_seeds(const CompareArgs& a) {
  std::vector<std::optional<int64_t>> seeds;
  if (!a.seeds.empty()) {
    for (const std::string& o : a.overrides)
      if (o.rfind("seed=", 0) == 0) input_error("compare: --set {} and --seeds both set the seed; give one of them", o);
    for (int64_t seed : parse_seeds(a.seeds)) seeds.emplace_back(seed);
  } else {
    seeds.emplace_back(std::nullopt);
  }
  return seeds;
}

struct Job {
  Variant variant;
  std::string label;  // the variant's, with its seed: "qsgd:bits=4 seed 2"
  fs::path run_dir;
  std::vector<std::string> train_args;  // after the launcher
  RunLength length;
};

// Every variant's config is parsed before anything runs, so that a bad --set or method parameter
// does not stop the sweep half way.
std::vector<Job> plan_jobs(const CompareArgs& a, const std::vector<Variant>& variants,
                           const std::vector<std::optional<int64_t>>& seeds, const fs::path& dir,
                           const std::string& self) {
  bool threads_given = false;
  for (const std::string& o : a.overrides) threads_given |= o.rfind("train.threads=", 0) == 0;
  std::vector<Job> jobs;
  for (const Variant& v : variants) {
    for (const std::optional<int64_t>& seed : seeds) {
      Job job{v,
              seed ? fmt::format("{} seed {}", v.label, *seed) : v.label,
              dir / "runs" / run_folder(v.folder, seed),
              {},
              {}};
      std::vector<std::string> sets = a.overrides;
      if (seed) sets.push_back(fmt::format("seed={}", *seed));
      if (a.epochs > 0) sets.push_back(fmt::format("train.epochs={}", a.epochs));
      // Ranks share the cores: one BLAS thread pool per rank would oversubscribe them.
      if (a.ranks > 1 && !threads_given)
        sets.push_back(fmt::format("train.threads={}", std::max(1u, std::thread::hardware_concurrency() / a.ranks)));
      sets.insert(sets.end(), v.overrides.begin(), v.overrides.end());
      sets.push_back("output.dir=" + job.run_dir.string());
      sets.push_back("output.progress=lines");
      sets.push_back(fmt::format("train.log_every_steps={}", a.curve_every));
      const RunConfig rc = parse_run_config(a.config, sets);
      parse_sync_schedule(rc.sync.options);  // a bad schedule of an entry ('@') stops the sweep before it starts
      job.length = RunLength{rc.train.epochs, rc.train.max_steps};
      job.train_args = {self, "train", fs::absolute(a.config).string()};
      for (const std::string& s : sets) {
        job.train_args.push_back("--set");
        job.train_args.push_back(s);
      }
      jobs.push_back(std::move(job));
    }
  }
  return jobs;
}

// What starts a run's ranks in front of `qtrain train`: nothing for one rank, else netbed or mpirun.
std::vector<std::string> launcher(const CompareArgs& a) {
  if (a.ranks == 1) return {};
  if (!a.netbed.empty())
    return {a.netbed_script,
            "run",
            "--hosts",
            std::to_string(a.ranks / a.ranks_per_host),
            "--ranks-per-host",
            std::to_string(a.ranks_per_host),
            "--rate",
            a.netbed,
            "--prefix",
            "qtcmp",
            "--"};
  return {"mpirun",
          "-np",
          std::to_string(a.ranks),
          "--oversubscribe",
          "--bind-to",
          "none",
          "--mca",
          "btl",
          "self,vader",
          "--mca",
          "mpi_yield_when_idle",
          "1"};
}

// The sweep folder with its sweep.yaml: the command, the baseline, the seeds and the variants, which
// --report-only and predict read back.
void create_sweep_folder(const fs::path& dir, const CompareArgs& a, const std::vector<std::string>& own_argv,
                         const std::string& baseline, const std::vector<std::optional<int64_t>>& seeds,
                         const std::vector<Variant>& variants) {
  std::error_code ec;
  fs::create_directories(dir / "runs", ec);
  if (ec) input_error("{}: cannot create the sweep folder (--out): {}", (dir / "runs").string(), ec.message());
  YAML::Emitter e;
  e << YAML::BeginMap << YAML::Key << "command" << YAML::Value << shell_join(own_argv) << YAML::Key << "baseline"
    << YAML::Value << baseline;
  if (!a.seeds.empty()) {
    e << YAML::Key << "seeds" << YAML::Value << YAML::Flow << YAML::BeginSeq;
    for (const std::optional<int64_t>& seed : seeds) e << *seed;
    e << YAML::EndSeq;
  }
  e << YAML::Key << "variants" << YAML::Value << YAML::BeginSeq;
  for (const Variant& v : variants)
    e << YAML::BeginMap << YAML::Key << "label" << YAML::Value << v.label << YAML::Key << "folder" << YAML::Value
      << v.folder << YAML::EndMap;
  e << YAML::EndSeq << YAML::EndMap;
  write_file_atomically((dir / "sweep.yaml").string(), std::string(e.c_str()) + "\n");
}

// How a job's run starts: its command line, and where its curve.csv left off when it continues.
struct RunStart {
  std::vector<std::string> argv;
  double wall_offset = 0;
  int64_t last_step = -1;  // the last step in curve.csv: only later steps are appended
};

// A fresh run (an earlier unfinished or replaced one set aside), or with --resume the continuation
// of an unfinished run from its checkpoint.
RunStart prepare_run(const CompareArgs& a, const Job& job, RunState state, std::vector<std::string> argv,
                     const fs::path& dir, const std::string& self, SweepProgress& progress) {
  RunStart run{std::move(argv)};
  if (state == RunState::unfinished && a.resume && fs::exists(job.run_dir / "checkpoint.safetensors")) {
    // Continue from the checkpoint with the launcher of this sweep and the run's own resolved config.
    run.argv = launcher(a);
    for (const std::string& s : {self, std::string("train"), std::string("--resume"), job.run_dir.string()})
      run.argv.push_back(s);
    std::tie(run.wall_offset, run.last_step) = continue_curve(job.run_dir / "curve.csv");
    progress.message(fmt::format("{}: resuming the unfinished run from its checkpoint", job.label));
    return run;
  }
  if (state != RunState::absent) {
    const std::string kept = set_aside(dir.string(), job.run_dir.string());
    progress.message(fmt::format("{}: {} run in {} is started again (the old one is kept in {})", job.label,
                                 run_state_name(state), job.run_dir.string(), kept));
  }
  std::error_code ec;
  fs::create_directories(job.run_dir, ec);
  if (ec) input_error("{}: cannot create the run directory: {}", job.run_dir.string(), ec.message());
  return run;
}

struct RunEnd {
  int status = 0;
  std::string last_line;  // the last non-empty line of its output
  Clock::time_point start;
};

// Runs the job: its output appended to output.log, its training loss to curve.csv, the progress
// line updated as it goes.
RunEnd train_job(const Job& job, size_t index, RunStart run, SweepProgress& progress) {
  const fs::path curve_path = job.run_dir / "curve.csv";
  const bool new_curve = !fs::exists(curve_path);
  std::ofstream curve(curve_path, std::ios::app);
  if (new_curve) curve << "wall_s,step,train_loss\n";
  std::ofstream log(job.run_dir / "output.log", std::ios::app);
  log << "$ " << shell_join(run.argv) << "\n";
  RunEnd end;
  end.start = Clock::now();
  double fraction = 0;
  std::string detail = "starting";
  end.status = run_child(
      run.argv,
      [&](const std::string& line) {
        log << line << "\n";
        if (!line.empty()) end.last_line = line;
        ProgressLine p;
        if (!parse_progress_line(line, p) || p.batches <= 0 || p.epochs <= 0 || p.step <= run.last_step) return;
        run.last_step = p.step;
        curve << fmt::format("{:.3f},{},{:.6f}\n", run.wall_offset + seconds_since(end.start), p.step, p.loss);
        // Of the whole run: its epochs, or its train.max_steps when that ends it first.
        const double total = static_cast<double>(p.epochs) * static_cast<double>(p.batches);
        const double steps =
            job.length.max_steps > 0 ? std::min(total, static_cast<double>(job.length.max_steps)) : total;
        fraction = std::min(1.0, static_cast<double>(p.step) / steps);
        detail = fmt::format("epoch {}/{} batch {}/{} loss {:.4f}", p.epoch, p.epochs, p.batch, p.batches, p.loss);
      },
      [&] {
        log.flush();
        curve.flush();
        progress.update(index, job.label, fraction, detail);
      });
  return end;
}

// A run that was interrupted, failed or stopped short stops the sweep; a finished one gets its marker.
void finish_job(const CompareArgs& a, const Job& job, const RunEnd& end, const std::string& command,
                SweepProgress& progress) {
  if (g_signal != 0)
    input_error(
        "compare: interrupted (signal {}) during the {} run; run the same command again to continue "
        "(finished runs are kept{})",
        static_cast<int>(g_signal), job.label,
        a.resume ? "" : "; add --resume to continue this one from its checkpoint");
  if (end.status != 0)
    input_error("compare: the {} run failed (exit status {}); its output is in {}; last line: {}", job.label,
                end.status, (job.run_dir / "output.log").string(), end.last_line);
  const std::vector<MetricsRecord> rows = read_metrics_csv((job.run_dir / "metrics.csv").string());
  if (!job.length.reached_by(rows.back()))
    input_error("compare: the {} run exited at step {} ({} complete epochs), short of its {} (see {})", job.label,
                rows.back().step, rows.back().epoch, job.length.str(), (job.run_dir / "output.log").string());
  write_marker(job.run_dir.string(), job.variant.label, command, seconds_since(end.start));
  progress.message(fmt::format("{}: done in {}, test accuracy {:.2f}%", job.label,
                               format_duration(seconds_since(end.start)), 100 * rows.back().test_accuracy));
}

// One job of the sweep: reused when finished with the same command, else trained (or continued).
void run_job(const CompareArgs& a, const Job& job, size_t index, const fs::path& dir, const std::string& self,
             SweepProgress& progress) {
  std::vector<std::string> argv = launcher(a);
  argv.insert(argv.end(), job.train_args.begin(), job.train_args.end());
  const std::string command = shell_join(argv);
  const RunState state = run_state(job.run_dir.string(), command, job.length);
  if (state == RunState::finished) {
    progress.message(fmt::format("{}: finished run reused ({})", job.label, job.run_dir.string()));
    return;
  }
  RunStart run = prepare_run(a, job, state, std::move(argv), dir, self, progress);
  const RunEnd end = train_job(job, index, std::move(run), progress);
  finish_job(a, job, end, command, progress);
}

void run_sweep(const CompareArgs& a, const std::vector<std::string>& own_argv) {
  check_sweep_args(a);
  std::vector<Variant> variants = parse_variants(a.methods);
  const std::string baseline = add_baseline(variants, a.baseline);
  const std::vector<std::optional<int64_t>> seeds = sweep_seeds(a);
  const fs::path dir = fs::absolute(a.out.empty() ? fs::path("runs") / ("compare-" + fs::path(a.config).stem().string())
                                                  : fs::path(a.out));
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  if (!a.netbed.empty() && !fs::exists(a.netbed_script))
    input_error("compare --netbed: {} not found (give --netbed-script)", a.netbed_script);
  const std::vector<Job> jobs = plan_jobs(a, variants, seeds, dir, self);
  create_sweep_folder(dir, a, own_argv, baseline, seeds, variants);
  install_signal_forwarding();
  SweepProgress progress(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) run_job(a, jobs[i], i, dir, self, progress);
  make_report(dir, a);
}

}  // namespace

void remember_startup_environment(char** envp) {
  startup_env().clear();
  for (char** e = envp; e != nullptr && *e != nullptr; ++e) startup_env().emplace_back(*e);
}

void add_compare_command(CLI::App& app, const MpiRuntime& mpi) {
  auto args = std::make_shared<CompareArgs>();
  CLI::App* cmd = app.add_subcommand(
      "compare", "Train one config under several quantization methods and write a report comparing them");
  cmd->add_option("config", args->config, "YAML config (e.g. configs/mnist_mlp.yaml)");
  cmd->add_option("--methods", args->methods,
                  "Comma-separated methods with ':'-separated parameters, each optionally followed by '@' and a "
                  "sync schedule, e.g. fp32,fp16,dettmers8,onebit,qsgd:bits=4,adaptive,bf16@diloco:inner_steps=50")
      ->type_name("LIST");
  cmd->add_option("--seeds", args->seeds,
                  "Train each method once per seed: N for seeds 1..N, or a list such as 1,2,3; the report gives "
                  "means, 95% confidence intervals and Welch's t-test against the baseline")
      ->type_name("N|LIST");
  cmd->add_option("--baseline", args->baseline,
                  "The method every speedup and accuracy difference is measured against, trained too when "
                  "--methods does not name it (default bf16, the bf16 all-reduce; e.g. fp32)")
      ->type_name("METHOD");
  cmd->add_option("--ranks", args->ranks, "Data-parallel ranks per run (mpirun -np; default 1)")->type_name("N");
  cmd->add_option("--netbed", args->netbed,
                  "Run each training on the bandwidth-limited testbed of tools/netbed.sh at this rate (e.g. 1gbit)")
      ->type_name("RATE");
  cmd->add_option("--ranks-per-host", args->ranks_per_host,
                  "With --netbed: this many ranks on each testbed host (--ranks / R hosts; shared memory inside a "
                  "host, the shaped links between), as on nodes of several GPUs; default 1")
      ->type_name("R");
  cmd->add_option("--epochs", args->epochs, "Override train.epochs for every run")->type_name("N");
  cmd->add_option("--out", args->out, "Sweep folder (default runs/compare-<config name>)")->type_name("DIR");
  cmd->add_option("--set", args->overrides, "Override a config key for every run (repeatable)")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);
  cmd->add_flag("--resume", args->resume,
                "Continue an unfinished run from its last checkpoint instead of starting it again");
  cmd->add_option("--report-only", args->report_only, "Only regenerate DIR/report/ from the finished runs in DIR")
      ->type_name("DIR");
  cmd->add_option("--target", args->target, "Test accuracy for the time-to-accuracy column (default 0.97)")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--curve-every", args->curve_every, "Record the training loss every N steps (default 10)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--netbed-script", args->netbed_script, "Path of tools/netbed.sh")->type_name("PATH");
  cmd->add_option("--gnuplot", args->gnuplot, "gnuplot executable for the plots ('' = write the script only)");
  cmd->callback([args, &mpi, cmd] {
    args->baseline_given = cmd->count("--baseline") > 0;
    if (mpi.size() > 1) input_error("compare: run it without mpirun; it starts mpirun itself for each run (--ranks N)");
    if (!args->report_only.empty()) {
      make_report(fs::path(args->report_only), *args);
      return;
    }
    if (args->config.empty()) input_error("compare: give a CONFIG file (or --report-only DIR)");
    if (args->methods.empty()) input_error("compare: give --methods, e.g. --methods fp32,dettmers8,qsgd:bits=4");
    // The command as a reader would type it, recorded in sweep.yaml and shown above the report's table.
    std::vector<std::string> argv = {"build/qtrain", "compare", args->config, "--methods", args->methods};
    if (!args->seeds.empty()) argv.insert(argv.end(), {"--seeds", args->seeds});
    if (args->baseline_given) argv.insert(argv.end(), {"--baseline", args->baseline});
    if (args->ranks != 1) argv.insert(argv.end(), {"--ranks", std::to_string(args->ranks)});
    if (!args->netbed.empty()) argv.insert(argv.end(), {"--netbed", args->netbed});
    if (args->ranks_per_host != 1) argv.insert(argv.end(), {"--ranks-per-host", std::to_string(args->ranks_per_host)});
    if (args->epochs > 0) argv.insert(argv.end(), {"--epochs", std::to_string(args->epochs)});
    if (!args->out.empty()) argv.insert(argv.end(), {"--out", args->out});
    for (const std::string& s : args->overrides) argv.insert(argv.end(), {"--set", s});
    if (args->target != 0.97) argv.insert(argv.end(), {"--target", fmt::format("{:g}", args->target)});
    run_sweep(*args, argv);
  });
}

}  // namespace qtrain::cli
