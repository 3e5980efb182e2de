// Config validation at start-up: every bad input gives one clear message naming the file, line and key.
#include <catch2/catch.hpp>

#include "framework/model/net.h"
#include "train/run_config.h"
#include "layers/registry.h"
#include "optim/optimizer.h"
#include "tests/support/temp_dir.h"

using namespace qtrain;
using qtrain::testing::TempDir;

namespace {
const char* kGood = R"(name: t
data: {dataset: mnist, path: /nonexistent/mnist, batch_size: 32}
model:
  input: [1, 28, 28]
  layers:
    - {type: flatten}
    - {type: dense, units: 10}
  loss: softmax_cross_entropy
optimizer: {type: sgd, lr: 0.1}
train: {epochs: 1}
)";

std::string replace(std::string s, const std::string& from, const std::string& to) {
  const size_t at = s.find(from);
  REQUIRE(at != std::string::npos);
  return s.replace(at, from.size(), to);
}
}  // namespace

TEST_CASE("a good config parses and keeps its defaults", "[config]") {
  TempDir dir;
  RunConfig rc = parse_run_config(dir.write("good.yaml", kGood), {});
  REQUIRE(rc.name == "t");
  REQUIRE(rc.data.batch_size == 32);
  REQUIRE(rc.model.layers.size() == 2);
  REQUIRE(rc.output.dir == "runs/t");
  REQUIRE(rc.train.epochs == 1);
}

TEST_CASE("a run name that is not a folder name is refused", "[config]") {
  // name: .. used to make runs/.. (the working directory) the run directory, silently.
  TempDir dir;
  for (const char* name : {"..", ".", "a/b"}) {
    const std::string f = dir.write("name.yaml", replace(kGood, "name: t", std::string("name: '") + name + "'"));
    REQUIRE_THROWS_WITH(parse_run_config(f, {}), Catch::Contains(f +
                                                                 ":1:7: name must be a non-empty name without "
                                                                 "'/', and not '.' or '..', got '" +
                                                                 name + "'"));
  }
}

TEST_CASE("a typo in a section name is reported with its line and a suggestion", "[config]") {
  TempDir dir;
  const std::string f = dir.write("typo.yaml", replace(kGood, "optimizer:", "optimiser:"));
  REQUIRE_THROWS_WITH(parse_run_config(f, {}), Catch::Contains(f + ":9:1") &&
                                                   Catch::Contains("unknown key 'optimiser'") &&
                                                   Catch::Contains("did you mean 'optimizer'"));
}

TEST_CASE("a negative learning rate names optimizer.lr and its line", "[config]") {
  TempDir dir;
  const std::string f = dir.write("lr.yaml", replace(kGood, "lr: 0.1", "lr: -0.1"));
  RunConfig rc = parse_run_config(f, {});
  REQUIRE_THROWS_WITH(make_optimizer(rc.optimizer),
                      Catch::Contains(f + ":9:") && Catch::Contains("optimizer.lr") && Catch::Contains("-0.1"));
}

TEST_CASE("an unknown layer type lists the known ones", "[config]") {
  TempDir dir;
  const std::string f = dir.write("layer.yaml", replace(kGood, "type: dense", "type: dens"));
  RunConfig rc = parse_run_config(f, {});
  REQUIRE_THROWS_WITH(
      Net(rc.model, DType::f32, Device::cpu(), layer_registry(), loss_registry()),
      Catch::Contains(f + ":7:") && Catch::Contains("unknown layer type 'dens'") && Catch::Contains("dense"));
}

TEST_CASE("overrides are validated like the file", "[config]") {
  TempDir dir;
  const std::string f = dir.write("good.yaml", kGood);
  REQUIRE_THROWS_WITH(parse_run_config(f, {"train.epochs=0"}),
                      Catch::Contains("--set train.epochs") && Catch::Contains("must be >= 1"));
  REQUIRE_THROWS_WITH(parse_run_config(f, {"train.epoch=3"}), Catch::Contains("unknown key 'train.epoch'"));
  REQUIRE(parse_run_config(f, {"train.epochs=3"}).train.epochs == 3);
}

TEST_CASE("a missing data directory is one clear error", "[config]") {
  TempDir dir;
  RunConfig rc = parse_run_config(dir.write("good.yaml", kGood), {});
  REQUIRE_THROWS_WITH(open_dataset(rc.data, Split::train), Catch::Contains("/nonexistent/mnist"));
}
