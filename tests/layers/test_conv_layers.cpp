// Forward values, the backward contract and configuration of the image layers on the CPU path:
// forward outputs against PyTorch 1.13 reference values (printed by tools/reference/conv_layers.py and
// pasted here), conv2d against a direct 7-loop convolution across several im2col blocks, the
// locally connected layer against conv2d with shared weights, max pooling's tie rule, and the
// configuration and shape errors a user sees.
//
// Reference values: `/usr/bin/python3 tools/reference/conv_layers.py` (Debian's python3-torch, PyTorch
// 1.13, float64, on the inputs built by seq() below) prints every block below, in order, as pasted:
// conv2d, max pooling, the two average poolings, lrn sizes 3 and 4, contrast_norm sizes 3 and 2.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "layers/contrast_norm.h"
#include "layers/conv2d.h"
#include "layers/global_avgpool.h"
#include "layers/locally_connected2d.h"
#include "layers/lrn.h"
#include "layers/pool2d.h"
#include "layers/registry.h"
#include "tests/support/gradcheck.h"
#include "tests/support/layer_from_yaml.h"

using namespace qtrain;
using namespace qtrain::testing;

namespace {

template <typename T>
Tensor seq(const Shape& shape, double (*f)(int64_t)) {
  Tensor t = Tensor::empty(shape, dtype_of<T>());
  for (int64_t i = 0; i < t.numel(); ++i) t.data<T>()[i] = static_cast<T>(f(i));
  return t;
}
double sin_input(int64_t i) { return 1.5 * std::sin(0.37 * static_cast<double>(i) + 0.1); }

template <typename T>
void require_values(const Tensor& got, const std::vector<double>& want, double rtol) {
  REQUIRE(got.numel() == static_cast<int64_t>(want.size()));
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("element " << i << ": got " << got.data<T>()[i] << ", want " << want[i]);
    REQUIRE(std::fabs(got.data<T>()[i] - want[i]) <= rtol * std::max(1.0, std::fabs(want[i])));
  }
}

// The reference values are printed with 10 significant digits.
template <typename T>
double tolerance() {
  return std::is_same_v<T, float> ? 2e-6 : 2e-9;
}

// Binds `values` (one arena) to a layer's parameters in param_specs() order.
struct Arena {
  Tensor params, grads;
};
Arena bind(Layer& layer, const Tensor& values) {
  Arena a{values, Tensor::zeros(values.shape(), values.dtype())};
  std::vector<Tensor> p, g;
  int64_t offset = 0;
  for (const ParamSpec& s : layer.param_specs()) {
    p.push_back(a.params.view(offset, s.shape));
    g.push_back(a.grads.view(offset, s.shape));
    offset += shape_numel(s.shape);
  }
  REQUIRE(offset == values.numel());
  layer.bind(std::move(p), std::move(g));
  return a;
}

}  // namespace

TEMPLATE_TEST_CASE("conv2d matches PyTorch's F.conv2d", "[layers][conv2d]", float, double) {
  using T = TestType;
  Context ctx = Context::cpu(1, 1);
  Conv2d layer(2, {3, 2, 2, 1, 1, 1}, true);
  REQUIRE(layer.setup({2, 4, 3}) == Shape{2, 2, 4});
  Tensor values = Tensor::empty({26}, dtype_of<T>());
  for (int i = 0; i < 24; ++i) values.data<T>()[i] = static_cast<T>(0.5 * std::cos(0.23 * i));
  values.data<T>()[24] = static_cast<T>(-0.1);
  values.data<T>()[25] = static_cast<T>(0.0);
  Arena arena = bind(layer, values);
  const Tensor x = seq<T>({2, 2, 4, 3}, sin_input);
  Tensor y = Tensor::empty({2, 2, 2, 4}, dtype_of<T>());
  layer.forward(ctx, x, y, true);
  require_values<T>(
      y, {0.9614542133,  1.9645289,      1.936902472,   0.937434884,  0.158280329,  0.254204666,   -0.3077040841,
          -0.2731768864, -0.9049050446,  -1.801104077,  -2.03011074,  -1.056756481, -0.4646949445, -0.7708078832,
          -0.2804361628, -0.09238466474, -0.8781027184, -1.705043447, -2.079177662, -1.155027135,  -0.7161577277,
          -1.173846638,  -0.7074862561,  -0.3493134323, 0.4700352326, 1.037519769,  1.604931568,   0.8768922077,
          0.7138536444,  1.287221558,    0.9697857319,  0.4557091348},
      tolerance<T>());
}

