// Every config under configs/ must keep working as the code changes: it parses (every key known),
// its model builds into a Net (layer types, shapes, graph), and its quantization policy resolves for
// every parameter tensor. Datasets are not opened (they are not in a fresh clone).
#include <catch2/catch.hpp>

#include <filesystem>

#include "framework/model/net.h"
#include "train/run_config.h"
#include "layers/registry.h"

using namespace qtrain;

TEST_CASE("every shipped config parses and builds its model", "[configs]") {
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(QTRAIN_SOURCE_DIR) + "/configs"))
    if (entry.path().extension() == ".yaml") files.push_back(entry.path().string());
  std::sort(files.begin(), files.end());
  REQUIRE(files.size() >= 4);
  for (const std::string& file : files) {
    INFO(file);
    const RunConfig config = parse_run_config(file, {});
    Net net(config.model, DType::f32, Device::cpu(), layer_registry(), loss_registry());
    CHECK(net.num_parameters() > 0);
    for (const ParamEntry& e : net.param_entries())
      CHECK_NOTHROW(config.quantization.resolve(e.layer_name, e.layer_type, e.numel));
  }
}

TEST_CASE("the mixed-precision CIFAR config sends convolutions at 8 bits and the rest at 4", "[configs]") {
  const RunConfig config =
      parse_run_config(std::string(QTRAIN_SOURCE_DIR) + "/configs/cifar_dettmers_convnet_mixed.yaml", {});
  Net net(config.model, DType::f32, Device::cpu(), layer_registry(), loss_registry());
  int conv8 = 0, other4 = 0;
  for (const ParamEntry& e : net.param_entries()) {
    const QuantSpec spec = config.quantization.resolve(e.layer_name, e.layer_type, e.numel);
    if (spec.method != QuantMethod::qsgd) continue;  // small tensors stay fp32
    if (e.layer_type == "conv2d")
      conv8 += spec.integer("bits") == 8;
    else
      other4 += spec.integer("bits") == 4;
  }
  CHECK(conv8 == 1);   // conv2d2.weight (conv2d1.weight has 4800 values, under min_numel)
  CHECK(other4 == 3);  // two locally connected weights and the dense weight
}
