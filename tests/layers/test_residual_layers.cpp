// The layers of residual networks on the CPU reference path: add, pad_channels and batch norm.
// Float64 central-difference gradient checks (training mode, affine parameters included), batch
// norm's statistics against hand-computed values (PyTorch's conventions: biased variance to
// normalize, unbiased for running_var, momentum 0.1), evaluation with the running statistics, and
// the configuration errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <vector>

#include "framework/core/config_node.h"
#include "layers/activation.h"
#include "layers/add.h"
#include "layers/batchnorm.h"
#include "layers/pad_channels.h"
#include "tests/support/gradcheck.h"
#include "tests/support/config_text.h"

using namespace qtrain;
using namespace qtrain::testing;

namespace {

void require_ok(const GradCheckResult& r) {
  INFO(r.failures);
  INFO("checked " << r.checked << ", skipped " << r.skipped << ", max error " << r.max_error);
  REQUIRE(r.ok());
}

Shape with_batch(int64_t b, const Shape& s) {
  Shape out{b};
  out.insert(out.end(), s.begin(), s.end());
  return out;
}

// A layer set up for `input` and bound to random parameters and initial buffers (f64 CPU).
struct Bound {
  BoundParams params;
  Tensor buffers;
  Shape out;
};
Bound set_up(Layer& layer, const Shape& input, uint64_t seed) {
  Bound b;
  b.out = layer.setup(input);
  b.params = bind_random_params(layer, seed);
  b.buffers = bind_initial_buffers(layer);
  return b;
}

}  // namespace

TEST_CASE("add gradients with two and three inputs, with and without the fused relu", "[layers][gradcheck][add]") {
  Context ctx = Context::cpu(1, 1);
  for (auto [n, relu] : {std::pair{2, false}, std::pair{3, false}, std::pair{2, true}, std::pair{3, true}}) {
    Add add(relu);
    std::vector<Shape> shapes(static_cast<size_t>(n), Shape{3, 2, 2});
    const Shape out = add.setup_inputs(shapes);
    REQUIRE(out == Shape{3, 2, 2});
    std::vector<Tensor> xs;
    for (int k = 0; k < n; ++k) xs.push_back(random_tensor({4, 3, 2, 2}, 10 + k));
    require_ok(check_multi_input_gradients(add, ctx, xs, out));
  }
}

TEST_CASE("add computes the sum and leaves undefined input gradients alone", "[layers][add]") {
  Context ctx = Context::cpu(1, 1);
  Add add;
  add.setup_inputs({{5}, {5}});
  const Tensor a = random_tensor({2, 5}, 1), b = random_tensor({2, 5}, 2);
  Tensor y = Tensor::empty({2, 5}, DType::f64);
  const std::vector<Tensor> xs{a, b};
  add.forward_inputs(ctx, xs, y, false);
  for (int i = 0; i < 10; ++i) REQUIRE(y.data<double>()[i] == a.data<double>()[i] + b.data<double>()[i]);
  const Tensor dy = random_tensor({2, 5}, 3);
  std::vector<Tensor> dxs{Tensor(), Tensor::empty({2, 5}, DType::f64)};
  add.backward_inputs(ctx, xs, y, dy, dxs);
  REQUIRE(!dxs[0].defined());
  for (int i = 0; i < 10; ++i) REQUIRE(dxs[1].data<double>()[i] == dy.data<double>()[i]);
}

