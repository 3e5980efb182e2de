// Forward values, shapes, the backward contract (overwrite, optional dx) and configuration errors of
// the layers on the CPU path, in f32 and f64. Configuration goes through the registry and ConfigNode
// exactly as Net does, so the messages tested here are the ones a user sees.
#include <catch2/catch.hpp>

#include <cmath>

#include "layers/activation.h"
#include "layers/dense.h"
#include "layers/flatten.h"
#include "layers/registry.h"
#include "tests/support/gradcheck.h"
#include "tests/support/layer_from_yaml.h"

using namespace qtrain;
using namespace qtrain::testing;

namespace {

template <typename T>
Tensor tensor_of(const Shape& shape, std::initializer_list<double> values) {
  Tensor t = Tensor::empty(shape, dtype_of<T>());
  REQUIRE(static_cast<int64_t>(values.size()) == t.numel());
  int64_t i = 0;
  for (double v : values) t.data<T>()[i++] = static_cast<T>(v);
  return t;
}

template <typename T>
std::vector<double> values_of(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[static_cast<size_t>(i)] = static_cast<double>(t.data<T>()[i]);
  return v;
}

}  // namespace

TEMPLATE_TEST_CASE("dense forward and backward on a hand-computed case", "[layers][dense]", float, double) {
  using T = TestType;
  Context ctx = Context::cpu(1, 1);
  Dense layer(2, true);
  REQUIRE(layer.setup({3}) == Shape{2});
  // W = [[1, 2, 3], [4, 5, 6]], b = [0.5, -1]; views of one arena, as Net binds them.
  Tensor params = tensor_of<T>({8}, {1, 2, 3, 4, 5, 6, 0.5, -1});
  Tensor grads = Tensor::empty({8}, dtype_of<T>());
  grads.fill_(1e30);  // backward must overwrite, not accumulate
  layer.bind({params.view(0, {2, 3}), params.view(6, {2})}, {grads.view(0, {2, 3}), grads.view(6, {2})});

  const Tensor x = tensor_of<T>({2, 3}, {1, 0, -1, 2, 1, 0});
  Tensor y = Tensor::empty({2, 2}, dtype_of<T>());
  y.fill_(1e30);
  layer.forward(ctx, x, y, true);
  // y = x W^T + b: row 0 = [1 - 3 + 0.5, 4 - 6 - 1], row 1 = [2 + 2 + 0.5, 8 + 5 - 1]
  REQUIRE(values_of<T>(y) == std::vector<double>{-1.5, -3, 4.5, 12});

  const Tensor dy = tensor_of<T>({2, 2}, {1, 0, 0, 1});
  Tensor dx = Tensor::empty({2, 3}, dtype_of<T>());
  layer.backward(ctx, x, y, dy, dx);
  // dW = dy^T x, db = column sums of dy, dx = dy W
  REQUIRE(values_of<T>(grads) == std::vector<double>{1, 0, -1, 2, 1, 0, 1, 1});
  REQUIRE(values_of<T>(dx) == std::vector<double>{1, 2, 3, 4, 5, 6});

  SECTION("an undefined dx is skipped and the parameter gradients are unchanged") {
    grads.fill_(1e30);
    Tensor none;
    layer.backward(ctx, x, y, dy, none);
    REQUIRE(values_of<T>(grads) == std::vector<double>{1, 0, -1, 2, 1, 0, 1, 1});
  }
}

TEST_CASE("dense without bias has one parameter and no bias term", "[layers][dense]") {
  Context ctx = Context::cpu(1, 1);
  Dense layer(2, false);
  layer.setup({2});
  const auto specs = layer.param_specs();
  REQUIRE(specs.size() == 1);
  REQUIRE(specs[0].name == "weight");
  REQUIRE(specs[0].shape == Shape{2, 2});
  Tensor w = tensor_of<double>({2, 2}, {1, 2, 3, 4});
  Tensor dw = Tensor::empty({2, 2}, DType::f64);
  layer.bind({w}, {dw});
  Tensor y = Tensor::empty({1, 2}, DType::f64);
  layer.forward(ctx, tensor_of<double>({1, 2}, {1, 1}), y, false);
  REQUIRE(values_of<double>(y) == std::vector<double>{3, 7});
}

TEST_CASE("dense parameter specs follow PyTorch's nn.Linear", "[layers][dense]") {
  Dense layer(10, true);
  layer.setup({784});
  const auto specs = layer.param_specs();
  REQUIRE(specs.size() == 2);
  REQUIRE(specs[0].shape == Shape{10, 784});
  REQUIRE(specs[0].init == Init::uniform_fan_in);
  REQUIRE(specs[0].fan_in == 784);
  REQUIRE(specs[1].shape == Shape{10});
  REQUIRE(specs[1].init == Init::uniform_fan_in);
  REQUIRE(specs[1].fan_in == 784);  // PyTorch bounds the bias by 1/sqrt(in_features)
}

