// maxpool2d / avgpool2d: configuration and the CPU reference, one plane (sample, channel) at a time.
// Max forward takes each window's maximum without branches (a data-dependent "is it larger" branch
// mispredicts about half the time on real activations and dominated the layer's time); max backward
// finds the first element of the window equal to the forward output y, which is the window's first
// maximum, and adds dy there (overlapping windows add into the same input element). Avg backward
// spreads dy/divisor over the window.
#include "layers/pool2d.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "layers/dispatch.h"

namespace qtrain {

using layer_detail::dispatch_float;

namespace {

// One window's bounds: rows [y0, y1) and columns [x0, x1) clipped to the input, and PyTorch's
// average divisor.
struct Span {
  int64_t y0, y1, x0, x1;
  int64_t divisor;
};

Span window_at(const ImageGeometry& g, const PoolOptions& o, int64_t oh, int64_t ow) {
  const Window2d& w = o.window;
  int64_t y0 = oh * w.sh - w.ph, x0 = ow * w.sw - w.pw;
  int64_t y1 = std::min(y0 + w.kh, g.h + w.ph), x1 = std::min(x0 + w.kw, g.w + w.pw);
  const int64_t padded = (y1 - y0) * (x1 - x0);
  y0 = std::max<int64_t>(y0, 0);
  x0 = std::max<int64_t>(x0, 0);
  y1 = std::min(y1, g.h);
  x1 = std::min(x1, g.w);
  return {y0, y1, x0, x1, o.count_include_pad ? padded : (y1 - y0) * (x1 - x0)};
}

// The window's maximum; NaN when the window holds a NaN (PyTorch's rule), -inf for an empty window.
template <typename T>
T max_at(const T* plane, const ImageGeometry& g, const Span& s) {
  T best = -std::numeric_limits<T>::infinity();
  bool nan = false;
  for (int64_t iy = s.y0; iy < s.y1; ++iy) {
    const T* row = plane + iy * g.w;
    for (int64_t ix = s.x0; ix < s.x1; ++ix) {
      const T v = row[ix];
      best = v > best ? v : best;  // a select, not a branch
      nan |= std::isnan(v);
    }
  }
  return nan ? std::numeric_limits<T>::quiet_NaN() : best;
}

// Index (in the plane) of the window's first element equal to its maximum m (NaN matches NaN).
template <typename T>
int64_t first_index_of(const T* plane, const ImageGeometry& g, const Span& s, T m) {
  const bool nan = std::isnan(m);
  for (int64_t iy = s.y0; iy < s.y1; ++iy)
    for (int64_t ix = s.x0; ix < s.x1; ++ix) {
      const T v = plane[iy * g.w + ix];
      if (v == m || (nan && std::isnan(v))) return iy * g.w + ix;
    }
  return -1;
}

// first_index_of for a window known to lie inside the image.
template <typename T>
int64_t first_index_inside(const T* plane, const ImageGeometry& g, const Window2d& win, int64_t oh, int64_t ow, T m) {
  const bool nan = std::isnan(m);
  const int64_t y0 = oh * win.sh, x0 = ow * win.sw;
  for (int64_t i = 0; i < win.kh; ++i) {
    const T* row = plane + (y0 + i) * g.w + x0;
    for (int64_t j = 0; j < win.kw; ++j)
      if (row[j] == m || (nan && std::isnan(row[j]))) return (y0 + i) * g.w + x0 + j;
  }
  return -1;
}

// Every window lies inside the image (no padding, no ceil_mode): the common case (AlexNet's and
// Dettmers' 3x3 stride-2 pooling), without the per-window clipping.
bool windows_inside(const PoolOptions& o) { return o.window.ph == 0 && o.window.pw == 0 && !o.ceil_mode; }

template <typename T>
void forward_reference(PoolKind kind, const PoolOptions& o, const ImageGeometry& g, const T* x, T* y, int64_t planes) {
  const Window2d& win = o.window;
  if (kind == PoolKind::max && windows_inside(o)) {
    for (int64_t pl = 0; pl < planes; ++pl) {
      const T* plane = x + pl * g.in_plane();
      T* out = y + pl * g.out_plane();
      for (int64_t oh = 0; oh < g.oh; ++oh) {
        const T* top = plane + oh * win.sh * g.w;
        for (int64_t ow = 0; ow < g.ow; ++ow) {
          const T* corner = top + ow * win.sw;
          T best = corner[0];
          bool nan = false;
          for (int64_t i = 0; i < win.kh; ++i)
            for (int64_t j = 0; j < win.kw; ++j) {
              const T v = corner[i * g.w + j];
              best = v > best ? v : best;
              nan |= std::isnan(v);
            }
          out[oh * g.ow + ow] = nan ? std::numeric_limits<T>::quiet_NaN() : best;
        }
      }
    }
    return;
  }
  for (int64_t pl = 0; pl < planes; ++pl) {
    const T* plane = x + pl * g.in_plane();
    T* out = y + pl * g.out_plane();
    for (int64_t oh = 0; oh < g.oh; ++oh)
      for (int64_t ow = 0; ow < g.ow; ++ow) {
        const Span s = window_at(g, o, oh, ow);
        if (kind == PoolKind::max) {
          out[oh * g.ow + ow] = max_at(plane, g, s);
        } else {
          T sum = 0;
          for (int64_t iy = s.y0; iy < s.y1; ++iy)
            for (int64_t ix = s.x0; ix < s.x1; ++ix) sum += plane[iy * g.w + ix];
          out[oh * g.ow + ow] = s.divisor > 0 ? sum / static_cast<T>(s.divisor) : T(0);
        }
      }
  }
}

// y is the forward output for x: for max, it names each window's maximum.
template <typename T>
void backward_reference(PoolKind kind, const PoolOptions& o, const ImageGeometry& g, const T* x, const T* y,
                        const T* dy, T* dx, int64_t planes) {
  std::fill_n(dx, planes * g.in_plane(), T(0));
  const bool max_inside = kind == PoolKind::max && windows_inside(o);
  for (int64_t pl = 0; pl < planes; ++pl) {
    const T* plane = x + pl * g.in_plane();
    const T* d = dy + pl * g.out_plane();
    const T* m = y + pl * g.out_plane();
    T* out = dx + pl * g.in_plane();
    for (int64_t oh = 0; oh < g.oh; ++oh)
      for (int64_t ow = 0; ow < g.ow; ++ow) {
        const Span s = max_inside ? Span{} : window_at(g, o, oh, ow);
        const T grad = d[oh * g.ow + ow];
        if (kind == PoolKind::max) {
          const int64_t at = max_inside ? first_index_inside(plane, g, o.window, oh, ow, m[oh * g.ow + ow])
                                        : first_index_of(plane, g, s, m[oh * g.ow + ow]);
          if (at >= 0) out[at] += grad;
        } else if (s.divisor > 0) {
          const T share = grad / static_cast<T>(s.divisor);
          for (int64_t iy = s.y0; iy < s.y1; ++iy)
            for (int64_t ix = s.x0; ix < s.x1; ++ix) out[iy * g.w + ix] += share;
        }
      }
  }
}

}  // namespace

Pool2d::Pool2d(PoolKind kind, PoolOptions options) : kind_(kind), opt_(options) {
  const Window2d& w = opt_.window;
  QT_CHECK(w.kh > 0 && w.kw > 0 && w.sh > 0 && w.sw > 0 && w.ph >= 0 && w.pw >= 0,
           "{}: invalid window kernel [{}, {}] stride [{}, {}] padding [{}, {}]", type(), w.kh, w.kw, w.sh, w.sw, w.ph,
           w.pw);
}

Shape Pool2d::configure(const Shape& input) {
  geom_ = image_geometry(describe(), input, opt_.window, opt_.ceil_mode, /*pad_at_most_half=*/true);
  return {geom_.c, geom_.oh, geom_.ow};
}

void Pool2d::forward_cpu(Context&, const Tensor& x, Tensor& y, bool) {
  dispatch_float(x.dtype(), [&]<typename T>() {
    forward_reference<T>(kind_, opt_, geom_, x.data<T>(), y.data<T>(), x.dim(0) * geom_.c);
  });
}

#if QTRAIN_HAS_CUDA
void Pool2d::forward_cuda(Context& ctx, const Tensor& x, Tensor& y, bool) {
  pool2d_forward_cuda(ctx, kind_, opt_, geom_, x, y);
}
#endif

void Pool2d::backward_cpu(Context&, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) {
  dispatch_float(x.dtype(), [&]<typename T>() {
    backward_reference<T>(kind_, opt_, geom_, x.data<T>(), kind_ == PoolKind::max ? y.data<T>() : nullptr, dy.data<T>(),
                          dx.data<T>(), x.dim(0) * geom_.c);
  });
}

#if QTRAIN_HAS_CUDA
void Pool2d::backward_cuda(Context& ctx, const Tensor& x, const Tensor&, const Tensor& dy, Tensor& dx) {
  pool2d_backward_cuda(ctx, kind_, opt_, geom_, x, dy, dx);
}
#endif

namespace {

PoolOptions read_pool_options(ConfigNode& cfg, bool avg) {
  PoolOptions o;
  o.window = read_window(cfg, {-1, -1});  // stride defaults to the kernel
  o.ceil_mode = cfg.get<bool>("ceil_mode", false);
  if (avg) o.count_include_pad = cfg.get<bool>("count_include_pad", true);
  cfg.finish();
  return o;
}

}  // namespace

std::unique_ptr<Layer> make_maxpool2d(ConfigNode& cfg) {
  return std::make_unique<Pool2d>(PoolKind::max, read_pool_options(cfg, false));
}
std::unique_ptr<Layer> make_avgpool2d(ConfigNode& cfg) {
  return std::make_unique<Pool2d>(PoolKind::avg, read_pool_options(cfg, true));
}

}  // namespace qtrain
