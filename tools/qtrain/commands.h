// The subcommands of the qtrain CLI; each adds itself to the CLI11 app with its options, --help text
// and callback. main.cpp lists them. Callbacks throw qtrain::Error; main prints it as one line.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdlib>
#include <string>

#include "comm/mpi_runtime.h"

namespace qtrain::cli {

void add_train_command(CLI::App& app, const MpiRuntime& mpi);
void add_eval_command(CLI::App& app);
void add_bench_quant_command(CLI::App& app);
void add_bench_allreduce_command(CLI::App& app, const MpiRuntime& mpi);
void add_bench_data_command(CLI::App& app);
void add_compare_command(CLI::App& app, const MpiRuntime& mpi);
void add_predict_command(CLI::App& app);
void add_bench_model_command(CLI::App& app);

// A number >= 0. CLI::NonNegativeNumber says 'Value -1 not in range 0.000000 to 1797693...' (the
// whole double range written out), and an unsigned option without a check wraps -1 to 2^64 - 1.
inline const CLI::Validator kNonNegative(
    [](std::string& value) {
      char* end = nullptr;
      const double v = std::strtod(value.c_str(), &end);
      if (value.empty() || *end != '\0' || !(v >= 0)) return "must be a number >= 0, got '" + value + "'";
      return std::string();
    },
    "NONNEGATIVE", "non-negative");

// The environment qtrain started with, saved before MPI_Init adds its own variables: `compare` starts
// its trainings (and their mpirun) with it.
void remember_startup_environment(char** envp);

}  // namespace qtrain::cli
