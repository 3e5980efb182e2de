// conv2d's Winograd paths (layers/winograd.h, winograd4.h) against its im2col path on the same random
// data: y, dx, dW and db, in float (the training dtype) and double, over odd and even maps (partial
// tiles), channel counts that are not multiples of 8, paddings 0..2, several blocks per lane and
// batches the lanes do not divide, forward and dx by F(2x2, 3x3) and by F(4x4, 3x3). Then the
// vectorized transforms against their scalar references (the same bits) and the independence of the
// block size (the same bits).
//
// The tolerance is derived, not tuned. With |g| <= gmax (weights) and |d| <= dmax (input), one
// channel's Winograd output entry sum_{k,l} |A^T|_{ik} (|G||g||G^T| .* |B^T||d||B|)_{kl} |A|_{lj} is at
// most (max_i sum_k |A^T|_{ik} rG_k rB_k)^2 gmax dmax, rG_k and rB_k the row sums of |G| and |B^T|.
// F(2x2, 3x3): rG = (1, 1.5, 1.5, 1) and rB = 2 each, so rG_k rB_k = (2, 3, 3, 2), and both rows of
// |A^T| give 8: 8^2 = 256 gmax dmax (all-ones g and d attain it), against 9 gmax dmax for the direct sum.
// Each transformed value and the channel sum carry at most C + 8 roundings of u (unit roundoff: 2 in
// the input transform, 3 in the weight transform, 3 in the output transform), so |error| <= (C + 8) u
// 256 C gmax dmax, plus im2col's own error of at most 9C u 9C gmax dmax.
// F(4x4, 3x3): rG = (1/4, 1/2, 1/2, 7/24, 7/24, 1) and rB = (10, 10, 10, 6, 6, 10), so rG_k rB_k =
// (2.5, 5, 5, 1.75, 1.75, 10), and the rows of |A^T| give 16, 17, 24 and 5 + 5 + 14 + 14 + 10 = 48:
// 48^2 = 2304 gmax dmax, 9x F(2x2, 3x3)'s. Roundings: 4 in the input transform (2 per direction,
// winograd4.cpp's input6), 6 in the output transform (3 per direction), and in the weight transform,
// computed in double with a rounded 1/6, at most 8 of double (for float: 1 of float and 8 of double,
// less than 2 of float), so C + 18 in all: |error| <= (C + 18) u 2304 C gmax dmax plus im2col's. For
// C = 64 (ResNet-110's last stage) in float that is 82 * 2304 * 64 u ~ 0.7 gmax dmax per output: a
// worst case, met only by inputs and weights of one sign everywhere; random data stay orders below it
// (a few times F(2x2, 3x3)'s observed error, 1e-6 to 4e-5 of outputs up to 16 here).
// The weight gradient is a sum over T tiles of F(3x3, 2x2) products whose absolute value is at most
// 144 emax dmax each (rows of |G'| sum to 1, of |A'^T| to 3, 2, 3), so |error| <= (T + 8) u 144 T emax
// dmax plus im2col's (N P)^2 u emax dmax over its N P positions.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "layers/conv2d.h"
#include "layers/winograd.h"
#include "layers/winograd4.h"
#include "tests/support/gradcheck.h"

using namespace qtrain;
using namespace qtrain::testing;

namespace {

struct Case {
  int64_t c, oc, h, w, ph, pw, batch;
  int threads;
};

template <typename T>
double max_abs(const Tensor& t) {
  double m = 0;
  for (int64_t i = 0; i < t.numel(); ++i) m = std::max(m, std::fabs(static_cast<double>(t.data<T>()[i])));
  return m;
}

template <typename T>
double max_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.numel() == b.numel());
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i)
    m = std::max(m, std::fabs(static_cast<double>(a.data<T>()[i]) - static_cast<double>(b.data<T>()[i])));
  return m;
}

// Compares one quantity of the two paths against its bound. With `sharp`, the bound must also be far
// below the values' own size, or the comparison could not catch a wrong result.
template <typename T>
void require_close(const char* what, const Tensor& winograd, const Tensor& im2col, double bound, bool sharp = true) {
  const double diff = max_diff<T>(winograd, im2col), scale = max_abs<T>(im2col);
  INFO(what << ": max |winograd - im2col| " << diff << ", bound " << bound << ", max |im2col| " << scale);
  if (sharp) CHECK(bound < 0.05 * scale);
  CHECK(diff <= bound);
}

