// The start-up memory check (framework/core/memory_budget.h): reading MemAvailable, the sizes a Net reports
// before it allocates, the message of a run that cannot fit, and a Trainer refusing a model far larger
// than any machine's memory before it allocates anything.
#include <catch2/catch.hpp>

#include "framework/core/check.h"
#include "framework/core/memory_budget.h"
#include "framework/model/net.h"
#include "train/run_config.h"
#include "train/trainer.h"
#include "layers/registry.h"
#include "tests/support/error_of.h"
#include "tests/support/temp_dir.h"

using namespace qtrain;
using qtrain::testing::error_of;
using qtrain::testing::TempDir;

TEST_CASE("memory budget: MemAvailable from /proc/meminfo, and byte formatting", "[memory]") {
  CHECK(parse_mem_available("MemTotal:       24000000 kB\nMemFree:  100 kB\nMemAvailable:   20000000 kB\n") ==
        20000000LL * 1024);
  CHECK(parse_mem_available("MemTotal: 5 kB\n") == -1);
  CHECK(parse_mem_available("MemAvailable: lots\n") == -1);
  CHECK(parse_mem_available("MemAvailable: 12 MB\n") == -1);
  CHECK(format_bytes(512) == "512 bytes");
  CHECK(format_bytes(3 * 1024) == "3 KiB");
  CHECK(format_bytes(5 * 1024 * 1024 + 512 * 1024) == "5.5 MiB");
  CHECK(format_bytes(int64_t{3} << 30) == "3.0 GiB");
  CHECK(format_bytes(int64_t{5} << 40) == "5.0 TiB");
  // This machine's own figure is readable and positive.
  CHECK(available_memory(Device::cpu()).bytes > 0);
}

TEST_CASE("memory budget: a run that cannot fit is refused with its sizes", "[memory]") {
  MemoryFootprint f;
  f.items = {{"parameters", int64_t{2} << 30},
             {"gradients", int64_t{2} << 30},
             {"adam state", int64_t{4} << 30},
             {"buffers", 0}};
  CHECK(f.total() == int64_t{8} << 30);
  CHECK(f.describe() == "parameters 2.0 GiB, gradients 2.0 GiB, adam state 4.0 GiB");  // empty items left out
  const AvailableMemory plenty{int64_t{20} << 30, "MemAvailable in /proc/meminfo"};
  CHECK_NOTHROW(check_memory_fits(f, plenty, 2, Device::cpu(), "c.yaml"));
  // Four ranks on this host need 32 GiB of the 20.
  const std::string msg = error_of([&] { check_memory_fits(f, plenty, 4, Device::cpu(), "c.yaml"); });
  CHECK_THAT(msg, Catch::StartsWith("c.yaml: not enough memory on cpu: 4 replicas on this host need 32.0 GiB "
                                    "(8.0 GiB each) at least (parameters 2.0 GiB, gradients 2.0 GiB, adam state "
                                    "4.0 GiB), but 20.0 GiB is available (MemAvailable in /proc/meminfo)"));
  CHECK_THAT(msg, Catch::Contains("or run fewer ranks per host"));
  const AvailableMemory small{int64_t{6} << 30, "x"};
  CHECK_THAT(error_of([&] { check_memory_fits(f, small, 1, Device::cpu(), "c.yaml"); }),
             Catch::Contains("this run needs 8.0 GiB at least") && !Catch::Contains("fewer ranks"));
  // Unknown availability checks nothing; a footprint near INT64_MAX does not wrap around.
  CHECK_NOTHROW(check_memory_fits(f, AvailableMemory{}, 4, Device::cpu(), "c.yaml"));
  MemoryFootprint huge;
  huge.items = {{"parameters", INT64_MAX / 2}};
  CHECK_THAT(error_of([&] { check_memory_fits(huge, plenty, 4, Device::cpu(), "c.yaml"); }),
             Catch::Contains("not enough memory"));
}

TEST_CASE("memory budget: a net reports its sizes before it allocates", "[memory][net]") {
  TempDir dir;
  const std::string f = dir.write("m.yaml", R"(data: {path: /x}
model:
  input: [1, 4, 4]
  layers: [{type: flatten}, {type: dense, units: 7}, {type: relu}, {type: dense, units: 3}]
optimizer: {type: sgd, lr: 0.1}
)");
  const ModelConfig model = parse_run_config(f, {}).model;
  NetSizes seen;
  Net net(model, DType::f32, Device::cpu(), layer_registry(), loss_registry(), [&](const NetSizes& s) { seen = s; });
  CHECK(seen.parameters == net.params().numel());
  CHECK(seen.buffers == 0);
  CHECK(seen.activations_per_sample == 2 * (16 + 7 + 7 + 3));  // each output and its gradient
  // A check that throws stops the construction before the arenas exist.
  CHECK_THROWS_WITH(Net(model, DType::f32, Device::cpu(), layer_registry(), loss_registry(),
                        [](const NetSizes&) { input_error("too big"); }),
                    "too big");
}

TEST_CASE("memory budget: the trainer refuses a model larger than the machine before allocating", "[memory]") {
  // 784 x 2^30 weights: 3.3 TB of parameters, as much again for gradients and twice for Adam. Without
  // the check the arena allocation itself would fail or, at sizes Linux overcommits, the OOM killer
  // would end the process; the data folder does not exist, so nothing after the net is reached.
  TempDir dir;
  const std::string f = dir.write("big.yaml", R"(data: {dataset: mnist, path: /nonexistent, batch_size: 64}
model:
  input: [1, 28, 28]
  layers: [{type: flatten}, {type: dense, units: 1073741824}, {type: dense, units: 10}]
optimizer: {type: adam, lr: 0.001}
)");
  const std::string msg = error_of([&] { Trainer(parse_run_config(f, {{"device=cpu"}}), TrainOptions{}); });
  CHECK_THAT(msg, Catch::StartsWith(f + ": not enough memory on cpu: this run needs "));
  CHECK_THAT(msg, Catch::Contains("parameters 3.1 TiB, gradients 3.1 TiB, adam state 6.2 TiB"));
  CHECK_THAT(msg, Catch::Contains("activations and input (batch 64)"));
}
