// A standalone `qtrain bench-quant` (the subcommand from tools/qtrain/cmd_bench_quant.cpp in a program
// of its own) until the qtrain executable lists that source; same options, same output. Errors are
// printed as one line, as tools/qtrain/main.cpp does.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "framework/check.h"
#include "tools/qtrain/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"qtrain bench-quant (standalone build)"};
  app.require_subcommand(1);
  qtrain::cli::add_bench_quant_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const qtrain::Error& e) {
    std::fprintf(stderr, "qtrain: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
