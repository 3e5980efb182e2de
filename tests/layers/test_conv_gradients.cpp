// Float64 central-difference gradient checks of the image layers (conv2d, pooling, global average
// pooling, LRN, contrast normalization, locally connected) on the CPU path: dx and every parameter
// gradient, over shapes that exercise stride 2, padding, non-square kernels and inputs, overlapping
// 3x3 stride-2 pooling, ceil_mode and batches > 1 (tests/support/gradcheck.h).
#include <catch2/catch.hpp>

#include "layers/contrast_norm.h"
#include "layers/conv2d.h"
#include "layers/global_avgpool.h"
#include "layers/locally_connected2d.h"
#include "layers/lrn.h"
#include "layers/pool2d.h"
#include "tests/support/gradcheck.h"

using namespace qtrain;
using namespace qtrain::testing;

namespace {

Shape with_batch(int64_t batch, const Shape& s) {
  Shape out{batch};
  out.insert(out.end(), s.begin(), s.end());
  return out;
}

GradCheckResult check(Layer& layer, const Shape& input, int64_t batch, uint64_t seed, GradCheckOptions opt = {},
                      int threads = 1) {
  Context ctx = Context::cpu(7, threads);
  const Shape out = layer.setup(input);
  BoundParams bound = bind_random_params(layer, seed);
  const Tensor x = random_tensor(with_batch(batch, input), seed + 1, -2.0, 2.0);
  return check_layer_gradients(layer, ctx, x, out, opt);
}

// Distinct values spaced 4/n apart in a scrambled order: every pooling window has a unique maximum
// with a margin far above the finite-difference step, so max pooling is differentiable at x.
Tensor distinct_values(const Shape& shape) {
  Tensor t = Tensor::empty(shape, DType::f64);
  const int64_t n = t.numel();
  int64_t stride = 7919;  // a prime; n is never a multiple of it here
  REQUIRE(n % stride != 0);
  for (int64_t i = 0; i < n; ++i) t.data<double>()[i] = -2.0 + 4.0 * static_cast<double>((i * stride) % n) / n;
  return t;
}

GradCheckResult check_pool(Pool2d& layer, const Shape& input, int64_t batch) {
  Context ctx = Context::cpu(7, 1);
  const Shape out = layer.setup(input);
  return check_layer_gradients(layer, ctx, distinct_values(with_batch(batch, input)), out);
}

void require_ok(const GradCheckResult& r) {
  INFO(r.failures);
  INFO("checked " << r.checked << ", skipped " << r.skipped << ", max error " << r.max_error);
  REQUIRE(r.ok());
}

Window2d window(int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw) {
  return {kh, kw, sh, sw, ph, pw};
}

}  // namespace

TEST_CASE("conv2d gradients", "[layers][gradcheck][conv2d]") {
  // One thread, and three: the batch split over three lanes (unevenly for batch 2, 4 and 5, whose
  // weight gradient is then a sum of per-lane partials). The 3x3 stride-1 cases run the Winograd path.
  const int threads = GENERATE(1, 3);
  INFO("threads " << threads);
  SECTION("3x3, padding 1, bias, batch 2") {
    Conv2d layer(4, window(3, 3, 1, 1, 1, 1), true);
    const GradCheckResult r = check(layer, {3, 5, 6}, 2, 31, {}, threads);
    require_ok(r);
    REQUIRE(r.checked == 2 * 3 * 5 * 6 + 4 * 3 * 9 + 4);
  }
  SECTION("3x3, padding 1, batch 5 (same-width im2col rows of 4x4 planes)") {
    Conv2d layer(3, window(3, 3, 1, 1, 1, 1), false);
    require_ok(check(layer, {2, 4, 4}, 5, 38, {}, threads));
  }
  SECTION(
      "3x3 stride 1 (Winograd): channel counts, odd and even maps, paddings 0..2, batches the lanes do not divide") {
    Conv2d a(3, window(3, 3, 1, 1, 1, 1), true);  // 7x6: partial tiles along the rows
    require_ok(check(a, {5, 7, 6}, 4, 51, {}, threads));
    Conv2d b(9, window(3, 3, 1, 1, 0, 0), false);  // 5x5 unpadded: a 3x3 output, dx padded by 2
    require_ok(check(b, {2, 5, 5}, 5, 52, {}, threads));
    Conv2d c(2, window(3, 3, 1, 1, 2, 1), true);  // padding 2x1: dx padded by 0x1
    require_ok(check(c, {3, 4, 7}, 2, 53, {}, threads));
    Conv2d d(1, window(3, 3, 1, 1, 1, 1), true);  // one channel each way, a 1x1 map
    require_ok(check(d, {1, 1, 1}, 4, 54, {}, threads));
    Conv2d e(3, window(3, 3, 1, 1, 1, 1), true);  // 9x10: F(4x4, 3x3) forward and dx, partial 4x4 tiles
    require_ok(check(e, {2, 9, 10}, 3, 55, {}, threads));
    Conv2d f(2, window(3, 3, 1, 1, 2, 0), false);  // F(4x4, 3x3) forced on a small map: dx padded by 0x2
    f.set_cpu_algorithm(Conv2dCpuAlgorithm::winograd4);
    require_ok(check(f, {3, 5, 7}, 2, 56, {}, threads));
  }
  SECTION("5x3 kernel, stride 2x1, padding 2x0, non-square input, no bias") {
    Conv2d layer(3, window(5, 3, 2, 1, 2, 0), false);
    require_ok(check(layer, {2, 7, 5}, 3, 32, {}, threads));
  }
  SECTION("stride 1 (dx as the flipped convolution): 5x3 kernel, padding [2, 0], and 2x2 with padding 1") {
    Conv2d a(3, window(5, 3, 1, 1, 2, 0), true);
    require_ok(check(a, {2, 6, 5}, 2, 36, {}, threads));
    Conv2d b(2, window(2, 2, 1, 1, 1, 1), false);
    require_ok(check(b, {3, 4, 3}, 2, 37, {}, threads));
  }
  SECTION("stride 1, 5x5 kernel, padding 2 on a 3x3 input (rows shifted past the plane)") {
    Conv2d layer(2, window(5, 5, 1, 1, 2, 2), true);
    require_ok(check(layer, {2, 3, 3}, 3, 39, {}, threads));
  }
  SECTION("stride 2 with an input the stride does not divide") {
    Conv2d layer(2, window(3, 3, 2, 2, 0, 0), true);
    require_ok(check(layer, {2, 8, 9}, 2, 33, {}, threads));
  }
  SECTION("1x1 (the direct GEMM path)") {
    Conv2d layer(5, window(1, 1, 1, 1, 0, 0), true);
    require_ok(check(layer, {3, 4, 3}, 3, 34, {}, threads));
  }
  SECTION("1x1 with stride 2 (im2col path)") {
    Conv2d layer(2, window(1, 1, 2, 2, 0, 0), true);
    require_ok(check(layer, {3, 5, 5}, 2, 35, {}, threads));
  }
}

