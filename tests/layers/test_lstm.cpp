// lstm: float64 gradient checks against central differences (one layer; two bidirectional layers with
// unequal lengths), forward values against PyTorch 1.13's nn.LSTM on a packed batch, zero outputs and
// no gradient in the padding, parameter names/shapes/forget-gate init, and configuration errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>

#include "framework/core/context.h"
#include "layers/lstm.h"
#include "tests/support/gradcheck.h"
#include "tests/support/config_text.h"

using namespace qtrain;
using qtrain::testing::bind_random_params;
using qtrain::testing::BoundParams;
using qtrain::testing::check_layer_gradients;
using qtrain::testing::config_from_text;
using qtrain::testing::random_tensor;

namespace {

Tensor lengths_tensor(const std::vector<int32_t>& v) {
  Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::i32);
  std::copy(v.begin(), v.end(), t.data<int32_t>());
  return t;
}

}  // namespace

TEST_CASE("lstm: float64 gradient check", "[lstm][gradcheck]") {
  Context ctx = Context::cpu(1, 1);
  struct Case {
    int64_t layers;
    bool bidirectional;
    std::vector<int32_t> lengths;
  };
  for (const Case& c :
       {Case{1, false, {4, 4}}, Case{1, true, {4, 2, 3}}, Case{2, false, {3, 1}}, Case{2, true, {4, 2, 3}}}) {
    Lstm lstm({3, c.layers, c.bidirectional, 1.0});
    const int64_t batch = static_cast<int64_t>(c.lengths.size()), frames = 4, features = 2;
    const Shape out = lstm.setup({features});
    bind_random_params(lstm, 7, DType::f64, Device::cpu(), 0.6);
    lstm.set_sequence_lengths(lengths_tensor(c.lengths));
    const Tensor x = random_tensor({batch * frames, features}, 9);
    const auto r = check_layer_gradients(lstm, ctx, x, out);
    INFO("layers " << c.layers << " bidirectional " << c.bidirectional << "\n" << r.failures);
    CHECK(r.ok());
    CHECK(r.max_error < 1e-7);
  }
}

TEST_CASE("lstm: the directions side by side on two lanes give one lane's bits", "[lstm][threads]") {
  // A bidirectional LSTM on a context with 2 lanes runs its two directions' recurrences at once;
  // outputs, input gradients and every parameter gradient must equal the sequential run's (and the
  // float64 gradient check holds on 2 lanes too). Bit for bit in float64, where OpenBLAS's dgemm gives
  // the same bits on 1 and 2 threads; its sgemm does not (its small-matrix kernels depend on the thread
  // count, also without the lanes), so float32 is held to rounding.
  for (const DType dtype : {DType::f32, DType::f64}) {
    // Long enough (a few ms per direction) that the two lanes really overlap.
    const std::vector<int32_t> lengths{300, 120, 0, 299};
    const int64_t batch = 4, frames = 300, features = 5;
    struct Run {
      Tensor y, dx;
      BoundParams bound;
    };
    auto run = [&](int threads) {
      Context ctx = Context::cpu(1, threads);
      Lstm lstm({6, 2, true, 1.0});
      lstm.setup({features});
      Run r{Tensor(), Tensor(), bind_random_params(lstm, 11, dtype, Device::cpu(), 0.5)};
      lstm.set_sequence_lengths(lengths_tensor(lengths));
      const Tensor x = random_tensor({batch * frames, features}, 12, -1.0, 1.0, dtype);
      r.y = Tensor::empty({batch * frames, 12}, dtype);
      lstm.forward(ctx, x, r.y, true);
      const Tensor dy = random_tensor({batch * frames, 12}, 13, -1.0, 1.0, dtype);
      r.dx = Tensor::empty({batch * frames, features}, dtype);
      lstm.backward(ctx, x, r.y, dy, r.dx);
      return r;
    };
    const Run one = run(1), two = run(2);
    INFO(dtype_name(dtype));
    if (dtype == DType::f64) {
      CHECK(std::memcmp(one.y.raw(), two.y.raw(), one.y.nbytes()) == 0);
      CHECK(std::memcmp(one.dx.raw(), two.dx.raw(), one.dx.nbytes()) == 0);
      CHECK(std::memcmp(one.bound.grads.raw(), two.bound.grads.raw(), one.bound.grads.nbytes()) == 0);
    } else {
      for (const auto& [a, b] :
           {std::pair{&one.y, &two.y}, std::pair{&one.dx, &two.dx}, std::pair{&one.bound.grads, &two.bound.grads}}) {
        int64_t far = 0;
        for (int64_t i = 0; i < a->numel(); ++i) {
          const float x = a->data<float>()[i], y = b->data<float>()[i];
          far += std::abs(x - y) > 1e-4f * std::max(1.0f, std::abs(x));
        }
        CHECK(far == 0);
      }
    }
  }
  Context ctx = Context::cpu(1, 2);
  Lstm lstm({3, 2, true, 1.0});
  const Shape out = lstm.setup({2});
  bind_random_params(lstm, 7, DType::f64, Device::cpu(), 0.6);
  lstm.set_sequence_lengths(lengths_tensor({4, 2, 3}));
  const auto r = check_layer_gradients(lstm, ctx, random_tensor({12, 2}, 9), out);
  INFO(r.failures);
  CHECK(r.ok());
}