TEMPLATE_TEST_CASE("add with activation relu writes the bits of add then relu", "[layers][add]", float, double) {
  // Two inputs (one fused loop) and three (sum, then relu), forward also in place over the first input
  // (as Net sums gradients), backward into two gradients and into one.
  using T = TestType;
  const DType dt = dtype_of<T>();
  const Shape shape{4, 3, 33, 35};  // 13.9k values: split over the 3 lanes
  Context ctx = Context::cpu(1, 3);
  auto same = [](const Tensor& a, const Tensor& b) {
    return std::memcmp(a.data<T>(), b.data<T>(), static_cast<size_t>(a.numel()) * sizeof(T)) == 0;
  };
  for (int n : {2, 3}) {
    INFO(n << " inputs");
    std::vector<Tensor> xs;
    for (int k = 0; k < n; ++k) xs.push_back(random_tensor(shape, 70 + k, -1.0, 1.0, dt));
    const std::vector<Shape> shapes(static_cast<size_t>(n), Shape{3, 33, 35});
    Add fused(true), plain;
    fused.setup_inputs(shapes);
    plain.setup_inputs(shapes);
    Activation relu(ActivationKind::relu);
    relu.setup({3, 33, 35});
    Tensor yf = Tensor::empty(shape, dt), z = Tensor::empty(shape, dt), yp = Tensor::empty(shape, dt);
    fused.forward_inputs(ctx, xs, yf, true);
    plain.forward_inputs(ctx, xs, z, true);
    relu.forward(ctx, z, yp, true);
    CHECK(same(yf, yp));
    std::vector<Tensor> in_place = xs;
    in_place[0] = xs[0].clone();
    fused.forward_inputs(ctx, in_place, in_place[0], true);
    CHECK(same(in_place[0], yp));

    const Tensor dy = random_tensor(shape, 79, -1.0, 1.0, dt);
    Tensor dz = Tensor::empty(shape, dt);
    relu.backward(ctx, z, yp, dy, dz);
    std::vector<Tensor> dxs{Tensor::empty(shape, dt), Tensor(), Tensor::empty(shape, dt)};
    dxs.resize(static_cast<size_t>(n));
    fused.backward_inputs(ctx, xs, yf, dy, dxs);
    for (const Tensor& dx : dxs)
      if (dx.defined()) CHECK(same(dx, dz));
    std::vector<Tensor> one{Tensor(), Tensor::empty(shape, dt)};
    one.resize(static_cast<size_t>(n));
    fused.backward_inputs(ctx, xs, yf, dy, one);
    CHECK(same(one[1], dz));
  }
  ConfigNode cfg = config_from_text("{activation: relu}", "model.layers.3", "layer.yaml");
  REQUIRE(dynamic_cast<Add&>(*make_add(cfg)).fused_relu());
  ConfigNode bad = config_from_text("{activation: gelu}", "model.layers.3", "layer.yaml");
  REQUIRE_THROWS_WITH(make_add(bad), Catch::Contains("activation") && Catch::Contains("gelu"));
}

TEST_CASE("add rejects inputs of different shapes and fewer than two inputs", "[layers][add]") {
  Add add;
  REQUIRE_THROWS_WITH(add.setup_inputs({{3, 4, 4}, {6, 2, 2}}),
                      Catch::Contains("input 1 is [3, 4, 4] and input 2 is [6, 2, 2]"));
  REQUIRE_THROWS_WITH(add.setup_inputs({{3}}), Catch::Contains("two or more inputs, got 1"));
  REQUIRE(add.num_inputs() == Layer::kAnyNumberOfInputs);
}

TEST_CASE("add_into sums in place", "[layers][add]") {
  Context ctx = Context::cpu(1, 1);
  Tensor d = random_tensor({7}, 1);
  const Tensor before = d.clone(), s = random_tensor({7}, 2);
  add_into(ctx, d, s);
  for (int i = 0; i < 7; ++i) REQUIRE(d.data<double>()[i] == before.data<double>()[i] + s.data<double>()[i]);
  Tensor wrong = random_tensor({6}, 3);
  REQUIRE_THROWS_WITH(add_into(ctx, d, wrong), Catch::Contains("differ"));
}

TEST_CASE("pad_channels gradients and values (option-A shortcut)", "[layers][gradcheck][pad_channels]") {
  Context ctx = Context::cpu(1, 1);
  for (auto [channels, stride, h] : {std::tuple{4, 1, 3}, std::tuple{8, 2, 4}, std::tuple{7, 2, 5}}) {
    PadChannels pad(channels, stride);
    const Shape out = pad.setup({3, h, h});
    const int64_t ho = (h + stride - 1) / stride;
    REQUIRE(out == Shape{channels, ho, ho});
    const Tensor x = random_tensor({2, 3, h, h}, 5);
    require_ok(check_layer_gradients(pad, ctx, x, out));
    // Values: the input's channels at offset (channels - 3) / 2, sampled every `stride`; zeros elsewhere.
    Tensor y = Tensor::empty(with_batch(2, out), DType::f64);
    pad.forward(ctx, x, y, false);
    const int64_t before = (channels - 3) / 2;
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t c = 0; c < channels; ++c)
        for (int64_t i = 0; i < ho; ++i)
          for (int64_t j = 0; j < ho; ++j) {
            const double got = y.data<double>()[((b * channels + c) * ho + i) * ho + j];
            const int64_t ci = c - before;
            const double want =
                ci < 0 || ci >= 3 ? 0.0 : x.data<double>()[((b * 3 + ci) * h + i * stride) * h + j * stride];
            REQUIRE(got == want);
          }
  }
  PadChannels narrow(2, 1);
  REQUIRE_THROWS_WITH(narrow.setup({3, 4, 4}), Catch::Contains("more than channels"));
}

