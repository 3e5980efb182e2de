// clip_grad_norm: scaling to the global norm (PyTorch's clip_grad_norm_ semantics, max_norm / (norm +
// 1e-6)), no change under the threshold, and the optimizer.clip_norm config key.
#include <catch2/catch.hpp>

#include <cmath>

#include "framework/core/context.h"
#include "optim/clip.h"
#include "optim/optimizer.h"
#include "tests/support/config_text.h"

using namespace qtrain;
using qtrain::testing::config_from_text;

TEMPLATE_TEST_CASE("clip_grad_norm scales to the global norm", "[optim][clip]", float, double) {
  constexpr DType dtype = std::is_same_v<TestType, float> ? DType::f32 : DType::f64;
  Context ctx = Context::cpu(1, 1);
  Tensor g = Tensor::empty({4}, dtype);
  const TestType values[] = {3, 0, -4, 0};  // norm 5
  std::copy(values, values + 4, g.data<TestType>());
  CHECK(clip_grad_norm(ctx, g, 10.0) == Approx(5.0));
  for (int i = 0; i < 4; ++i) CHECK(g.data<TestType>()[i] == values[i]);
  CHECK(clip_grad_norm(ctx, g, 1.0) == Approx(5.0));
  const double scale = 1.0 / (5.0 + 1e-6);
  CHECK(g.data<TestType>()[0] == Approx(3 * scale));
  CHECK(g.data<TestType>()[2] == Approx(-4 * scale));
  double norm = 0;
  for (int i = 0; i < 4; ++i) norm += std::pow(static_cast<double>(g.data<TestType>()[i]), 2);
  CHECK(std::sqrt(norm) == Approx(1.0).epsilon(1e-5));
  CHECK_THROWS(clip_grad_norm(ctx, g, 0.0));
}

TEST_CASE("clip_grad_norm sums the squares in the documented order (the CUDA path's too)", "[optim][clip]") {
  // Squares of 1e8 and of 1: summed one after the other, every 1 is lost against 1e16 (half an ulp,
  // rounded to even); in the lanes of optim/clip_order.h the ones gather first. The expected sums were
  // computed by a separate Python model of that order.
  Context ctx = Context::cpu(1, 1);
  auto norm_of = [&](int64_t n, auto big_at) {
    Tensor g = Tensor::empty({n}, DType::f32);
    for (int64_t i = 0; i < n; ++i) g.data<float>()[i] = big_at(i) ? 1e8f : 1.0f;
    return clip_grad_norm(ctx, g, 1e30);
  };
  // One chunk: lane 0 holds 1e16 (its second 1 is lost), lanes 1..255 hold 1 each.
  CHECK(norm_of(257, [](int64_t i) { return i == 0; }) == std::sqrt(10000000000000254.0));
  // Four chunks, 1e8 first in each, and a second level summing the chunk sums.
  CHECK(norm_of(3 * 4096 + 5, [](int64_t i) { return i % 4096 == 0; }) == std::sqrt(40000000000012240.0));
}

TEST_CASE("optimizer.clip_norm is read and validated", "[optim][clip][config]") {
  auto parse = [](const std::string& text) { return config_from_text(text, "optimizer"); };
  ConfigNode with = parse("type: adam\nlr: 0.001\nclip_norm: 400\n");
  CHECK(make_optimizer(with)->clip_norm() == 400.0);
  ConfigNode without = parse("type: sgd\nlr: 0.1\n");
  CHECK(make_optimizer(without)->clip_norm() == 0.0);
  ConfigNode negative = parse("type: sgd\nlr: 0.1\nclip_norm: -1\n");
  CHECK_THROWS_WITH(make_optimizer(negative), Catch::Contains("clip_norm"));
}