TEST_CASE("conv2d agrees with a direct convolution across several im2col blocks", "[layers][conv2d]") {
  // 16 channels of 32x32 with a 3x3 kernel: 147k column entries per sample, so the 9 samples span two
  // blocks of the CPU path; stride 2 and padding 1 exercise the strided copy.
  Context ctx = Context::cpu(1, 2);
  const int64_t batch = 9, c = 16, h = 32, w = 32, oc = 8;
  for (const Window2d win : {Window2d{3, 3, 1, 1, 1, 1}, Window2d{3, 3, 2, 2, 1, 1}}) {
    Conv2d layer(oc, win, true);
    const Shape out = layer.setup({c, h, w});
    BoundParams params = bind_random_params(layer, 5);
    const Tensor x = random_tensor({batch, c, h, w}, 6);
    Tensor y = Tensor::empty({batch, out[0], out[1], out[2]}, DType::f64);
    layer.forward(ctx, x, y, true);
    const double* xs = x.data<double>();
    const double* wt = layer.params()[0].data<double>();
    const double* bs = layer.params()[1].data<double>();
    double worst = 0;
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t o = 0; o < oc; ++o)
        for (int64_t oy = 0; oy < out[1]; ++oy)
          for (int64_t ox = 0; ox < out[2]; ++ox) {
            double s = bs[o];
            for (int64_t ci = 0; ci < c; ++ci)
              for (int64_t i = 0; i < 3; ++i)
                for (int64_t j = 0; j < 3; ++j) {
                  const int64_t iy = oy * win.sh - win.ph + i, ix = ox * win.sw - win.pw + j;
                  if (iy >= 0 && iy < h && ix >= 0 && ix < w)
                    s += wt[((o * c + ci) * 3 + i) * 3 + j] * xs[((b * c + ci) * h + iy) * w + ix];
                }
            const double got = y.data<double>()[((b * oc + o) * out[1] + oy) * out[2] + ox];
            worst = std::max(worst, std::fabs(got - s));
          }
    REQUIRE(worst < 1e-12);
  }
}

TEST_CASE("conv2d split over CPU threads: the results of one thread, bit for bit on a repeat", "[layers][conv2d]") {
  // f32 as in training: 13 samples of 16 channels 8x8 over 2 lanes (7 + 6 samples), forward and
  // backward, stride 1 (dx as a convolution) and stride 2 (col2im).
  for (const Window2d win : {Window2d{3, 3, 1, 1, 1, 1}, Window2d{3, 3, 2, 2, 1, 1}}) {
    const int64_t batch = 13;
    Conv2d layer(16, win, false);
    const Shape out = layer.setup({16, 8, 8});
    BoundParams params = bind_random_params(layer, 21, DType::f32);
    const Tensor x = random_tensor({batch, 16, 8, 8}, 22, -1.0, 1.0, DType::f32);
    const Tensor dy = random_tensor({batch, out[0], out[1], out[2]}, 23, -1.0, 1.0, DType::f32);
    struct Run {
      std::vector<float> y, dx, dw;
    };
    auto run = [&](int threads) {
      Context ctx = Context::cpu(1, threads);
      Tensor y = Tensor::empty(dy.shape(), DType::f32), dx = Tensor::empty(x.shape(), DType::f32);
      layer.forward(ctx, x, y, true);
      layer.backward(ctx, x, y, dy, dx);
      const float* dw = layer.grads()[0].data<float>();
      return Run{std::vector<float>(y.data<float>(), y.data<float>() + y.numel()),
                 std::vector<float>(dx.data<float>(), dx.data<float>() + dx.numel()),
                 std::vector<float>(dw, dw + layer.grads()[0].numel())};
    };
    const Run one = run(1), two = run(2), again = run(2);
    CHECK(two.y == again.y);
    CHECK(two.dx == again.dx);
    CHECK(two.dw == again.dw);
    auto close = [](const std::vector<float>& a, const std::vector<float>& b) {
      double worst = 0, scale = 0;
      for (size_t i = 0; i < a.size(); ++i) {
        worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]));
        scale = std::max(scale, std::fabs(static_cast<double>(a[i])));
      }
      return worst <= 1e-5 * std::max(scale, 1.0);
    };
    CHECK(close(one.y, two.y));
    CHECK(close(one.dx, two.dx));
    CHECK(close(one.dw, two.dw));
  }
}

