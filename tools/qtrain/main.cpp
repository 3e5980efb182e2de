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
#include "tools/qtrain/commands.h"

namespace {

// Debian's OpenBLAS 0.3.21 detects AVX-512 Xeons as "Prescott" (SSE3) and runs sgemm about 4x slower
// (../docs/performance.md). The core type is read once when the library loads, so when the detection
// is wrong we re-execute ourselves with OPENBLAS_CORETYPE set. This happens before MPI_Init, so under
// mpirun the re-executed process is the one that joins the job. QTRAIN_NO_REEXEC=1 disables it.
void fix_openblas_core_type(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr || std::getenv("QTRAIN_NO_REEXEC") != nullptr) return;
  const char* core = openblas_get_corename();
  if (core == nullptr) return;
  const std::string name = core;
  const bool weak_core = name == "Prescott" || name == "Core2" || name == "Nehalem" || name == "Sandybridge";
  std::string wanted;
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")) wanted = "SkylakeX";
  else if (__builtin_cpu_supports("avx2")) wanted = "Haswell";
  if (!weak_core || wanted.empty() || wanted == name) return;
  setenv("OPENBLAS_CORETYPE", wanted.c_str(), 1);
  execv("/proc/self/exe", argv);  // only returns on failure: then continue with the slow kernels
}

}  // namespace

int main(int argc, char** argv) {
  fix_openblas_core_type(argv);
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
