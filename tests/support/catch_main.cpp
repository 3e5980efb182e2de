// The Catch2 main of every CPU test executable. --needs-data NAME (repeatable) makes the run depend on
// a real dataset: without it nothing runs and the exit code is 77 (CTest: "Skipped"), or 1 where
// QTRAIN_REQUIRE_DATA requires it (tests/support/real_data.h).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <exception>
#include <string>
#include <vector>

#include "framework/core/float_env.h"
#include "tests/support/real_data.h"

int main(int argc, char** argv) {
  // The tests compute as qtrain's programs do: subnormals flushed (framework/core/float_env.h).
  qtrain::flush_subnormals();
  Catch::Session session;
  std::vector<std::string> needs;
  session.cli(session.cli() | Catch::clara::Opt(needs, "dataset")["--needs-data"](
                                  "skip (exit 77) unless this real dataset is present"));
  if (const int rc = session.applyCommandLine(argc, argv); rc != 0) return rc;
  try {
    for (const std::string& name : needs)
      if (const int rc = qtrain::testing::check_real_data(name); rc != 0) return rc;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "--needs-data: %s\n", e.what());
    return 1;
  }
  return session.run();
}