TEST_CASE("maxpool2d gradients route to the window's maximum", "[layers][gradcheck][pool]") {
  SECTION("overlapping 3x3 stride 2") {
    Pool2d layer(PoolKind::max, {window(3, 3, 2, 2, 0, 0)});
    require_ok(check_pool(layer, {2, 7, 9}, 2));
  }
  SECTION("3x3 stride 2 padding 1, ceil_mode") {
    Pool2d layer(PoolKind::max, {window(3, 3, 2, 2, 1, 1), true});
    require_ok(check_pool(layer, {3, 8, 6}, 2));
  }
  SECTION("2x2 non-overlapping, non-square") {
    Pool2d layer(PoolKind::max, {window(2, 3, 2, 3, 0, 0)});
    require_ok(check_pool(layer, {2, 6, 9}, 3));
  }
}

TEST_CASE("avgpool2d gradients", "[layers][gradcheck][pool]") {
  SECTION("overlapping 3x3 stride 2 padding 1, count_include_pad") {
    Pool2d layer(PoolKind::avg, {window(3, 3, 2, 2, 1, 1)});
    require_ok(check(layer, {2, 7, 8}, 2, 41));
  }
  SECTION("ceil_mode, count_include_pad false") {
    Pool2d layer(PoolKind::avg, {window(3, 2, 2, 2, 1, 1), true, false});
    require_ok(check(layer, {2, 6, 7}, 2, 42));
  }
  SECTION("ceil_mode, count_include_pad true") {
    Pool2d layer(PoolKind::avg, {window(3, 3, 2, 2, 0, 0), true, true});
    require_ok(check(layer, {1, 6, 6}, 3, 43));
  }
}

TEST_CASE("global_avgpool gradients", "[layers][gradcheck]") {
  GlobalAvgPool layer;
  const GradCheckResult r = check(layer, {3, 4, 5}, 2, 44);
  require_ok(r);
  REQUIRE(r.checked == 2 * 3 * 4 * 5);
}

TEST_CASE("lrn gradients", "[layers][gradcheck][lrn]") {
  for (int64_t size : {1, 3, 4, 5}) {
    INFO("size " << size);
    Lrn layer({size, 0.3, 0.75, 1.5});
    require_ok(check(layer, {6, 3, 2}, 2, 45));
  }
  SECTION("window wider than the channels") {
    Lrn layer({7, 0.5, 0.6, 2.0});
    require_ok(check(layer, {3, 2, 2}, 2, 46));
  }
}

TEST_CASE("contrast_norm gradients, including the path through the local means", "[layers][gradcheck][cnorm]") {
  for (int64_t size : {1, 2, 3, 4, 5}) {
    INFO("size " << size);
    ContrastNorm layer({size, 0.8, 0.75, 1.0});
    require_ok(check(layer, {2, 6, 5}, 2, 47));
  }
  SECTION("window larger than the plane") {
    ContrastNorm layer({9, 2.0, 0.5, 1.5});
    require_ok(check(layer, {2, 4, 3}, 2, 48));
  }
}

TEST_CASE("locally_connected2d gradients", "[layers][gradcheck][local]") {
  SECTION("3x3, padding 1, bias, batch 3") {
    LocallyConnected2d layer(3, window(3, 3, 1, 1, 1, 1), true);
    const GradCheckResult r = check(layer, {2, 4, 5}, 3, 51);
    require_ok(r);
    REQUIRE(r.checked == 3 * 2 * 4 * 5 + 4 * 5 * 3 * 18 + 3 * 4 * 5);
  }
  SECTION("3x2 kernel, stride 2, no bias") {
    LocallyConnected2d layer(2, window(3, 2, 2, 2, 0, 1), false);
    require_ok(check(layer, {3, 7, 6}, 2, 52));
  }
}