TEST_CASE("locally_connected2d with every position's weights equal is conv2d", "[layers][local]") {
  Context ctx = Context::cpu(1, 1);
  const Window2d win{3, 2, 2, 1, 1, 0};
  const Shape input{3, 7, 6};
  Conv2d conv(4, win, true);
  LocallyConnected2d local(4, win, true);
  const Shape out = conv.setup(input);
  REQUIRE(local.setup(input) == out);
  BoundParams cp = bind_random_params(conv, 8);
  const int64_t positions = out[1] * out[2], k = 3 * 3 * 2;
  // local weight (P, OC, K) = conv weight (OC, K) at every p; bias (OC, P) = conv bias per channel.
  Tensor values = Tensor::empty({positions * 4 * k + 4 * positions}, DType::f64);
  for (int64_t p = 0; p < positions; ++p)
    for (int64_t i = 0; i < 4 * k; ++i) values.data<double>()[p * 4 * k + i] = conv.params()[0].data<double>()[i];
  for (int64_t o = 0; o < 4; ++o)
    for (int64_t p = 0; p < positions; ++p)
      values.data<double>()[positions * 4 * k + o * positions + p] = conv.params()[1].data<double>()[o];
  Arena arena = bind(local, values);
  const Tensor x = random_tensor({3, 3, 7, 6}, 9);
  Tensor y1 = Tensor::empty({3, 4, out[1], out[2]}, DType::f64), y2 = y1.clone();
  conv.forward(ctx, x, y1, true);
  local.forward(ctx, x, y2, true);
  for (int64_t i = 0; i < y1.numel(); ++i) REQUIRE(std::fabs(y1.data<double>()[i] - y2.data<double>()[i]) < 1e-12);
  // dx agrees too, and the local weight gradients summed over positions are the conv weight gradient.
  const Tensor dy = random_tensor(y1.shape(), 10);
  Tensor dx1 = Tensor::empty(x.shape(), DType::f64), dx2 = dx1.clone();
  conv.backward(ctx, x, y1, dy, dx1);
  local.backward(ctx, x, y2, dy, dx2);
  for (int64_t i = 0; i < dx1.numel(); ++i) REQUIRE(std::fabs(dx1.data<double>()[i] - dx2.data<double>()[i]) < 1e-12);
  for (int64_t i = 0; i < 4 * k; ++i) {
    double sum = 0;
    for (int64_t p = 0; p < positions; ++p) sum += local.grads()[0].data<double>()[p * 4 * k + i];
    REQUIRE(std::fabs(sum - conv.grads()[0].data<double>()[i]) < 1e-11);
  }
}

TEMPLATE_TEST_CASE("pooling matches PyTorch with padding and ceil_mode", "[layers][pool]", float, double) {
  using T = TestType;
  Context ctx = Context::cpu(1, 1);
  const Tensor x = seq<T>({1, 2, 6, 5}, sin_input);
  Tensor y = Tensor::empty({1, 2, 4, 3}, dtype_of<T>());
  SECTION("max") {
    Pool2d layer(PoolKind::max, {{3, 3, 2, 2, 1, 1}, true});
    REQUIRE(layer.setup({2, 6, 5}) == Shape{2, 4, 3});
    layer.forward(ctx, x, y, false);
    require_values<T>(
        y, {1.393439573, 1.403424002,  1.49993647,    1.393439573,  1.098347166, 1.123761522, 1.499807563, 1.499807563,
            1.123761522, 0.1120624356, -0.4364284358, -1.289963538, 1.130506178, 1.499609006, 1.499609006, 1.130506178,
            1.499609006, 1.499609006,  1.499340806,   1.381797163,  1.413955705, 1.499340806, 1.381797163, 0.626871814},
        tolerance<T>());
  }
  SECTION("avg, count_include_pad") {
    Pool2d layer(PoolKind::avg, {{3, 3, 2, 2, 1, 1}, true, true});
    REQUIRE(layer.setup({2, 6, 5}) == Shape{2, 4, 3});
    layer.forward(ctx, x, y, false);
    require_values<T>(y, {0.3689851435,    0.5638796808, 0.2887750145,  -0.1098362964,  -0.2111092978, -0.1364206443,
                          0.1449591022,    0.1985173929, 0.08660950395, -0.05406100004, -0.4420404566, -0.4615748892,
                          -0.1000026753,   0.1690777211, 0.297230191,   0.08579762313,  0.01455233285, -0.06882246854,
                          -0.009486591785, 0.1009322487, 0.1272230773,  0.4801896616,   0.5143171223,  0.1197562544},
                      tolerance<T>());
  }
  SECTION("avg, count_include_pad false") {
    Pool2d layer(PoolKind::avg, {{3, 3, 2, 2, 1, 1}, true, false});
    REQUIRE(layer.setup({2, 6, 5}) == Shape{2, 4, 3});
    layer.forward(ctx, x, y, false);
    require_values<T>(y, {0.8302165729,   0.8458195212, 0.6497437827, -0.1647544445, -0.2111092978, -0.2046309664,
                          0.2174386533,   0.1985173929, 0.1299142559, -0.1621830001, -0.8840809133, -1.384724668,
                          -0.2250060194,  0.2536165817, 0.6687679297, 0.1286964347,  0.01455233285, -0.1032337028,
                          -0.01422988768, 0.1009322487, 0.190834616,  1.440568985,   1.028634245,   0.3592687633},
                      tolerance<T>());
  }
}