TEST_CASE("dense f32 agrees with f64 on random data", "[layers][dense]") {
  Context ctx = Context::cpu(1, 1);
  Dense l64(17, true), l32(17, true);
  l64.setup({33});
  l32.setup({33});
  BoundParams p64 = bind_random_params(l64, 5, DType::f64);
  BoundParams p32 = bind_random_params(l32, 5, DType::f32);
  const Tensor x64 = random_tensor({9, 33}, 6), x32 = random_tensor({9, 33}, 6, -1, 1, DType::f32);
  Tensor y64 = Tensor::empty({9, 17}, DType::f64), y32 = Tensor::empty({9, 17}, DType::f32);
  l64.forward(ctx, x64, y64, true);
  l32.forward(ctx, x32, y32, true);
  for (int64_t i = 0; i < y64.numel(); ++i) REQUIRE(y32.data<float>()[i] == Approx(y64.data<double>()[i]).margin(1e-5));
}

TEST_CASE("dense rejects inputs that are not flat", "[layers][dense]") {
  Dense layer(4, true);
  REQUIRE_THROWS_WITH(layer.setup({1, 28, 28}),
                      Catch::Contains("[1, 28, 28]") && Catch::Contains("add a {type: flatten} layer before it"));
}

TEST_CASE("dense checks the tensors it is given", "[layers][dense]") {
  Context ctx = Context::cpu(1, 1);
  Dense layer(4, true);
  layer.setup({3});
  Tensor y = Tensor::empty({2, 4}, DType::f64);
  REQUIRE_THROWS_WITH(layer.forward(ctx, Tensor::zeros({2, 3}, DType::f64), y, true),
                      Catch::Contains("parameters not bound"));
  BoundParams bound = bind_random_params(layer, 1);
  REQUIRE_THROWS_WITH(layer.forward(ctx, Tensor::zeros({2, 5}, DType::f64), y, true),
                      Catch::Contains("x has shape [2, 5], expected 2 rows of [3]"));
  Tensor y32 = Tensor::empty({2, 4}, DType::f32);
  REQUIRE_THROWS_WITH(layer.forward(ctx, Tensor::zeros({2, 3}, DType::f32), y32, true),
                      Catch::Contains("weight (or its gradient) is f64 [4, 3], expected f32 [4, 3]"));
  REQUIRE_THROWS_WITH(layer.forward(ctx, Tensor::zeros({2, 3}, DType::f32), y, true),
                      Catch::Contains("y is f64 but the input is f32"));
  REQUIRE_THROWS_WITH(layer.forward(ctx, Tensor::zeros({2, 3}, DType::i32), y, true),
                      Catch::Contains("must be f32 or f64, got i32"));
}

TEMPLATE_TEST_CASE("activations compute their functions and derivatives from y", "[layers][activation]", float,
                   double) {
  using T = TestType;
  Context ctx = Context::cpu(1, 1);
  const Tensor x = tensor_of<T>({1, 4}, {-2, -0.5, 0.5, 3});
  const Tensor dy = tensor_of<T>({1, 4}, {1, 2, 3, 4});
  Tensor y = Tensor::empty({1, 4}, dtype_of<T>()), dx = Tensor::empty({1, 4}, dtype_of<T>());
  for (ActivationKind kind : {ActivationKind::relu, ActivationKind::tanh, ActivationKind::sigmoid}) {
    Activation layer(kind);
    REQUIRE(layer.setup({4}) == Shape{4});
    layer.forward(ctx, x, y, true);
    layer.backward(ctx, x, y, dy, dx);
    for (int i = 0; i < 4; ++i) {
      const double v = static_cast<double>(x.data<T>()[i]), g = static_cast<double>(dy.data<T>()[i]);
      double f = 0, d = 0;
      switch (kind) {
        case ActivationKind::relu: f = v > 0 ? v : 0, d = v > 0 ? g : 0; break;
        case ActivationKind::tanh: f = std::tanh(v), d = g * (1 - f * f); break;
        case ActivationKind::sigmoid: f = 1 / (1 + std::exp(-v)), d = g * f * (1 - f); break;
      }
      INFO(activation_name(kind) << " at " << v);
      REQUIRE(static_cast<double>(y.data<T>()[i]) == Approx(f).epsilon(1e-6));
      REQUIRE(static_cast<double>(dx.data<T>()[i]) == Approx(d).epsilon(1e-5));
    }
  }
}