// The entries of F(m x m, 3x3)'s input transform (m = 2 or 4) of x (n, 3, h, w) with padding p, signed
// zeros, infinities and NaNs among random values, whose bits differ between the vectorized transform
// and the reference loops, except between NaNs: where two NaNs meet in a sum, x86 returns the first
// operand's, and the compiler may swap the operands of the scalar loops' additions.
int64_t transform_bits_differ(int64_t m, int64_t h, int64_t w, int64_t p, int64_t n) {
  const int64_t c = 3;
  const Window2d win{3, 3, 1, 1, p, p};
  const WinogradConv g = WinogradConv::forward_of(image_geometry("test", {c, h, w}, win), win, 4, m);
  Tensor x = random_tensor({n, c, h, w}, 7, -1.0, 1.0, DType::f32);
  float* xs = x.data<float>();
  const float special[] = {-0.0f,
                           0.0f,
                           std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::quiet_NaN(),
                           -std::numeric_limits<float>::quiet_NaN()};
  for (int64_t i = 0; i < x.numel(); i += 5) xs[i] = special[(i / 5) % 6];
  const int64_t size = (m + 2) * (m + 2) * c * n * g.tiles();
  std::vector<float> reference(static_cast<size_t>(size), 1.0f), fast(static_cast<size_t>(size), 2.0f);
  auto transform = m == 2 ? &winograd_input_transform<float> : &winograd4_input_transform<float>;
  transform(g, xs, n, reference.data(), true);
  transform(g, xs, n, fast.data(), false);
  int64_t differ = 0;
  for (size_t i = 0; i < reference.size(); ++i)
    if (std::memcmp(&reference[i], &fast[i], sizeof(float)) != 0 && !(std::isnan(reference[i]) && std::isnan(fast[i])))
      ++differ;
  return differ;
}

}  // namespace

TEMPLATE_TEST_CASE("conv2d's Winograd path agrees with its im2col path", "[layers][conv2d][winograd]", float, double) {
  using T = TestType;
  const DType dtype = std::is_same_v<T, float> ? DType::f32 : DType::f64;
  const double u = std::numeric_limits<T>::epsilon() / 2;
  const Case c = GENERATE(Case{3, 5, 7, 9, 1, 1, 5, 2},       // odd maps: partial tiles on both axes
                          Case{16, 16, 8, 8, 1, 1, 3, 3},     // a ResNet stage's shape, 3 lanes for 3 samples
                          Case{12, 20, 6, 11, 0, 2, 4, 2},    // padding 0 and 2 (dx's flipped padding 2 and 0)
                          Case{9, 7, 5, 5, 2, 0, 3, 1},       // one lane
                          Case{1, 1, 1, 1, 1, 1, 2, 2},       // a 1x1 map: one partial tile
                          Case{6, 10, 13, 10, 2, 1, 3, 2},    // 15x10 out, 13x10 dx: 4x4 tiles cut by 1..3
                          Case{32, 32, 16, 15, 1, 1, 7, 2},   // 2 samples per block: lanes of 4 and 3 samples
                          Case{16, 24, 32, 32, 1, 1, 3, 2});  // 1 sample per block
  // Forward and dx by F(2x2, 3x3) and by F(4x4, 3x3) (the weight gradient is F(3x3, 2x2) in both).
  const Conv2dCpuAlgorithm algorithm = GENERATE(Conv2dCpuAlgorithm::winograd2, Conv2dCpuAlgorithm::winograd4);
  const bool f4 = algorithm == Conv2dCpuAlgorithm::winograd4;
  INFO("C " << c.c << " -> OC " << c.oc << ", " << c.h << "x" << c.w << ", padding " << c.ph << "x" << c.pw
            << ", batch " << c.batch << ", threads " << c.threads << (f4 ? ", F(4x4, 3x3)" : ", F(2x2, 3x3)"));
  const Window2d win{3, 3, 1, 1, c.ph, c.pw};
  Conv2d winograd(c.oc, win, true), im2col(c.oc, win, true);
  winograd.set_cpu_algorithm(algorithm);
  im2col.set_cpu_algorithm(Conv2dCpuAlgorithm::im2col);
  REQUIRE(winograd_fits(win));
  const Shape out = winograd.setup({c.c, c.h, c.w});
  im2col.setup({c.c, c.h, c.w});
  BoundParams pw = bind_random_params(winograd, 11, dtype), pi = bind_random_params(im2col, 11, dtype);
  const Tensor x = random_tensor({c.batch, c.c, c.h, c.w}, 12, -1.0, 1.0, dtype);
  const Tensor dy = random_tensor({c.batch, out[0], out[1], out[2]}, 13, -1.0, 1.0, dtype);
  Context ctx = Context::cpu(1, c.threads);
  struct Result {
    Tensor y, dx;
  };
  auto run = [&](Conv2d& layer) {
    Result r{Tensor::empty(dy.shape(), dtype), Tensor::empty(x.shape(), dtype)};
    layer.forward(ctx, x, r.y, true);
    layer.backward(ctx, x, r.y, dy, r.dx);
    return r;
  };
  const Result a = run(winograd), b = run(im2col);

  const double wmax = max_abs<T>(winograd.params()[0]), xmax = max_abs<T>(x), dymax = max_abs<T>(dy);
  const double cf = static_cast<double>(c.c), ocf = static_cast<double>(c.oc);
  const double tiles = static_cast<double>(c.batch * ((out[1] + 1) / 2) * ((out[2] + 1) / 2));
  const double positions = static_cast<double>(c.batch * out[1] * out[2]);
  // The output entries' bound and roundings beyond the channel sum (see the top of the file).
  const double entry = f4 ? 2304 : 256, extra = f4 ? 18 : 8;
  require_close<T>("y", a.y, b.y, u * wmax * xmax * cf * (entry * (cf + extra) + 81 * cf));
  require_close<T>("dx", a.dx, b.dx, u * wmax * dymax * ocf * (entry * (ocf + extra) + 81 * ocf));
  // The weight gradient's worst-case bound grows as T^2 while its values grow as sqrt(T): in float it
  // only catches gross errors on the larger cases; the double run checks it sharply.
  require_close<T>("dW", winograd.grads()[0], im2col.grads()[0],
                   u * dymax * xmax * (144 * tiles * (tiles + 8) + positions * positions),
                   std::is_same_v<T, double> || tiles <= 128);
  // db does not depend on the algorithm: the same sums in the same order.
  CHECK(max_diff<T>(winograd.grads()[1], im2col.grads()[1]) == 0);
}