TEST_CASE("pooling output sizes follow PyTorch's floor and ceil_mode rules", "[layers][pool]") {
  // AlexNet / Dettmers: 3x3 stride 2 on 32 -> 15, on 15 -> 7; ceil_mode on 32 -> 16.
  REQUIRE(window_output_size(32, 3, 2, 0, false) == 15);
  REQUIRE(window_output_size(15, 3, 2, 0, false) == 7);
  REQUIRE(window_output_size(32, 3, 2, 0, true) == 16);
  REQUIRE(window_output_size(55, 3, 2, 0, false) == 27);
  // ceil_mode drops a window that would start in the right padding only: 5 + 2*1, k 2, s 2.
  REQUIRE(window_output_size(5, 2, 2, 1, true) == 3);
  Pool2d dettmers(PoolKind::max, {{3, 3, 2, 2, 0, 0}});
  REQUIRE(dettmers.setup({64, 32, 32}) == Shape{64, 15, 15});
}

TEST_CASE("maxpool2d sends a tie's gradient to the first maximum in row-major order", "[layers][pool]") {
  Context ctx = Context::cpu(1, 1);
  Pool2d layer(PoolKind::max, {{2, 2, 1, 1, 0, 0}});
  REQUIRE(layer.setup({1, 2, 3}) == Shape{1, 1, 2});
  // [[1, 2, 5], [5, 5, 5]]: the left window holds two 5s, the right one three; the first in row-major
  // order wins (the last would be elements 4 and 5).
  Tensor x = Tensor::empty({1, 1, 2, 3}, DType::f64);
  const double xv[] = {1, 2, 5, 5, 5, 5};
  std::copy(xv, xv + 6, x.data<double>());
  Tensor y = Tensor::empty({1, 1, 1, 2}, DType::f64);
  layer.forward(ctx, x, y, true);
  REQUIRE(y.data<double>()[0] == 5);
  REQUIRE(y.data<double>()[1] == 5);
  Tensor dy = Tensor::empty({1, 1, 1, 2}, DType::f64);
  dy.data<double>()[0] = 10;
  dy.data<double>()[1] = 100;
  Tensor dx = Tensor::empty(x.shape(), DType::f64);
  dx.fill_(std::nan(""));
  layer.backward(ctx, x, y, dy, dx);
  const std::vector<double> want{0, 0, 100, 10, 0, 0};
  for (int i = 0; i < 6; ++i) REQUIRE(dx.data<double>()[i] == want[static_cast<size_t>(i)]);
}

