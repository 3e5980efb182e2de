#include "tests/support/real_data.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <stdexcept>

namespace qtrain::testing {
namespace fs = std::filesystem;

namespace {

// The folder of the shared real data (its README: tests read it as ../shared/data from the checkout;
// a worktree in a folder of worktrees finds it one level further up).
fs::path shared_data() {
  if (const char* e = std::getenv("QTRAIN_SHARED_DATA"); e && *e) return e;
  const fs::path beside = fs::path(QTRAIN_SOURCE_DIR) / ".." / "shared" / "data";
  const fs::path above = fs::path(QTRAIN_SOURCE_DIR) / ".." / ".." / "shared" / "data";
  return fs::is_directory(beside) || !fs::is_directory(above) ? beside : above;
}

bool all_files(const fs::path& dir, std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (!fs::is_regular_file(dir / n)) return false;
  return true;
}

}  // namespace

RealData real_data(std::string_view name) {
  RealData d;
  if (name == "mnist") {
    const fs::path dir = fs::path(QTRAIN_SOURCE_DIR) / "data" / "mnist";
    d.path = dir.string();
    d.present = all_files(dir, {"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                                "t10k-labels-idx1-ubyte"});
    d.hint = "tools/fetch_mnist.sh fetches it; tools/test.sh does so";
  } else if (name == "fashion_mnist") {
    const fs::path dir = "/usr/share/datasets/fashion-mnist";
    d.path = dir.string();
    d.present = fs::is_directory(dir);
    d.hint = "apt-get install dataset-fashion-mnist";
  } else if (name == "cifar10_subset") {
    const fs::path dir = shared_data() / "cifar10-subset";
    d.path = dir.string();
    d.present = all_files(dir, {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin", "data_batch_4.bin",
                                "data_batch_5.bin", "test_batch.bin"});
    d.hint =
        "the shared real data (QTRAIN_SHARED_DATA, else ../shared/data): 5 training batches and the test "
        "batch of 1000 CIFAR-10 records each, the binary format";
  } else if (name == "an4") {
    const fs::path dir = shared_data() / "an4";
    d.path = dir.string();
    d.present = all_files(
        dir / "etc", {"an4_train.fileids", "an4_train.transcription", "an4_test.fileids", "an4_test.transcription"});
    d.hint = "the shared real data (QTRAIN_SHARED_DATA, else ../shared/data): CMU's AN4 corpus";
  } else {
    throw std::invalid_argument("unknown real dataset '" + std::string(name) +
                                "' (mnist, fashion_mnist, cifar10_subset, an4)");
  }
  return d;
}

bool real_data_required(std::string_view name) {
  const char* e = std::getenv("QTRAIN_REQUIRE_DATA");
  if (!e) return false;
  std::stringstream list(e);
  for (std::string item; std::getline(list, item, ',');)
    if (item == name || item == "all") return true;
  return false;
}

int check_real_data(std::string_view name) {
  const RealData d = real_data(name);
  if (d.present) return 0;
  const std::string n(name);
  if (real_data_required(name)) {
    std::printf("FAILED: %s is absent from %s, and QTRAIN_REQUIRE_DATA requires it (%s)\n", n.c_str(), d.path.c_str(),
                d.hint.c_str());
    return 1;
  }
  std::printf("SKIPPED: %s is absent from %s (%s)\n", n.c_str(), d.path.c_str(), d.hint.c_str());
  return 77;
}

}  // namespace qtrain::testing
