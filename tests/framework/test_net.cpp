// Net: arena layout (aligned, non-overlapping named views), deterministic initialization, shapes.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "train/checkpoint.h"
#include "framework/model/net.h"
#include "train/run_config.h"
#include "framework/core/safetensors.h"
#include "layers/registry.h"
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

TEST_CASE("a checkpoint of another model is rejected even when the shared names fit", "[net][checkpoint]") {
  TempDir dir;
  Net net(mlp_config(dir), DType::f32, Device::cpu(), layer_registry(), loss_registry());
  net.init_parameters(1);
  std::vector<NamedTensor> tensors;
  for (const ParamEntry& e : net.param_entries()) tensors.push_back({e.name, net.params().view(e.offset, e.shape)});
  const std::map<std::string, std::string> meta{
      {"format", "qtrain-checkpoint-1"}, {"step", "1"}, {"epoch", "0"}, {"batch_in_epoch", "1"}, {"optimizer", "sgd"}};
  // This model's own tensors and some optimizer state (not read by evaluation) load.
  std::vector<NamedTensor> with_state = tensors;
  with_state.push_back({"optimizer/velocity", Tensor::zeros({4}, DType::f32)});
  save_safetensors(dir.file("own.safetensors"), with_state, meta);
  REQUIRE(load_checkpoint(dir.file("own.safetensors"), net, nullptr).step == 1);
  // A bigger model with one more layer: every tensor of this one fits, and the extra layer must not be ignored.
  tensors.push_back({"head2.weight", Tensor::zeros({3, 3}, DType::f32)});
  save_safetensors(dir.file("other.safetensors"), tensors, meta);
  REQUIRE_THROWS_WITH(load_checkpoint(dir.file("other.safetensors"), net, nullptr),
                      Catch::Contains("other.safetensors: the checkpoint holds tensor 'head2.weight', which this "
                                      "model does not have"));
}

TEST_CASE("a layer whose output or parameters exceed 2^40 values is a config error naming it", "[net]") {
  // A huge padding used to overflow int64 products further on (flatten reported 2^62 features, the
  // dense layer then got 0 weights) and crash.
  TempDir dir;
  auto model = [&](const std::string& layers) {
    const std::string f = dir.write("big.yaml", "data: {path: /x}\nmodel:\n  input: [1, 4, 4]\n  layers:\n" + layers +
                                                    "optimizer: {type: sgd, lr: 0.1}\n");
    return parse_run_config(f, {}).model;
  };
  const ModelConfig padded = model(
      "    - {type: conv2d, out_channels: 1, kernel: 1, padding: 1073741810}\n    - {type: flatten}\n"
      "    - {type: dense, units: 4}\n");
  REQUIRE_THROWS_WITH(Net(padded, DType::f32, Device::cpu(), layer_registry(), loss_registry()),
                      Catch::Contains("model.layers.0 (conv2d 'conv2d1'): its output") &&
                          Catch::Contains("would hold more than 2^40 values"));
  const ModelConfig wide = model("    - {type: flatten}\n    - {type: dense, units: 100000000000}\n");
  REQUIRE_THROWS_WITH(Net(wide, DType::f32, Device::cpu(), layer_registry(), loss_registry()),
                      Catch::Contains("its parameter weight") && Catch::Contains("2^40"));
}

namespace {
// A pass-through layer that records its backward calls and whether it was asked for an input gradient.
struct ProbeLog {
  std::vector<std::string> backward;  // "<name>:dx" or "<name>:-" per call, in call order
};
ProbeLog probe_log;

class Probe : public Layer {
 public:
  const char* type() const override { return "probe"; }

 protected:
  Shape configure(const Shape& input) override { return input; }
  void forward_cpu(Context&, const Tensor& x, Tensor& y, bool) override {
    std::copy_n(x.data<float>(), x.numel(), y.data<float>());
  }
  void backward_cpu(Context&, const Tensor&, const Tensor&, const Tensor& dy, Tensor& dx) override {
    probe_log.backward.push_back(name() + (dx.defined() ? ":dx" : ":-"));
    if (dx.defined()) std::copy_n(dy.data<float>(), dy.numel(), dx.data<float>());
  }
};

// Runs one forward, loss and backward of `net` on fixed values; returns the parameter gradients.
std::vector<float> one_backward(Net& net, std::vector<int>& done) {
  Context ctx = Context::cpu(1, 1);
  Tensor x = Tensor::empty({3, 6}, DType::f32);
  for (int i = 0; i < 18; ++i) x.data<float>()[i] = 0.05f * static_cast<float>(i % 5) - 0.1f;
  Tensor labels = Tensor::empty({3}, DType::i32);
  for (int i = 0; i < 3; ++i) labels.data<int32_t>()[i] = i % 2;
  net.forward(ctx, x, true);
  net.loss(ctx, labels, true);
  probe_log.backward.clear();
  done.clear();
  net.backward(ctx, [&](int i) { done.push_back(i); });
  const float* g = net.grads().data<float>();
  return std::vector<float>(g, g + net.grads().numel());
}
}  // namespace

TEST_CASE("backward skips what no parameter lies behind: layers in front of the first dense, its dx", "[net]") {
  TempDir dir;
  const std::string f = dir.write("m.yaml", R"(data: {path: /x}
model:
  input: [6]
  layers:
    - {type: dropout, p: 0.5}
    - {type: probe, name: front}
    - {type: dense, units: 5}
    - {type: probe, name: middle}
    - {type: relu}
    - {type: dense, units: 2, name: head}
optimizer: {type: sgd, lr: 0.1}
)");
  LayerRegistry layers("layer type");
  register_layers(layers);
  layers.add("probe", [](ConfigNode& cfg) -> std::unique_ptr<Layer> {
    cfg.finish();
    return std::make_unique<Probe>();
  });
  Net net(parse_run_config(f, {}).model, DType::f32, Device::cpu(), layers, loss_registry());
  net.init_parameters(3);
  std::vector<int> done;
  const std::vector<float> grads = one_backward(net, done);
  // Every layer still reports done (the exchange waits on each); only the probe behind dense runs.
  REQUIRE(done == std::vector<int>{5, 4, 3, 2, 1, 0});
  REQUIRE(probe_log.backward == std::vector<std::string>{"middle:dx"});

  // With the input gradient enabled everything runs, and the parameter gradients are the same bits.
  net.set_input_gradient(true);
  const std::vector<float> with_input = one_backward(net, done);
  REQUIRE(probe_log.backward == std::vector<std::string>{"middle:dx", "front:dx"});
  REQUIRE(done == std::vector<int>{5, 4, 3, 2, 1, 0});
  REQUIRE(with_input == grads);
  REQUIRE(net.input_gradient().defined());
}