// The windows-inside max paths (vector loops over chunks of output columns, planes split among lanes)
// against the definition written plainly here: the first maximum in row-major order, NaN when the
// window holds one, dy added in the outputs' order. Values on a coarse grid make ties common; rows
// wider than a chunk (64 outputs) and strides 1, 2 and 3 take every variant.
TEMPLATE_TEST_CASE("maxpool2d's windows-inside path follows the definition bit for bit", "[layers][pool]", float,
                   double) {
  using T = TestType;
  struct Case {
    int64_t k, s, c, h, w;
  };
  const Case c = GENERATE(Case{3, 2, 3, 9, 140}, Case{2, 1, 2, 5, 70}, Case{3, 3, 2, 10, 11}, Case{3, 2, 64, 32, 32});
  const int threads = GENERATE(1, 2);
  INFO("kernel " << c.k << " stride " << c.s << " map " << c.c << "x" << c.h << "x" << c.w << ", threads " << threads);
  Context ctx = Context::cpu(1, threads);
  Pool2d layer(PoolKind::max, {{c.k, c.k, c.s, c.s, 0, 0}});
  const Shape out = layer.setup({c.c, c.h, c.w});
  const int64_t n = 2, oh = out[1], ow = out[2];
  Tensor x = random_tensor({n, c.c, c.h, c.w}, 41, -2.0, 2.0, dtype_of<T>());
  T* xs = x.data<T>();
  for (int64_t i = 0; i < x.numel(); ++i) xs[i] = std::round(xs[i] * 2) / 2;  // 9 levels: many ties
  xs[5] = std::numeric_limits<T>::quiet_NaN();
  xs[x.numel() / 2 + 3] = std::numeric_limits<T>::quiet_NaN();
  const Tensor dy = random_tensor({n, c.c, oh, ow}, 42, -1.0, 1.0, dtype_of<T>());
  Tensor y = Tensor::empty({n, c.c, oh, ow}, dtype_of<T>());
  Tensor dx = Tensor::empty(x.shape(), dtype_of<T>());
  layer.forward(ctx, x, y, true);
  layer.backward(ctx, x, y, dy, dx);
  std::vector<T> want_y(static_cast<size_t>(y.numel())), want_dx(static_cast<size_t>(x.numel()), T(0));
  for (int64_t pl = 0; pl < n * c.c; ++pl)
    for (int64_t r = 0; r < oh; ++r)
      for (int64_t q = 0; q < ow; ++q) {
        int64_t first = -1;
        bool nan = false;
        for (int64_t i = 0; i < c.k; ++i)
          for (int64_t j = 0; j < c.k; ++j) {
            const int64_t at = pl * c.h * c.w + (r * c.s + i) * c.w + q * c.s + j;
            if (std::isnan(xs[at])) {
              if (!nan) first = at;
              nan = true;
            } else if (!nan && (first < 0 || xs[at] > xs[first])) {
              first = at;
            }
          }
        const int64_t o = (pl * oh + r) * ow + q;
        want_y[static_cast<size_t>(o)] = xs[first];
        want_dx[static_cast<size_t>(first)] += dy.data<T>()[o];
      }
  for (int64_t i = 0; i < y.numel(); ++i) {
    const T got = y.data<T>()[i], want = want_y[static_cast<size_t>(i)];
    INFO("y[" << i << "] " << got << " want " << want);
    REQUIRE((std::isnan(want) ? std::isnan(got) : got == want));
  }
  for (int64_t i = 0; i < dx.numel(); ++i) {
    INFO("dx[" << i << "]");
    REQUIRE(dx.data<T>()[i] == want_dx[static_cast<size_t>(i)]);
  }
}

// The layers whose CPU paths split their work among the CpuPool's lanes (samples, planes or positions)
// give the same bits on 1, 2 and 3 lanes: y, dx and every parameter gradient.
TEST_CASE("locally_connected2d, contrast_norm and pooling give the same bits on any lane count", "[layers][lanes]") {
  struct Run {
    std::vector<float> y, dx, grads;
  };
  auto run = [](Layer& layer, const Shape& input, int threads) {
    Context ctx = Context::cpu(1, threads);
    const Shape out = layer.setup(input);
    BoundParams bound;
    if (!layer.param_specs().empty()) bound = bind_random_params(layer, 51, DType::f32);
    const int64_t n = 5;
    Shape xs{n}, ys{n};
    xs.insert(xs.end(), input.begin(), input.end());
    ys.insert(ys.end(), out.begin(), out.end());
    const Tensor x = random_tensor(xs, 52, -1.0, 1.0, DType::f32);
    const Tensor dy = random_tensor(ys, 53, -1.0, 1.0, DType::f32);
    Tensor y = Tensor::empty(ys, DType::f32), dx = Tensor::empty(xs, DType::f32);
    layer.forward(ctx, x, y, true);
    layer.backward(ctx, x, y, dy, dx);
    auto values = [](const Tensor& t) { return std::vector<float>(t.data<float>(), t.data<float>() + t.numel()); };
    return Run{values(y), values(dx), bound.grads.defined() ? values(bound.grads) : std::vector<float>{}};
  };
  auto each = [&](auto make, const Shape& input) {
    auto one = make();
    const Run want = run(*one, input, 1);
    for (int threads : {2, 3}) {
      INFO(one->describe() << " on " << threads << " lanes");
      auto layer = make();
      const Run got = run(*layer, input, threads);
      REQUIRE(got.y == want.y);
      REQUIRE(got.dx == want.dx);
      REQUIRE(got.grads == want.grads);
    }
  };
  each([] { return std::make_unique<LocallyConnected2d>(6, Window2d{3, 3, 1, 1, 1, 1}, true); }, Shape{4, 7, 7});
  each([] { return std::make_unique<ContrastNorm>(ContrastNormOptions{5, 0.001, 0.75, 1.0}); }, Shape{3, 9, 8});
  each([] { return std::make_unique<Pool2d>(PoolKind::max, PoolOptions{{3, 3, 2, 2, 0, 0}}); }, Shape{3, 15, 15});
  each([] { return std::make_unique<Pool2d>(PoolKind::avg, PoolOptions{{3, 3, 2, 2, 1, 1}}); }, Shape{3, 8, 9});
}