TEST_CASE("winograd_fits: 3x3 kernels, stride 1, padding at most 2", "[layers][conv2d][winograd]") {
  CHECK(winograd_fits({3, 3, 1, 1, 1, 1}));
  CHECK(winograd_fits({3, 3, 1, 1, 0, 2}));
  CHECK_FALSE(winograd_fits({3, 3, 2, 2, 1, 1}));
  CHECK_FALSE(winograd_fits({3, 3, 1, 2, 1, 1}));
  CHECK_FALSE(winograd_fits({3, 3, 1, 1, 3, 1}));
  CHECK_FALSE(winograd_fits({5, 5, 1, 1, 2, 2}));
  CHECK_FALSE(winograd_fits({3, 2, 1, 1, 1, 1}));
}

TEST_CASE("winograd: the vectorized input transforms write the reference's bits", "[layers][conv2d][winograd]") {
  // F(2x2, 3x3) and F(4x4, 3x3). Widths 1..35: tw = 1 .. 18 tiles of 2 (4 and 8: the vectors spanning
  // 4 and 2 tile rows; 17, 18: a second, partial chunk of a row) and 1 .. 9 of 4 (2, 4 and 8: the
  // vectors of 8, 4 and 2 tile rows, across samples for tw = 2); heights with a last group of tile rows
  // cut short, paddings 0..2 (dx's flipped padding is 2 - p), 5 samples, and inputs with signed zeros,
  // infinities and NaNs among the values. Bits must match except between NaNs (transform_bits_differ).
  const int64_t m = GENERATE(2, 4);
  const int64_t w = GENERATE(range(1, 36));
  const int64_t h = GENERATE(1, 3, 8, 13);
  const int64_t p = GENERATE(0, 1, 2);
  if (w + 2 * p < 3 || h + 2 * p < 3) return;
  INFO("F(" << m << "x" << m << ", 3x3), " << h << "x" << w << ", padding " << p);
  CHECK(transform_bits_differ(m, h, w, p, 5) == 0);
}

TEST_CASE("winograd: the weight gradient's vectorized dy transform writes the reference's bits",
          "[layers][conv2d][winograd]") {
  // OC 20: two whole groups of 8 channels and a partial one, padded to 32 columns; odd maps: partial
  // tiles on both axes; 13 columns: a partial block of 4 tiles.
  const int64_t oc = GENERATE(1, 8, 20, 64);
  const int64_t h = GENERATE(1, 7, 8), w = GENERATE(5, 13, 16);
  const int64_t n = 3;
  INFO("OC " << oc << ", " << h << "x" << w);
  const Window2d win{3, 3, 1, 1, 1, 1};
  const WinogradConv g = WinogradConv::forward_of(image_geometry("test", {4, h, w}, win), win, oc);
  const Tensor dy = random_tensor({n, oc, g.oh, g.ow}, 21, -1.0, 1.0, DType::f32);
  const int64_t size = 16 * n * g.tiles() * ((oc + 15) / 16 * 16);
  std::vector<float> reference(static_cast<size_t>(size), 1.0f), fast(static_cast<size_t>(size), 2.0f);
  winograd_weight_grad_transform(g, dy.data<float>(), n, reference.data(), true);
  winograd_weight_grad_transform(g, dy.data<float>(), n, fast.data(), false);
  CHECK(std::memcmp(reference.data(), fast.data(), reference.size() * sizeof(float)) == 0);
}