TEST_CASE("lstm: padding gives zero outputs and receives no gradient", "[lstm]") {
  Context ctx = Context::cpu(1, 1);
  Lstm lstm({3, 2, true, 1.0});
  lstm.setup({2});
  bind_random_params(lstm, 3, DType::f64);
  lstm.set_sequence_lengths(lengths_tensor({5, 2}));
  Tensor x = random_tensor({10, 2}, 4);
  Tensor y = Tensor::empty({10, 6}, DType::f64);
  lstm.forward(ctx, x, y, true);
  for (int64_t t = 2; t < 5; ++t)
    for (int64_t j = 0; j < 6; ++j) CHECK(y.data<double>()[(5 + t) * 6 + j] == 0.0);
  // Changing the padded input frames changes nothing (the reverse direction starts at frame 1).
  Tensor x2 = x.clone();
  for (int64_t i = 7 * 2; i < 10 * 2; ++i) x2.data<double>()[i] = 42.0;
  Tensor y2 = Tensor::empty({10, 6}, DType::f64);
  lstm.forward(ctx, x2, y2, true);
  for (int64_t i = 0; i < 60; ++i) CHECK(y2.data<double>()[i] == y.data<double>()[i]);
  Tensor dy = random_tensor({10, 6}, 5), dx = Tensor::empty({10, 2}, DType::f64);
  lstm.backward(ctx, x, y, dy, dx);
  for (int64_t i = 7 * 2; i < 10 * 2; ++i) CHECK(dx.data<double>()[i] == 0.0);
}

