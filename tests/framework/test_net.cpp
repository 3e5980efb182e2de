// Net: arena layout (aligned, non-overlapping named views), deterministic initialization, shapes.
#include <catch2/catch.hpp>

#include "framework/run_config.h"
#include "framework/trainer.h"
#include "tests/support/temp_dir.h"

using namespace qtrain;
using qtrain::testing::TempDir;

namespace {
ModelConfig mlp_config(TempDir& dir) {
  const std::string f = dir.write("m.yaml", R"(data: {path: /x}
model:
  input: [1, 4, 4]
  layers:
    - {type: flatten}
    - {type: dense, units: 7}
    - {type: relu}
    - {type: dropout, p: 0.5}
    - {type: dense, units: 3, name: head}
optimizer: {type: sgd, lr: 0.1}
)");
  return parse_run_config(f, {}).model;
}
}  // namespace

TEST_CASE("parameters live in one aligned arena with named views", "[net]") {
  TempDir dir;
  Net net(mlp_config(dir), DType::f32, Device::cpu(), layer_registry(), loss_registry());
  const auto& e = net.param_entries();
  REQUIRE(e.size() == 4);
  REQUIRE(e[0].name == "dense1.weight");
  REQUIRE(e[0].shape == Shape{7, 16});
  REQUIRE(e[1].name == "dense1.bias");
  REQUIRE(e[2].name == "head.weight");
  REQUIRE(e[3].name == "head.bias");
  REQUIRE(net.num_parameters() == 7 * 16 + 7 + 3 * 7 + 3);
  for (size_t i = 0; i < e.size(); ++i) {
    REQUIRE(e[i].offset % 16 == 0);
    if (i > 0) REQUIRE(e[i].offset >= e[i - 1].offset + e[i - 1].numel);
  }
  REQUIRE(net.params().numel() >= e.back().offset + e.back().numel);
  REQUIRE(net.output_shape() == Shape{3});
  // The layer's parameter tensors are views of the arena.
  net.init_parameters(3);
  REQUIRE(net.layer(1).params()[0].data<float>() == net.params().data<float>() + e[0].offset);
}

TEST_CASE("initialization is deterministic and seed dependent", "[net]") {
  TempDir dir;
  ModelConfig m = mlp_config(dir);
  Net a(m, DType::f32, Device::cpu(), layer_registry(), loss_registry());
  Net b(m, DType::f32, Device::cpu(), layer_registry(), loss_registry());
  Net c(m, DType::f32, Device::cpu(), layer_registry(), loss_registry());
  a.init_parameters(5);
  b.init_parameters(5);
  c.init_parameters(6);
  const int64_t n = a.params().numel();
  REQUIRE(std::equal(a.params().data<float>(), a.params().data<float>() + n, b.params().data<float>()));
  REQUIRE(!std::equal(a.params().data<float>(), a.params().data<float>() + n, c.params().data<float>()));
  // Dense weights are U(-1/sqrt(fan_in), 1/sqrt(fan_in)) as in PyTorch.
  const float* w = a.params().data<float>();
  for (int i = 0; i < 7 * 16; ++i) REQUIRE(std::abs(w[i]) <= 0.25f);
}

TEST_CASE("forward, loss and backward fill the gradient arena", "[net]") {
  TempDir dir;
  Net net(mlp_config(dir), DType::f32, Device::cpu(), layer_registry(), loss_registry());
  net.init_parameters(1);
  Context ctx = Context::cpu(1, 1);
  Tensor x = Tensor::empty({5, 1, 4, 4}, DType::f32);
  for (int i = 0; i < 80; ++i) x.data<float>()[i] = 0.1f * static_cast<float>(i % 7) - 0.3f;
  Tensor labels = Tensor::empty({5}, DType::i32);
  for (int i = 0; i < 5; ++i) labels.data<int32_t>()[i] = i % 3;
  const Tensor& logits = net.forward(ctx, x, true);
  REQUIRE(logits.shape() == Shape{5, 3});
  const LossStats s = net.loss(ctx, labels, true);
  REQUIRE(s.count == 5);
  REQUIRE(s.loss_sum > 0);
  std::vector<int> done;
  net.backward(ctx, [&](int i) { done.push_back(i); });
  REQUIRE(done == std::vector<int>{4, 3, 2, 1, 0});
  double norm = 0;
  for (int64_t i = 0; i < net.grads().numel(); ++i) norm += std::abs(net.grads().data<float>()[i]);
  REQUIRE(norm > 0);
}