TEMPLATE_TEST_CASE("winograd: the weight gradient has the same bits for any block size", "[layers][conv2d][winograd]",
                   float, double) {
  // Each transformed entry is one sum over the tiles in order, continued from block to block.
  using T = TestType;
  const DType dtype = std::is_same_v<T, float> ? DType::f32 : DType::f64;
  const Window2d win{3, 3, 1, 1, 1, 1};
  const int64_t c = 5, oc = 11, n = 5;
  const WinogradConv g = WinogradConv::forward_of(image_geometry("test", {c, 7, 6}, win), win, oc);
  const Tensor x = random_tensor({n, c, g.h, g.w}, 22, -1.0, 1.0, dtype);
  const Tensor dy = random_tensor({n, oc, g.oh, g.ow}, 23, -1.0, 1.0, dtype);
  auto run = [&](int64_t block) {
    std::vector<T> work(static_cast<size_t>(winograd_work_size(g, block)));
    std::vector<T> dwt(static_cast<size_t>(winograd_weight_grad_size(g)), T(7));
    winograd_weight_grad(g, x.data<T>(), dy.data<T>(), n, block, work.data(), dwt.data());
    return dwt;
  };
  const std::vector<T> one = run(1), two = run(2), all = run(n);
  CHECK(std::memcmp(one.data(), two.data(), one.size() * sizeof(T)) == 0);
  CHECK(std::memcmp(one.data(), all.data(), one.size() * sizeof(T)) == 0);
  // Split into calls (2 + 3 samples, as conv2d's backward calls it block by block): `accumulate`
  // continues the sums; an empty call adds nothing.
  std::vector<T> work(static_cast<size_t>(winograd_work_size(g, n)));
  std::vector<T> split(static_cast<size_t>(winograd_weight_grad_size(g)), T(7));
  winograd_weight_grad(g, x.data<T>(), dy.data<T>(), 2, 2, work.data(), split.data());
  winograd_weight_grad(g, x.data<T>(), dy.data<T>(), 0, 2, work.data(), split.data(), true);
  winograd_weight_grad(g, x.data<T>() + 2 * g.in_size(), dy.data<T>() + 2 * g.out_size(), 3, 3, work.data(),
                       split.data(), true);
  CHECK(std::memcmp(one.data(), split.data(), one.size() * sizeof(T)) == 0);
}

TEMPLATE_TEST_CASE("winograd4: the output has the same bits for any block size", "[layers][conv2d][winograd]", float,
                   double) {
  // Each output is one sum over the channels in order, whatever the block of samples (and so the
  // column block of the product kernel) its tile falls in: 1, 2, 3 and all 7 samples a block, and the
  // samples in two calls (as two lanes run them).
  using T = TestType;
  const DType dtype = std::is_same_v<T, float> ? DType::f32 : DType::f64;
  const Window2d win{3, 3, 1, 1, 1, 1};
  const int64_t c = 5, oc = 11, n = 7;
  const WinogradConv g = WinogradConv::forward_of(image_geometry("test", {c, 8, 9}, win), win, oc, 4);
  const Tensor w = random_tensor({oc, c, 3, 3}, 24, -1.0, 1.0, dtype);
  const Tensor bias = random_tensor({oc}, 25, -1.0, 1.0, dtype);
  const Tensor x = random_tensor({n, c, g.h, g.w}, 26, -1.0, 1.0, dtype);
  std::vector<T> u(static_cast<size_t>(36 * oc * c));
  winograd4_weights(w.data<T>(), oc, c, false, u.data());
  auto run = [&](int64_t block, int64_t split) {
    std::vector<T> work(static_cast<size_t>(winograd4_work_size(g, block)));
    std::vector<T> y(static_cast<size_t>(n * g.out_size()), T(7));
    winograd4_conv(g, u.data(), bias.data<T>(), x.data<T>(), y.data(), split, block, work.data());
    winograd4_conv(g, u.data(), bias.data<T>(), x.data<T>() + split * g.in_size(), y.data() + split * g.out_size(),
                   n - split, block, work.data());
    return y;
  };
  const std::vector<T> one = run(1, 0);
  for (const auto& [block, split] : {std::pair<int64_t, int64_t>{2, 0}, {3, 0}, {n, 0}, {2, 3}, {3, 4}}) {
    INFO("block " << block << ", split after " << split);
    const std::vector<T> other = run(block, split);
    CHECK(std::memcmp(one.data(), other.data(), one.size() * sizeof(T)) == 0);
  }
}