TEMPLATE_TEST_CASE("lrn matches PyTorch's F.local_response_norm", "[layers][lrn]", float, double) {
  using T = TestType;
  Context ctx = Context::cpu(1, 1);
  const Tensor x = seq<T>({1, 4, 2, 2}, sin_input);
  Tensor y = Tensor::empty({1, 4, 2, 2}, dtype_of<T>());
  SECTION("size 3") {
    Lrn layer({3, 0.2, 0.75, 1.0});
    layer.setup({4, 2, 2});
    layer.forward(ctx, x, y, false);
    require_values<T>(y,
                      {0.1347175709, 0.60768392, 0.9969814841, 1.255685876, 1.348491417, 1.236791293, 0.9463144213,
                       0.5472002717, 0.1006151465, -0.353330043, -0.7795241618, -1.126785165, -1.333680604,
                       -1.318979459, -1.129501153, -0.7927657803},
                      tolerance<T>());
  }
  SECTION("size 4 (PyTorch's window is one channel longer before than after)") {
    Lrn layer({4, 0.2, 0.75, 1.0});
    layer.setup({4, 2, 2});
    layer.forward(ctx, x, y, false);
    require_values<T>(y,
                      {0.1381391716, 0.6239085411, 1.024099108, 1.289148765, 1.382942157, 1.272017041, 0.9795955152,
                       0.5700727607, 0.1050858834, -0.3636398795, -0.7787846409, -1.092103252, -1.271125817,
                       -1.271447313, -1.115416611, -0.8027363891},
                      tolerance<T>());
  }
}

TEMPLATE_TEST_CASE("contrast_norm matches its definition written in PyTorch ops", "[layers][cnorm]", float, double) {
  using T = TestType;
  Context ctx = Context::cpu(1, 1);
  const Tensor x = seq<T>({1, 2, 4, 5}, sin_input);
  Tensor y = Tensor::empty({1, 2, 4, 5}, dtype_of<T>());
  SECTION("size 3") {
    ContrastNorm layer({3, 0.8, 0.75, 1.0});
    layer.setup({2, 4, 5});
    layer.forward(ctx, x, y, false);
    require_values<T>(
        y, {0.1284197731,  0.5636667984,  0.9675934265,  1.168640793,   1.291093045,   1.08662279,    0.7753355118,
            0.4595673125,  0.08308729022, -0.3186413106, -0.7085822466, -0.8978767694, -1.034308274,  -0.995515904,
            -0.9414964385, -0.7790473355, -0.3094593184, 0.1178998253,  0.4753159867,  0.8433693702,  1.193544122,
            1.141894484,   0.9990919883,  0.7559900941,  0.4913562269,  0.0824008485,  -0.2867958641, -0.6174998962,
            -0.8685920114, -1.119190284,  -1.109329518,  -0.8468179934, -0.5865413664, -0.2504202619, 0.1253260977,
            0.530611836,   0.7845903147,  1.020973959,   1.151997127,   1.183670828},
        tolerance<T>());
  }
  SECTION("size 2 (window [p - 1, p])") {
    ContrastNorm layer({2, 0.8, 0.75, 1.0});
    layer.setup({2, 4, 5});
    layer.forward(ctx, x, y, false);
    require_values<T>(
        y, {0.1494674041,  0.6562845042,  1.01658048,    1.21735424,    1.276881527,   1.21112242,    0.9210658208,
            0.5860225711,  0.09937264941, -0.3042198583, -0.7062858956, -0.8264663387, -0.9952978401, -1.04272383,
            -0.9089554659, -0.7494428943, -0.2659523034, 0.09961979501, 0.4201084742,  0.6986343656,  1.210044536,
            1.202709461,   1.205559343,   0.9935038963,  0.6207293356,  0.09553694045, -0.3081150455, -0.5995993287,
            -0.8154155509, -0.9852718471, -1.228064234,  -0.9052145889, -0.6108383278, -0.2491731224, 0.1058739169,
            0.5379798259,  0.7183824609,  0.9231294848,  1.040866424,   0.9954770808},
        tolerance<T>());
  }
}

