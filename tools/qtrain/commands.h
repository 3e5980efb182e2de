// The subcommands of the qtrain CLI; each adds itself to the CLI11 app with its options, --help text
// and callback. main.cpp lists them. Callbacks throw qtrain::Error; main prints it as one line.
#pragma once

#include <CLI/CLI.hpp>

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

// The environment qtrain started with, saved before MPI_Init adds its own variables: `compare` starts
// its trainings (and their mpirun) with it.
void remember_startup_environment(char** envp);

}  // namespace qtrain::cli
