// lrn: configuration and the CPU reference, one sample (C, P = H*W) at a time so that every inner
// loop runs over the P positions of a channel and vectorizes.
//   forward   D = k + s * window_sum(x^2) over channels (s = alpha/size), y = x D^-beta
//   backward  dx[j] = dy[j] D[j]^-beta + 2 s x[j] sum_{i : j in window(i)} g[i],  g = -beta dy y / D
// window(i) = [i - size/2, i + (size-1)/2], so the channels i whose window holds j are
// [j - (size-1)/2, j + size/2].
#include "layers/lrn.h"

#include <algorithm>
#include <cmath>

#include "layers/conv_geometry.h"
#include "layers/dispatch.h"
#include "layers/vector_math.h"

namespace qtrain {

using layer_detail::dispatch_float;

namespace {

// out[c] = sum_{c' = c - before}^{c + after} in[c'] over rows of length p (rows outside [0, C) add 0).
template <typename T>
void channel_window_sum(const T* __restrict in, T* __restrict out, int64_t channels, int64_t p, int64_t before,
                        int64_t after) {
  for (int64_t c = 0; c < channels; ++c) {
    T* __restrict o = out + c * p;
    std::fill_n(o, p, T(0));
    const int64_t lo = std::max<int64_t>(0, c - before), hi = std::min(channels - 1, c + after);
    for (int64_t cc = lo; cc <= hi; ++cc) {
      const T* __restrict r = in + cc * p;
      for (int64_t i = 0; i < p; ++i) o[i] += r[i];
    }
  }
}

// D (C, P) of one sample; sq is scratch of the same size.
template <typename T>
void denominators(const LrnOptions& o, const T* __restrict x, T* __restrict sq, T* __restrict d, int64_t channels,
                  int64_t p) {
  for (int64_t i = 0; i < channels * p; ++i) sq[i] = x[i] * x[i];
  channel_window_sum(sq, d, channels, p, o.size / 2, (o.size - 1) / 2);
  const T k = static_cast<T>(o.k), s = static_cast<T>(o.alpha / static_cast<double>(o.size));
  for (int64_t i = 0; i < channels * p; ++i) d[i] = k + s * d[i];
}

template <typename T>
void forward_reference(const LrnOptions& o, const T* x, T* y, int64_t batch, int64_t channels, int64_t p, T* scratch) {
  T* sq = scratch;
  T* d = scratch + channels * p;
  const T beta = static_cast<T>(o.beta);
  for (int64_t b = 0; b < batch; ++b) {
    const T* xs = x + b * channels * p;
    T* ys = y + b * channels * p;
    denominators(o, xs, sq, d, channels, p);
    for (int64_t i = 0; i < channels * p; ++i) ys[i] = xs[i] * vector_math::pow_of(d[i], -beta);
  }
}

template <typename T>
void backward_reference(const LrnOptions& o, const T* x, const T* dy, T* dx, int64_t batch, int64_t channels, int64_t p,
                        T* scratch) {
  T* sq = scratch;  // then g
  T* d = scratch + channels * p;
  T* acc = scratch + 2 * channels * p;
  const T beta = static_cast<T>(o.beta), two_s = static_cast<T>(2 * o.alpha / static_cast<double>(o.size));
  for (int64_t b = 0; b < batch; ++b) {
    const T* xs = x + b * channels * p;
    const T* ds = dy + b * channels * p;
    T* out = dx + b * channels * p;
    denominators(o, xs, sq, d, channels, p);
    T* g = sq;
    for (int64_t i = 0; i < channels * p; ++i) {
      const T scale = vector_math::pow_of(d[i], -beta);
      out[i] = ds[i] * scale;
      g[i] = -beta * ds[i] * xs[i] * scale / d[i];  // -beta dy y / D
    }
    channel_window_sum(g, acc, channels, p, (o.size - 1) / 2, o.size / 2);
    for (int64_t i = 0; i < channels * p; ++i) out[i] += two_s * xs[i] * acc[i];
  }
}

}  // namespace

Lrn::Lrn(LrnOptions options) : opt_(options) {
  QT_CHECK(opt_.size >= 1, "lrn: size must be >= 1, got {}", opt_.size);
  QT_CHECK(opt_.k > 0 || opt_.alpha > 0, "lrn: k and alpha cannot both be 0");
}

Shape Lrn::configure(const Shape& input) {
  check_image_input(describe(), input);
  return input;
}

void Lrn::forward_cpu(Context&, const Tensor& x, Tensor& y, bool) {
  const int64_t c = input_shape()[0], p = input_shape()[1] * input_shape()[2];
  dispatch_float(x.dtype(), [&]<typename T>() {
    forward_reference<T>(opt_, x.data<T>(), y.data<T>(), x.dim(0), c, p,
                         scratch_.get<T>(static_cast<size_t>(2 * c * p)));
  });
}

#if QTRAIN_HAS_CUDA
void Lrn::forward_cuda(Context& ctx, const Tensor& x, Tensor& y, bool) { lrn_forward_cuda(ctx, opt_, x, y); }
#endif

void Lrn::backward_cpu(Context&, const Tensor& x, const Tensor&, const Tensor& dy, Tensor& dx) {
  const int64_t c = input_shape()[0], p = input_shape()[1] * input_shape()[2];
  dispatch_float(x.dtype(), [&]<typename T>() {
    backward_reference<T>(opt_, x.data<T>(), dy.data<T>(), dx.data<T>(), x.dim(0), c, p,
                          scratch_.get<T>(static_cast<size_t>(3 * c * p)));
  });
}

#if QTRAIN_HAS_CUDA
void Lrn::backward_cuda(Context& ctx, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) {
  lrn_backward_cuda(ctx, opt_, x, y, dy, dx);
}
#endif

std::unique_ptr<Layer> make_lrn(ConfigNode& cfg) {
  LrnOptions o;
  if (!cfg.has("size")) cfg.fail("size", "is required (the number of neighbouring channels, e.g. 5)");
  o.size = cfg.get_int("size", 5, 1, 1 << 16);
  o.alpha = cfg.get_double("alpha", o.alpha, 0.0, 1e30);
  o.beta = cfg.get_double("beta", o.beta, 0.0, 1e30);
  o.k = cfg.get_double("k", o.k, 0.0, 1e30);
  if (o.k == 0 && o.alpha == 0) cfg.fail("k", "k and alpha cannot both be 0 (the denominator would be 0)");
  cfg.finish();
  return std::make_unique<Lrn>(o);
}

}  // namespace qtrain
