// qtrain: the command-line entry point. Sets up the CPU environment and MPI, dispatches to the
// subcommands (train, eval, bench-quant, compare, predict, ...), and turns any qtrain::Error into one line on stderr
// and a non-zero exit status.
#include <cblas.h>
#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "comm/mpi_runtime.h"
#include "framework/core/check.h"
#include "framework/core/float_env.h"
#include "tools/qtrain/commands.h"

namespace {

// OpenBLAS reads its environment once, when the library loads, before main. Where qtrain wants
// other settings than the defaults it puts them in the environment and re-executes itself, once.
// This happens before MPI_Init, so under mpirun the re-executed process is the one that joins the
// job. A setting the user gave is kept; QTRAIN_NO_REEXEC=1 disables both.
//  - Debian's OpenBLAS 0.3.21 detects AVX-512 Xeons as "Prescott" (SSE3) and runs sgemm about 4x
//    slower (../docs/performance.md): OPENBLAS_CORETYPE names the right kernels.
//  - After each multithreaded call OpenBLAS's idle threads spin for 2^28 cycles (about 0.1 s),
//    yielding in a loop, before they sleep. Where qtrain's own lanes run serial GEMMs next (the
//    LSTM's time steps, SerialBlas), those threads take the lanes' cores: 15% of an AN4 step in
//    sched_yield on 2 cores. OPENBLAS_THREAD_TIMEOUT=4 (2^4 cycles, OpenBLAS's minimum) lets them
//    sleep at once (one AN4 replica on 2 threads: 39.5-43.8 -> 46.1-46.4 samples/s).
void prepare_openblas_environment(char** argv) {
  if (std::getenv("QTRAIN_NO_REEXEC") != nullptr) return;
  bool changed = false;
  const char* core = openblas_get_corename();
  if (std::getenv("OPENBLAS_CORETYPE") == nullptr && core != nullptr) {
    const std::string name = core;
    const bool weak_core = name == "Prescott" || name == "Core2" || name == "Nehalem" || name == "Sandybridge";
    std::string wanted;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw"))
      wanted = "SkylakeX";
    else if (__builtin_cpu_supports("avx2"))
      wanted = "Haswell";
    if (weak_core && !wanted.empty() && wanted != name) {
      setenv("OPENBLAS_CORETYPE", wanted.c_str(), 1);
      changed = true;
    }
  }
  if (std::getenv("OPENBLAS_THREAD_TIMEOUT") == nullptr) {
    setenv("OPENBLAS_THREAD_TIMEOUT", "4", 1);
    changed = true;
  }
  if (!changed) return;
  // The binary's own path, not /proc/self/exe: the kernel names the process after the file it
  // executes, and ps, top, pgrep -x and the tests look for "qtrain", not "exe".
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return;
  self[n] = '\0';
  execv(self, argv);  // only returns on failure: then go on with the defaults
}

}  // namespace

int main(int argc, char** argv) {
  // Already set before OpenBLAS started its threads (float_env.cpp); the call also links that in.
  qtrain::flush_subnormals();
  prepare_openblas_environment(argv);
  // Spinning OpenMP pools would fight OpenBLAS's threads on small machines (netbed.md).
  setenv("OMP_WAIT_POLICY", "passive", 0);
  qtrain::cli::remember_startup_environment(environ);

  std::unique_ptr<qtrain::MpiRuntime> mpi;
  try {
    mpi = std::make_unique<qtrain::MpiRuntime>(&argc, &argv);
  } catch (const qtrain::Error& e) {
    std::fprintf(stderr, "qtrain: error: cannot start MPI: %s\n", e.what());
    return 1;
  }
  CLI::App app{"qtrain: data-parallel training with quantized gradient exchange"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Print the help of every subcommand");
  qtrain::cli::add_train_command(app, *mpi);
  qtrain::cli::add_eval_command(app);
  qtrain::cli::add_bench_quant_command(app);
  qtrain::cli::add_bench_allreduce_command(app, *mpi);
  qtrain::cli::add_bench_data_command(app);
  qtrain::cli::add_compare_command(app, *mpi);
  qtrain::cli::add_predict_command(app);
  qtrain::cli::add_bench_model_command(app);
  // One line per error; in a job of several ranks the failing rank aborts the whole job, so that the
  // other ranks do not wait forever in a collective for it.
  auto report = [&](const char* kind, const char* what) {
    if (mpi->size() > 1) {
      std::fprintf(stderr, "qtrain: %s (rank %d of %d on %s): %s\n", kind, mpi->rank(), mpi->size(),
                   mpi->host().c_str(), what);
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    std::fprintf(stderr, "qtrain: %s: %s\n", kind, what);
    return 1;
  };
  try {
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      // --help and --help-all stop the parse as "errors" of exit code 0: CLI11 prints them. Real
      // parse errors get the one line of every other error and exit status 2 (a usage error), not
      // CLI11's own codes of 100 and more.
      if (e.get_exit_code() == 0) return app.exit(e);
      std::fprintf(stderr, "qtrain: error: %s (see qtrain --help-all)\n", e.what());
      return 2;
    }
    return 0;
  } catch (const qtrain::Error& e) {
    return report("error", e.what());
  } catch (const std::exception& e) {
    return report("unexpected error", e.what()) + 1;
  }
}
