// The real datasets that some test cases check, and how a test run behaves without them.
//
// Such a test case is tagged [real] and [real:NAME], and CTest runs it in an entry of its own
// (qtrain_add_real_data_test in tests/CMakeLists.txt: TARGET_NAME, started with --needs-data NAME).
// Before any test case runs, catch_main.cpp looks for the dataset: absent, the run prints where it
// looked and how to get it and exits 77, which CTest reports as "Skipped" instead of a silent pass;
// QTRAIN_REQUIRE_DATA (a comma-separated list of names, or "all") turns that skip into a failure, for
// machines that are meant to have the data (tools/test.sh requires MNIST, which it fetches).
//
// Names and places:
//   mnist           data/mnist in the checkout (tools/fetch_mnist.sh)
//   fashion_mnist   /usr/share/datasets/fashion-mnist (Debian's dataset-fashion-mnist)
//   cifar10_subset  SHARED/cifar10-subset
//   an4             SHARED/an4
// where SHARED is $QTRAIN_SHARED_DATA, else ../shared/data beside the checkout (or beside the folder of
// worktrees, ../../shared/data).
#pragma once

#include <catch2/catch.hpp>

#include <string>
#include <string_view>

namespace qtrain::testing {

struct RealData {
  std::string path;  // the folder a test reads (where it was looked for when absent)
  bool present = false;
  std::string hint;  // how to get it
};

// Throws std::invalid_argument for a name not in the list above.
RealData real_data(std::string_view name);

// Whether QTRAIN_REQUIRE_DATA names the dataset (or is "all").
bool real_data_required(std::string_view name);

// catch_main.cpp's check: 0 when the dataset is present, else prints why and returns 77 (skip), or 1
// when it is required.
int check_real_data(std::string_view name);

// In a test case: the dataset's folder. Absent, the case fails saying so: a run that reaches it without
// --needs-data (e.g. the executable started by hand without a filter) must not pass by checking nothing.
inline std::string require_real_data(std::string_view name) {
  const RealData d = real_data(name);
  if (!d.present) FAIL(std::string(name) << " is absent from " << d.path << " (" << d.hint << ")");
  return d.path;
}

}  // namespace qtrain::testing