TEST_CASE("global_avgpool averages each channel", "[layers][pool]") {
  Context ctx = Context::cpu(1, 1);
  GlobalAvgPool layer;
  REQUIRE(layer.setup({2, 2, 2}) == Shape{2});
  Tensor x = Tensor::empty({1, 2, 2, 2}, DType::f32);
  const float xv[] = {1, 2, 3, 4, -1, -1, -1, 7};
  std::copy(xv, xv + 8, x.data<float>());
  Tensor y = Tensor::empty({1, 2}, DType::f32);
  layer.forward(ctx, x, y, false);
  REQUIRE(y.data<float>()[0] == 2.5f);
  REQUIRE(y.data<float>()[1] == 1.0f);
}

TEST_CASE("the registry builds the image layers from their configs", "[layers][config]") {
  auto conv = layer_from_yaml("{type: conv2d, out_channels: 64, kernel: 5, padding: 2}");
  auto& c = dynamic_cast<Conv2d&>(*conv);
  REQUIRE(c.setup({3, 32, 32}) == Shape{64, 32, 32});
  REQUIRE(c.param_specs().size() == 2);
  REQUIRE(c.param_specs()[0].shape == Shape{64, 3, 5, 5});
  REQUIRE(c.param_specs()[0].fan_in == 75);  // PyTorch's bound 1/sqrt(C*kh*kw)
  auto rect =
      layer_from_yaml("{type: conv2d, out_channels: 2, kernel: [3, 1], stride: [2, 1], padding: [1, 0], bias: false}");
  REQUIRE(rect->setup({1, 8, 4}) == Shape{2, 4, 4});
  REQUIRE(rect->param_specs().size() == 1);
  auto pool = layer_from_yaml("{type: maxpool2d, kernel: 3, stride: 2}");
  REQUIRE(pool->setup({64, 32, 32}) == Shape{64, 15, 15});
  REQUIRE(layer_from_yaml("{type: maxpool2d, kernel: 2}")->setup({1, 8, 6}) == Shape{1, 4, 3});  // stride = kernel
  REQUIRE(
      layer_from_yaml("{type: avgpool2d, kernel: 3, stride: 2, padding: 1, ceil_mode: true, count_include_pad: false}")
          ->setup({2, 7, 7}) == Shape{2, 4, 4});
  REQUIRE(layer_from_yaml("{type: global_avgpool}")->setup({8, 4, 4}) == Shape{8});
  REQUIRE(layer_from_yaml("{type: lrn, size: 5, alpha: 0.0001, beta: 0.75, k: 2}")->setup({96, 55, 55}) ==
          Shape{96, 55, 55});
  REQUIRE(layer_from_yaml("{type: contrast_norm, size: 9}")->setup({64, 15, 15}) == Shape{64, 15, 15});
  auto local = layer_from_yaml("{type: locally_connected2d, out_channels: 32, kernel: 3, padding: 1}");
  REQUIRE(local->setup({64, 7, 7}) == Shape{32, 7, 7});
  REQUIRE(local->param_specs()[0].shape == Shape{49, 32, 576});
  REQUIRE(local->param_specs()[1].shape == Shape{32, 7, 7});
}