TEST_CASE("batchnorm2d gradients in training mode, affine and not", "[layers][gradcheck][batchnorm]") {
  Context ctx = Context::cpu(1, 1);
  for (bool affine : {true, false}) {
    BatchNorm bn(2, 1e-5, 0.1, affine);
    Bound b = set_up(bn, {3, 2, 3}, 21);
    REQUIRE(bn.params().size() == (affine ? 2u : 0u));
    const Tensor x = random_tensor({4, 3, 2, 3}, 22, -2.0, 3.0);
    // The normalization divides by a batch statistic, which amplifies rounding: a looser rtol than
    // the default 1e-6 is still far below any real error.
    GradCheckOptions opt;
    opt.rtol = 1e-5;
    require_ok(check_layer_gradients(bn, ctx, x, b.out, opt));
  }
}

TEST_CASE("batchnorm2d with activation relu: gradients in training mode", "[layers][gradcheck][batchnorm]") {
  Context ctx = Context::cpu(1, 1);
  for (bool affine : {true, false}) {
    BatchNorm bn(2, 1e-5, 0.1, affine, /*relu=*/true);
    Bound b = set_up(bn, {3, 2, 3}, 23);
    const Tensor x = random_tensor({4, 3, 2, 3}, 24, -2.0, 3.0);
    GradCheckOptions opt;
    opt.rtol = 1e-5;
    require_ok(check_layer_gradients(bn, ctx, x, b.out, opt));
  }
}

TEMPLATE_TEST_CASE("batchnorm2d with activation relu writes the bits of batchnorm2d then relu", "[layers][batchnorm]",
                   float, double) {
  // Forward in training and evaluation, and backward with and without dx, against the two layers in
  // sequence; 3 lanes, so that the channels split over the pool as in training.
  using T = TestType;
  const DType dt = dtype_of<T>();
  const Shape shape{5, 6, 9, 7};
  const Tensor x = random_tensor(shape, 61, -2.0, 3.0, dt);
  const Tensor dy = random_tensor(shape, 62, -1.0, 1.0, dt);
  Context ctx = Context::cpu(1, 3);
  BatchNorm fused(2, 1e-5, 0.1, true, true), plain(2, 1e-5, 0.1, true, false);
  fused.setup({6, 9, 7});
  plain.setup({6, 9, 7});
  BoundParams pf = bind_random_params(fused, 63, dt), pp = bind_random_params(plain, 63, dt);
  Tensor bf = bind_initial_buffers(fused, dt), bp = bind_initial_buffers(plain, dt);
  Activation relu(ActivationKind::relu);
  relu.setup({6, 9, 7});
  auto same = [](const Tensor& a, const Tensor& b) {
    REQUIRE(a.numel() == b.numel());
    return std::memcmp(a.data<T>(), b.data<T>(), static_cast<size_t>(a.numel()) * sizeof(T)) == 0;
  };
  Tensor yf = Tensor::empty(shape, dt), z = Tensor::empty(shape, dt), yp = Tensor::empty(shape, dt);
  for (bool training : {true, false}) {
    INFO("training " << training);
    fused.forward(ctx, x, yf, training);
    plain.forward(ctx, x, z, training);
    relu.forward(ctx, z, yp, training);
    CHECK(same(yf, yp));
    CHECK(same(bf, bp));
  }
  fused.forward(ctx, x, yf, true);
  plain.forward(ctx, x, z, true);
  relu.forward(ctx, z, yp, true);
  Tensor dxf = Tensor::empty(shape, dt), dz = Tensor::empty(shape, dt), dxp = Tensor::empty(shape, dt);
  fused.backward(ctx, x, yf, dy, dxf);
  relu.backward(ctx, z, yp, dy, dz);
  plain.backward(ctx, x, z, dz, dxp);
  CHECK(same(dxf, dxp));
  CHECK(same(pf.grads, pp.grads));
  Tensor none;
  pf.grads.fill_(7.0);
  fused.backward(ctx, x, yf, dy, none);
  CHECK(same(pf.grads, pp.grads));
  int64_t zeros = 0;
  for (int64_t i = 0; i < yf.numel(); ++i) zeros += yf.data<T>()[i] == T(0);
  CHECK(zeros > yf.numel() / 4);  // the relu is not vacuous
}