// Reference: PyTorch 1.13's nn.LSTM(3, 2, num_layers=2, bidirectional=True) in float64 on a packed batch
// of lengths [4, 3], with the parameters and inputs set below (every parameter, in named_parameters()
// order, 0.5 sin(0.37 k + 0.11)). `/usr/bin/python3 tools/reference/lstm.py` prints `expected`.
TEST_CASE("lstm: matches PyTorch nn.LSTM (2 layers, bidirectional, packed)", "[lstm][pytorch]") {
  const double expected[] = {-0.031296695871,
                             0.027399520845,
                             -0.089522450729,
                             -0.036076476415,
                             -0.025010010239,
                             0.053292765224,
                             -0.098025189826,
                             -0.012902336979,
                             -0.005381982139,
                             0.066978295982,
                             -0.083075272181,
                             -0.000148367428,
                             0.009903489371,
                             0.065632837187,
                             -0.050090811553,
                             0.000945772960,
                             -0.009700684845,
                             0.021602518175,
                             -0.068282280095,
                             -0.011082255816,
                             0.007076332375,
                             0.035902609615,
                             -0.059315786207,
                             0.005153368299,
                             0.016278824206,
                             0.034937068890,
                             -0.034161512435,
                             0.002534000568,
                             0,
                             0,
                             0,
                             0};
  Context ctx = Context::cpu(1, 1);
  for (DType dtype : {DType::f64, DType::f32}) {
    Lstm lstm({2, 2, true, 1.0});
    lstm.setup({3});
    const auto specs = lstm.param_specs();
    REQUIRE(specs.size() == 16);
    CHECK(specs[0].name == "weight_ih_l0");
    CHECK(specs[4].name == "weight_ih_l0_reverse");
    CHECK(specs[8].shape == Shape{8, 4});  // layer 1 reads both directions
    CHECK(specs[15].name == "bias_hh_l1_reverse");
    auto bound = bind_random_params(lstm, 1, dtype);
    int64_t k = 0;
    for (Tensor& p : lstm.params())
      for (int64_t i = 0; i < p.numel(); ++i, ++k) {
        const double v = 0.5 * std::sin(0.37 * static_cast<double>(k) + 0.11);
        if (dtype == DType::f64)
          p.data<double>()[i] = v;
        else
          p.data<float>()[i] = static_cast<float>(v);
      }
    REQUIRE(k == 240);
    lstm.set_sequence_lengths(lengths_tensor({4, 3}));
    Tensor x = Tensor::empty({8, 3}, dtype), y = Tensor::empty({8, 4}, dtype);
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t t = 0; t < 4; ++t)
        for (int64_t f = 0; f < 3; ++f) {
          const double v = std::cos(0.5 * b + 0.3 * t + 0.7 * f);
          if (dtype == DType::f64)
            x.data<double>()[(b * 4 + t) * 3 + f] = v;
          else
            x.data<float>()[(b * 4 + t) * 3 + f] = static_cast<float>(v);
        }
    lstm.forward(ctx, x, y, false);
    for (int i = 0; i < 32; ++i) {
      const double got = dtype == DType::f64 ? y.data<double>()[i] : y.data<float>()[i];
      CHECK(got == Approx(expected[i]).margin(dtype == DType::f64 ? 1e-11 : 1e-6));
    }
  }
}

TEST_CASE("lstm: forget-gate bias initialization and configuration", "[lstm][config]") {
  Lstm lstm({4, 1, false, 1.0});
  lstm.setup({5});
  const auto specs = lstm.param_specs();
  REQUIRE(specs.size() == 4);
  CHECK(specs[2].name == "bias_ih_l0");
  CHECK(specs[2].fill_begin == 4);
  CHECK(specs[2].fill_end == 8);
  CHECK(specs[2].fill_value == 1.0);
  CHECK(specs[3].fill_value == 0.0);
  CHECK(specs[0].fan_in == 4);  // U(+-1/sqrt(hidden)) as PyTorch

  ConfigNode good = config_from_text("hidden_size: 8\nnum_layers: 3\nbidirectional: true\nforget_bias: 0.5\n");
  auto layer = make_lstm(good);
  const auto& o = static_cast<Lstm&>(*layer).options();
  CHECK(o.hidden_size == 8);
  CHECK(o.num_layers == 3);
  CHECK(o.bidirectional);
  CHECK(o.forget_bias == 0.5);
  ConfigNode missing = config_from_text("{}");
  CHECK_THROWS_WITH(make_lstm(missing), Catch::Contains("hidden_size"));
  ConfigNode typo = config_from_text("hidden_size: 4\nnum_layer: 2\n");
  CHECK_THROWS_WITH(make_lstm(typo), Catch::Contains("num_layer"));

  // Without sequence lengths the layer refuses to guess the time axis.
  Context ctx = Context::cpu(1, 1);
  Lstm plain({2, 1, false, 1.0});
  plain.setup({3});
  bind_random_params(plain, 1, DType::f64);
  Tensor x = Tensor::zeros({4, 3}, DType::f64), y = Tensor::empty({4, 2}, DType::f64);
  CHECK_THROWS_WITH(plain.forward(ctx, x, y, true), Catch::Contains("sequence"));
}