TEST_CASE("image layer configuration errors name the key and what was expected", "[layers][config]") {
  REQUIRE_THROWS_WITH(layer_from_yaml("{type: conv2d, kernel: 3}"),
                      Catch::Contains("model.layers.0.out_channels is required"));
  REQUIRE_THROWS_WITH(layer_from_yaml("{type: conv2d, out_channels: 8}"),
                      Catch::Contains("model.layers.0.kernel is required"));
  REQUIRE_THROWS_WITH(layer_from_yaml("{type: conv2d, out_channels: 8, kernel: 3, padding: -1}"),
                      Catch::Contains("model.layers.0.padding must be >= 0, got -1"));
  REQUIRE_THROWS_WITH(layer_from_yaml("{type: conv2d, out_channels: 8, kernel: [3, 3, 3]}"),
                      Catch::Contains("kernel must be an integer or a list [height, width], got 3 entries"));
  REQUIRE_THROWS_WITH(layer_from_yaml("{type: conv2d, out_channels: 8, kernel: [3, -3]}"),
                      Catch::Contains("kernel entry 1 must be in [1,"));
  REQUIRE_THROWS_WITH(layer_from_yaml("{type: conv2d, out_channels: 0, kernel: 3}"),
                      Catch::Contains("out_channels must be >= 1, got 0"));
  REQUIRE_THROWS_WITH(layer_from_yaml("{type: maxpool2d, kernel: 3, stride: 0}"),
                      Catch::Contains("stride must be >= 1, got 0"));
  REQUIRE_THROWS_WITH(layer_from_yaml("{type: maxpool2d, kernel: 3, count_include_pad: true}"),
                      Catch::Contains("unknown key 'model.layers.0.count_include_pad'"));
  REQUIRE_THROWS_WITH(layer_from_yaml("{type: lrn}"), Catch::Contains("model.layers.0.size is required"));
  REQUIRE_THROWS_WITH(layer_from_yaml("{type: contrast_norm, size: 0}"), Catch::Contains("size must be >= 1, got 0"));
  REQUIRE_THROWS_WITH(layer_from_yaml("{type: locally_connected2d, kernel: 3}"),
                      Catch::Contains("model.layers.0.out_channels is required"));
  REQUIRE_THROWS_AS(layer_from_yaml("{type: conv2d, kernel: 3}"), InputError);
}

TEST_CASE("image layers reject shapes they cannot handle", "[layers][config]") {
  Conv2d conv(4, {5, 5, 1, 1, 0, 0}, true);
  REQUIRE_THROWS_WITH(conv.setup({3, 4, 8}), Catch::Contains("kernel [5, 5] is larger than the padded input [4, 8]"));
  REQUIRE_THROWS_WITH(conv.setup({48}), Catch::Contains("expects one image (channels, height, width) per sample"));
  Conv2d padded(4, {5, 5, 1, 1, 1, 1}, true);
  REQUIRE(padded.setup({3, 3, 3}) == Shape{4, 1, 1});  // the padding makes room for the kernel
  Pool2d pool(PoolKind::max, {{3, 3, 2, 2, 2, 2}});
  REQUIRE_THROWS_WITH(pool.setup({1, 8, 8}), Catch::Contains("padding [2, 2] must be at most half of the kernel"));
  LocallyConnected2d local(2, {9, 9, 1, 1, 0, 0}, true);
  REQUIRE_THROWS_WITH(local.setup({2, 7, 7}), Catch::Contains("kernel [9, 9] is larger than the padded input"));
  GlobalAvgPool gap;
  REQUIRE_THROWS_WITH(gap.setup({10}), Catch::Contains("expects one image"));
}

TEST_CASE("conv2d f32 agrees with f64 and backward overwrites its gradients", "[layers][conv2d]") {
  Context ctx = Context::cpu(1, 1);
  Conv2d a(6, {3, 3, 2, 2, 1, 1}, true), b(6, {3, 3, 2, 2, 1, 1}, true);
  const Shape out = a.setup({4, 9, 7});
  b.setup({4, 9, 7});
  BoundParams p64 = bind_random_params(a, 3, DType::f64);
  BoundParams p32 = bind_random_params(b, 3, DType::f32);
  const Tensor x64 = random_tensor({3, 4, 9, 7}, 4), x32 = random_tensor({3, 4, 9, 7}, 4, -1, 1, DType::f32);
  const Shape ys{3, out[0], out[1], out[2]};
  Tensor y64 = Tensor::empty(ys, DType::f64), y32 = Tensor::empty(ys, DType::f32);
  a.forward(ctx, x64, y64, true);
  b.forward(ctx, x32, y32, true);
  for (int64_t i = 0; i < y64.numel(); ++i) REQUIRE(std::fabs(y32.data<float>()[i] - y64.data<double>()[i]) < 1e-5);
  // Backward twice with the same dy: the gradients must be equal (overwritten, not accumulated).
  const Tensor dy = random_tensor(ys, 5);
  Tensor dx = Tensor::empty(x64.shape(), DType::f64);
  Tensor undefined;
  a.backward(ctx, x64, y64, dy, undefined);  // a first layer: no dx
  const Tensor first = p64.grads.clone();
  a.backward(ctx, x64, y64, dy, dx);
  for (int64_t i = 0; i < first.numel(); ++i) REQUIRE(first.data<double>()[i] == p64.grads.data<double>()[i]);
}