TEST_CASE("sigmoid saturates without overflow", "[layers][activation]") {
  Context ctx = Context::cpu(1, 1);
  Activation layer(ActivationKind::sigmoid);
  layer.setup({2});
  Tensor y = Tensor::empty({1, 2}, DType::f32);
  layer.forward(ctx, tensor_of<float>({1, 2}, {-1000, 1000}), y, true);
  REQUIRE(y.data<float>()[0] == 0.0f);
  REQUIRE(y.data<float>()[1] == 1.0f);
}

TEST_CASE("flatten reshapes and copies both ways", "[layers][flatten]") {
  Context ctx = Context::cpu(1, 1);
  Flatten layer;
  REQUIRE(layer.setup({2, 3, 4}) == Shape{24});
  const Tensor x = random_tensor({5, 2, 3, 4}, 3);
  Tensor y = Tensor::empty({5, 24}, DType::f64);
  layer.forward(ctx, x, y, true);
  REQUIRE(values_of<double>(y) == values_of<double>(x));
  Tensor dx = Tensor::empty({5, 2, 3, 4}, DType::f64);
  layer.backward(ctx, x, y, y, dx);
  REQUIRE(values_of<double>(dx) == values_of<double>(x));
  REQUIRE_THROWS_WITH(layer.setup({}), Catch::Contains("at least one dimension"));
}

TEST_CASE("the registry builds every layer from its config", "[layers][config]") {
  REQUIRE(std::string(layer_from_yaml("{type: flatten}")->type()) == "flatten");
  REQUIRE(std::string(layer_from_yaml("{type: relu, name: act1}")->type()) == "relu");
  REQUIRE(std::string(layer_from_yaml("{type: tanh}")->type()) == "tanh");
  REQUIRE(std::string(layer_from_yaml("{type: sigmoid}")->type()) == "sigmoid");
  auto dense = layer_from_yaml("{type: dense, units: 10, bias: false}");
  REQUIRE(dynamic_cast<Dense&>(*dense).units() == 10);
  REQUIRE_FALSE(dynamic_cast<Dense&>(*dense).has_bias());
  REQUIRE(dynamic_cast<Dense&>(*layer_from_yaml("{type: dense, units: 3}")).has_bias());

  LossRegistry losses("loss");
  register_losses(losses);
  ConfigNode empty = config_from_text("{}", "model.layers.0", "model.yaml");
  REQUIRE(std::string(losses.create("softmax_cross_entropy", empty)->type()) == "softmax_cross_entropy");
}

TEST_CASE("configuration errors name the key and what was expected", "[layers][config]") {
  REQUIRE_THROWS_WITH(
      layer_from_yaml("{type: dense}"),
      Catch::Contains("model.yaml:1:1") && Catch::Contains("model.layers.0.units is required but missing"));
  REQUIRE_THROWS_WITH(layer_from_yaml("{type: dense, units: 0}"),
                      Catch::Contains("model.layers.0.units must be > 0, got 0"));
  REQUIRE_THROWS_WITH(layer_from_yaml("{type: dense, units: 1.5}"),
                      Catch::Contains("units must be an integer, got '1.5'"));
  REQUIRE_THROWS_WITH(
      layer_from_yaml("{type: dense, units: 4, unitz: 5}"),
      Catch::Contains("unknown key 'model.layers.0.unitz'") && Catch::Contains("did you mean 'units'?"));
  REQUIRE_THROWS_WITH(
      layer_from_yaml("{type: dropout, p: 1.5}"),
      Catch::Contains("model.yaml:1:20") && Catch::Contains("model.layers.0.p must be in [0, 1), got 1.5"));
  REQUIRE_THROWS_WITH(layer_from_yaml("{type: dropout, p: 1}"), Catch::Contains("p must be in [0, 1), got 1"));
  REQUIRE_THROWS_WITH(layer_from_yaml("{type: dropout, p: -0.1}"), Catch::Contains("p must be in [0, 1), got -0.1"));
  REQUIRE_THROWS_WITH(layer_from_yaml("{type: relu, alpha: 0.1}"),
                      Catch::Contains("unknown key 'model.layers.0.alpha'"));
  REQUIRE_THROWS_WITH(layer_from_yaml("{type: flatten, units: 3}"),
                      Catch::Contains("unknown key 'model.layers.0.units'"));
  REQUIRE_THROWS_AS(layer_from_yaml("{type: dense}"), InputError);
}