TEST_CASE("batchnorm1d gradients for (C) and (C, L) inputs", "[layers][gradcheck][batchnorm]") {
  Context ctx = Context::cpu(1, 1);
  for (const Shape& input : {Shape{5}, Shape{3, 4}}) {
    BatchNorm bn(1, 1e-3, 0.2, true);
    Bound b = set_up(bn, input, 31);
    GradCheckOptions opt;
    opt.rtol = 1e-5;
    require_ok(check_layer_gradients(bn, ctx, random_tensor(with_batch(6, input), 32), b.out, opt));
  }
}

TEST_CASE("batchnorm2d statistics follow PyTorch's conventions", "[layers][batchnorm]") {
  Context ctx = Context::cpu(1, 1);
  BatchNorm bn(2, 1e-5, 0.1, true);
  Bound b = set_up(bn, {2, 2, 2}, 41);
  // weight = (2, 3), bias = (0.5, -1)
  bn.params()[0].data<double>()[0] = 2, bn.params()[0].data<double>()[1] = 3;
  bn.params()[1].data<double>()[0] = 0.5, bn.params()[1].data<double>()[1] = -1;
  const Tensor x = random_tensor({3, 2, 2, 2}, 42, -1.0, 4.0);
  Tensor y = Tensor::empty({3, 2, 2, 2}, DType::f64);
  bn.forward(ctx, x, y, /*training=*/true);
  for (int64_t c = 0; c < 2; ++c) {
    // Reference statistics over the 12 values of channel c.
    std::vector<double> v;
    for (int64_t s = 0; s < 3; ++s)
      for (int64_t p = 0; p < 4; ++p) v.push_back(x.data<double>()[(s * 2 + c) * 4 + p]);
    double mean = 0, var = 0;
    for (double e : v) mean += e / 12;
    for (double e : v) var += (e - mean) * (e - mean) / 12;
    const double w = c == 0 ? 2 : 3, bias = c == 0 ? 0.5 : -1;
    for (int64_t s = 0; s < 3; ++s)
      for (int64_t p = 0; p < 4; ++p) {
        const int64_t i = (s * 2 + c) * 4 + p;
        REQUIRE(y.data<double>()[i] ==
                Approx((x.data<double>()[i] - mean) / std::sqrt(var + 1e-5) * w + bias).epsilon(1e-12));
      }
    // running = 0.9 initial + 0.1 batch statistic; running_var uses the unbiased variance (n - 1 = 11).
    REQUIRE(bn.buffers()[0].data<double>()[c] == Approx(0.1 * mean).epsilon(1e-12));
    REQUIRE(bn.buffers()[1].data<double>()[c] == Approx(0.9 + 0.1 * var * 12 / 11).epsilon(1e-12));
  }
  REQUIRE(bn.buffer_specs()[0].name == "running_mean");
  REQUIRE(bn.buffer_specs()[1].name == "running_var");
}

TEST_CASE("batchnorm2d evaluation uses the running statistics", "[layers][batchnorm]") {
  Context ctx = Context::cpu(1, 1);
  BatchNorm bn(2, 1e-5, 0.1, true);
  Bound b = set_up(bn, {2, 1, 3}, 51);
  bn.buffers()[0].data<double>()[0] = 0.25, bn.buffers()[0].data<double>()[1] = -2;
  bn.buffers()[1].data<double>()[0] = 4, bn.buffers()[1].data<double>()[1] = 0.5;
  const Tensor running = b.buffers.clone();
  const Tensor x = random_tensor({2, 2, 1, 3}, 52);
  Tensor y = Tensor::empty({2, 2, 1, 3}, DType::f64);
  bn.forward(ctx, x, y, /*training=*/false);
  for (int64_t s = 0; s < 2; ++s)
    for (int64_t c = 0; c < 2; ++c)
      for (int64_t p = 0; p < 3; ++p) {
        const int64_t i = (s * 2 + c) * 3 + p;
        const double m = bn.buffers()[0].data<double>()[c], v = bn.buffers()[1].data<double>()[c];
        const double want = (x.data<double>()[i] - m) / std::sqrt(v + 1e-5) * bn.params()[0].data<double>()[c] +
                            bn.params()[1].data<double>()[c];
        REQUIRE(y.data<double>()[i] == Approx(want).epsilon(1e-12));
      }
  // Evaluation leaves the running statistics untouched; training would not (it needs > 1 value).
  for (int64_t i = 0; i < 4; ++i) REQUIRE(b.buffers.data<double>()[i] == running.data<double>()[i]);
  const Tensor one = random_tensor({1, 2, 1, 1}, 53);
  Tensor y1 = Tensor::empty({1, 2, 1, 1}, DType::f64);
  BatchNorm small(2, 1e-5, 0.1, true);
  Bound sb = set_up(small, {2, 1, 1}, 54);
  REQUIRE_THROWS_WITH(small.forward(ctx, one, y1, true), Catch::Contains("more than one value per channel"));
}

