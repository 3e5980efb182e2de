// dropout: the kept fraction and the scaling, evaluation as the identity, the mask as a pure function
// of (seed, step, layer index) shared by forward and backward, and the documented Philox mapping
// that the CUDA kernel reproduces (its bit-for-bit check is in test_layers_cuda.cpp).
#include <catch2/catch.hpp>

#include <cmath>

#include "layers/dropout.h"
#include "tests/support/gradcheck.h"

using namespace qtrain;
using namespace qtrain::testing;

namespace {

// y of dropout on a tensor of ones: the mask times 1/(1-p).
Tensor forward_ones(Dropout& layer, Context& ctx, int64_t batch, int64_t features, DType dtype = DType::f32) {
  Tensor x = Tensor::empty({batch, features}, dtype);
  x.fill_(1.0);
  Tensor y = Tensor::empty({batch, features}, dtype);
  layer.forward(ctx, x, y, true);
  return y;
}

}  // namespace

TEST_CASE("dropout keeps 1-p of the elements, scaled by 1/(1-p)", "[layers][dropout]") {
  Context ctx = Context::cpu(42, 1);
  for (double p : {0.1, 0.3, 0.5, 0.9}) {
    Dropout layer(p);
    layer.setup({1000});
    const int64_t n = 200 * 1000;
    const Tensor y = forward_ones(layer, ctx, 200, 1000);
    const float scale = static_cast<float>(1.0 / (1.0 - p));
    int64_t kept = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float v = y.data<float>()[i];
      REQUIRE((v == 0.0f || v == scale));
      kept += v != 0.0f;
    }
    // Binomial(n, 1-p): the kept count is within 5 standard deviations of its mean, except with
    // probability ~6e-7.
    const double mean = n * (1 - p), sigma = std::sqrt(n * p * (1 - p));
    INFO("p = " << p << ": kept " << kept << ", expected " << mean << " +- " << 5 * sigma);
    REQUIRE(std::fabs(static_cast<double>(kept) - mean) <= 5 * sigma);
  }
}

TEST_CASE("dropout with p = 0 keeps everything", "[layers][dropout]") {
  Context ctx = Context::cpu(42, 1);
  Dropout layer(0.0);
  layer.setup({333});
  const Tensor y = forward_ones(layer, ctx, 3, 333);
  for (int64_t i = 0; i < y.numel(); ++i) REQUIRE(y.data<float>()[i] == 1.0f);
}

TEST_CASE("dropout is the identity in evaluation", "[layers][dropout]") {
  Context ctx = Context::cpu(42, 1);
  Dropout layer(0.5);
  layer.setup({4, 5});
  const Tensor x = random_tensor({3, 4, 5}, 9);
  Tensor y = Tensor::empty({3, 4, 5}, DType::f64);
  layer.forward(ctx, x, y, false);
  for (int64_t i = 0; i < x.numel(); ++i) REQUIRE(y.data<double>()[i] == x.data<double>()[i]);
}

TEST_CASE("dropout masks are a function of seed, step and layer index", "[layers][dropout]") {
  Context ctx = Context::cpu(42, 1);
  Dropout a(0.5), b(0.5);
  a.setup({257});
  b.setup({257});
  a.set_identity("a", 1);
  b.set_identity("b", 1);
  auto same = [](const Tensor& u, const Tensor& v) {
    for (int64_t i = 0; i < u.numel(); ++i)
      if (u.data<float>()[i] != v.data<float>()[i]) return false;
    return true;
  };
  ctx.set_step(5);
  const Tensor y1 = forward_ones(a, ctx, 4, 257);
  const Tensor y2 = forward_ones(a, ctx, 4, 257);
  const Tensor y3 = forward_ones(b, ctx, 4, 257);  // another layer object at the same index
  REQUIRE(same(y1, y2));
  REQUIRE(same(y1, y3));
  ctx.set_step(6);
  REQUIRE_FALSE(same(y1, forward_ones(a, ctx, 4, 257)));
  ctx.set_step(5);
  b.set_identity("b", 2);
  REQUIRE_FALSE(same(y1, forward_ones(b, ctx, 4, 257)));
  Context other_seed = Context::cpu(43, 1);
  other_seed.set_step(5);
  REQUIRE_FALSE(same(y1, forward_ones(a, other_seed, 4, 257)));
}

TEST_CASE("dropout backward reuses the forward mask at the same step", "[layers][dropout]") {
  Context ctx = Context::cpu(42, 1);
  ctx.set_step(11);
  Dropout layer(0.4);
  layer.set_identity("drop", 3);
  layer.setup({101});
  const Tensor x = random_tensor({7, 101}, 21, 0.5, 1.5);  // nonzero, so y == 0 means dropped
  Tensor y = Tensor::empty({7, 101}, DType::f64);
  layer.forward(ctx, x, y, true);
  const Tensor dy = random_tensor({7, 101}, 22, 0.5, 1.5);
  Tensor dx = Tensor::empty({7, 101}, DType::f64);
  layer.backward(ctx, x, y, dy, dx);
  const double scale = 1.0 / (1.0 - 0.4);
  for (int64_t i = 0; i < x.numel(); ++i) {
    const bool kept = y.data<double>()[i] != 0.0;
    REQUIRE(dx.data<double>()[i] == (kept ? dy.data<double>()[i] * scale : 0.0));
  }
}

TEST_CASE("dropout's mask follows the documented Philox mapping", "[layers][dropout]") {
  // Element i uses word i % 4 of philox_subsequence_block(key, i / 4); kept iff the uniform > float(p).
  // The CUDA kernel relies on this mapping, so it is pinned here independently of the implementation
  // (which computes several blocks at once and compares words against an integer threshold). Sizes
  // straddle the CPU path's blocking; p values include ones not representable in float.
  Context ctx = Context::cpu(1234, 1);
  ctx.set_step(77);
  for (double p : {0.0, 0.3, 0.5, 0.7, 0.999}) {
    for (int64_t features : {1, 3, 63, 64, 65, 150, 1000}) {
      INFO("p " << p << ", features " << features);
      Dropout layer(p);
      layer.set_identity("d", 4);
      layer.setup({features});
      const Tensor y = forward_ones(layer, ctx, 3, features, DType::f64);
      const PhiloxKey key = derive_philox_key(1234, 77, 4, 0xD80Du);
      const PhiloxKey from_layer = layer.mask_key(ctx);
      REQUIRE((key.k0 == from_layer.k0 && key.k1 == from_layer.k1));
      int64_t mismatches = 0;
      for (int64_t i = 0; i < y.numel(); ++i) {
        const PhiloxBlock b = philox_subsequence_block(key, static_cast<uint64_t>(i / 4));
        const bool keep = uniform_from_bits(b.v[i % 4]) > static_cast<float>(p);
        mismatches += (y.data<double>()[i] != 0.0) != keep;
      }
      REQUIRE(mismatches == 0);
    }
  }
}