TEST_CASE("batch norm configuration keys", "[layers][batchnorm]") {
  ConfigNode ok = config_from_text("{eps: 0.001, momentum: 0.01, affine: false}", "model.layers.0", "layer.yaml");
  auto layer = make_batchnorm2d(ok);
  auto& bn = dynamic_cast<BatchNorm&>(*layer);
  REQUIRE(bn.eps() == 0.001);
  REQUIRE(bn.momentum() == 0.01);
  REQUIRE(std::string(bn.type()) == "batchnorm2d");
  ConfigNode bad_eps = config_from_text("{eps: 0}", "model.layers.0", "layer.yaml");
  REQUIRE_THROWS_WITH(make_batchnorm2d(bad_eps), Catch::Contains("eps must be > 0"));
  REQUIRE_FALSE(bn.fused_relu());
  ConfigNode fused = config_from_text("{activation: relu}", "model.layers.0", "layer.yaml");
  REQUIRE(dynamic_cast<BatchNorm&>(*make_batchnorm2d(fused)).fused_relu());
  ConfigNode bad_activation = config_from_text("{activation: tanh}", "model.layers.0", "layer.yaml");
  REQUIRE_THROWS_WITH(make_batchnorm2d(bad_activation), Catch::Contains("activation") && Catch::Contains("relu"));
  ConfigNode bad_key = config_from_text("{momentun: 0.1}", "model.layers.0", "layer.yaml");
  REQUIRE_THROWS_WITH(make_batchnorm1d(bad_key), Catch::Contains("momentun"));
  BatchNorm bn2(2, 1e-5, 0.1, true);
  REQUIRE_THROWS_WITH(bn2.setup({4}), Catch::Contains("(channels, height, width)"));
  ConfigNode pad = config_from_text("{stride: 2}", "model.layers.0", "layer.yaml");
  REQUIRE_THROWS_WITH(make_pad_channels(pad), Catch::Contains("channels is required"));
}

TEST_CASE("batchnorm2d, add and relu give the same bits on one CPU thread and on three", "[layers][batchnorm][add]") {
  // Large enough (6 channels of 8 x 64 x 64 values, 196k elements) that each layer splits its work
  // over the pool's lanes: channels for batch norm, element ranges for add and relu.
  const Shape shape{8, 6, 64, 64};
  const Tensor x = random_tensor(shape, 31, -2.0, 3.0, DType::f32);
  const Tensor other = random_tensor(shape, 32, -1.0, 1.0, DType::f32);
  const Tensor dy = random_tensor(shape, 33, -1.0, 1.0, DType::f32);
  auto bits = [](const Tensor& t) { return std::vector<float>(t.data<float>(), t.data<float>() + t.numel()); };
  auto run = [&](int threads) {
    Context ctx = Context::cpu(1, threads);
    BatchNorm bn(2, 1e-5, 0.1, true);
    bn.setup({6, 64, 64});
    BoundParams params = bind_random_params(bn, 34, DType::f32);
    Tensor buffers = bind_initial_buffers(bn, DType::f32);
    Tensor y = Tensor::empty(shape, DType::f32), dx = Tensor::empty(shape, DType::f32);
    bn.forward(ctx, x, y, true);
    bn.backward(ctx, x, y, dy, dx);
    Add add;
    add.setup_inputs({{6, 64, 64}, {6, 64, 64}});
    const Tensor ins[2] = {y, other};
    Tensor sum = Tensor::empty(shape, DType::f32);
    add.forward_inputs(ctx, ins, sum, true);
    Activation relu(ActivationKind::relu);
    relu.setup({6, 64, 64});
    Tensor r = Tensor::empty(shape, DType::f32), dr = Tensor::empty(shape, DType::f32);
    relu.forward(ctx, sum, r, true);
    relu.backward(ctx, sum, r, dy, dr);
    std::vector<float> all = bits(y);
    for (const Tensor* t : {&dx, &bn.grads()[0], &bn.grads()[1], &buffers, &sum, &r, &dr}) {
      const std::vector<float> more = bits(*t);
      all.insert(all.end(), more.begin(), more.end());
    }
    return all;
  };
  const std::vector<float> one = run(1), three = run(3);
  REQUIRE(one.size() == three.size());
  REQUIRE(one == three);
}
