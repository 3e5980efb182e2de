// maxpool2d / avgpool2d: configuration and the CPU reference, one plane (sample, channel) at a time,
// the planes split among the CpuPool's lanes (planes are independent: the split changes no bit).
// Max forward takes each window's maximum without branches (a data-dependent "is it larger" branch
// mispredicts about half the time on real activations and dominated the layer's time); max backward
// finds the first element of the window equal to the forward output y, which is the window's first
// maximum, and adds dy there (overlapping windows add into the same input element, in the order of
// the outputs). Avg backward spreads dy/divisor over the window.
// Where every window lies inside the image (no padding: AlexNet's and Dettmers' 3x3 stride-2 pooling)
// both max passes run over chunks of one output row with the window offset (i, j) outermost, so that
// the inner loops are vector loops over the output columns (the stride a template constant): the
// forward keeps a running maximum per column, the backward selects per column the window's first
// match by visiting the offsets last to first, then adds dy in the outputs' order.
#include "layers/pool2d.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "framework/core/cpu_pool.h"
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

// Every window lies inside the image (no padding, no ceil_mode): the common case (AlexNet's and
// Dettmers' 3x3 stride-2 pooling), without the per-window clipping.
// (The backward's per-column offsets are 32-bit: planes of 2^31 elements or more take the general path.)
bool windows_inside(const PoolOptions& o, const ImageGeometry& g) {
  return o.window.ph == 0 && o.window.pw == 0 && !o.ceil_mode && g.in_plane() <= INT32_MAX;
}

// Output columns per chunk of the windows-inside loops: their per-column state stays in L1.
constexpr int64_t kChunk = 64;

// Max forward of one plane, every window inside; SW is the column stride (0: read it from win).
template <typename T, int SW>
void max_plane_inside(const ImageGeometry& g, const Window2d& win, const T* plane, T* out) {
  const int64_t sw = SW > 0 ? SW : win.sw;
  T best[kChunk], nan[kChunk];
  for (int64_t oh = 0; oh < g.oh; ++oh) {
    const T* top = plane + oh * win.sh * g.w;
    for (int64_t c0 = 0; c0 < g.ow; c0 += kChunk) {
      const int64_t n = std::min(kChunk, g.ow - c0);
      const T* corner = top + c0 * sw;
      for (int64_t q = 0; q < n; ++q) {
        best[q] = corner[q * sw];
        nan[q] = T(0);
      }
      for (int64_t i = 0; i < win.kh; ++i)
        for (int64_t j = 0; j < win.kw; ++j) {
          const T* at = corner + i * g.w + j;
          for (int64_t q = 0; q < n; ++q) {
            const T v = at[q * sw];
            best[q] = v > best[q] ? v : best[q];  // a select, not a branch
            nan[q] = std::isnan(v) ? T(1) : nan[q];
          }
        }
      T* o = out + oh * g.ow + c0;
      for (int64_t q = 0; q < n; ++q) o[q] = nan[q] != T(0) ? std::numeric_limits<T>::quiet_NaN() : best[q];
    }
  }
}

// Max backward of one plane, every window inside: dx (zeroed) += dy at each window's first maximum.
template <typename T, int SW>
void max_plane_backward_inside(const ImageGeometry& g, const Window2d& win, const T* plane, const T* y, const T* dy,
                               T* dx) {
  const int64_t sw = SW > 0 ? SW : win.sw;
  int32_t first[kChunk];  // offsets in the plane (windows_inside: below 2^31)
  T m[kChunk];
  for (int64_t oh = 0; oh < g.oh; ++oh) {
    const int64_t top = oh * win.sh * g.w;
    for (int64_t c0 = 0; c0 < g.ow; c0 += kChunk) {
      const int64_t n = std::min(kChunk, g.ow - c0);
      for (int64_t q = 0; q < n; ++q) {
        m[q] = y[oh * g.ow + c0 + q];
        first[q] = -1;
      }
      for (int64_t i = win.kh - 1; i >= 0; --i)
        for (int64_t j = win.kw - 1; j >= 0; --j) {
          const int64_t base = top + i * g.w + c0 * sw + j;
          const T* at = plane + base;
          for (int64_t q = 0; q < n; ++q) {
            const T v = at[q * sw];
            const bool match = v == m[q] || (std::isnan(v) && std::isnan(m[q]));  // NaN matches NaN
            first[q] = match ? static_cast<int32_t>(base + q * sw) : first[q];
          }
        }
      const T* d = dy + oh * g.ow + c0;
      for (int64_t q = 0; q < n; ++q)
        if (first[q] >= 0) dx[first[q]] += d[q];
    }
  }
}

// The column stride as a template constant for the strides pooling layers use.
template <typename F>
void with_column_stride(int64_t sw, F&& fn) {
  if (sw == 1) return fn.template operator()<1>();
  if (sw == 2) return fn.template operator()<2>();
  fn.template operator()<0>();
}

template <typename T>
void forward_reference(PoolKind kind, const PoolOptions& o, const ImageGeometry& g, const T* x, T* y, int64_t planes) {
  const Window2d& win = o.window;
  if (kind == PoolKind::max && windows_inside(o, g)) {
    with_column_stride(win.sw, [&]<int SW>() {
      for (int64_t pl = 0; pl < planes; ++pl)
        max_plane_inside<T, SW>(g, win, x + pl * g.in_plane(), y + pl * g.out_plane());
    });
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
  if (kind == PoolKind::max && windows_inside(o, g)) {
    with_column_stride(o.window.sw, [&]<int SW>() {
      for (int64_t pl = 0; pl < planes; ++pl)
        max_plane_backward_inside<T, SW>(g, o.window, x + pl * g.in_plane(), y + pl * g.out_plane(),
                                         dy + pl * g.out_plane(), dx + pl * g.in_plane());
    });
    return;
  }
  for (int64_t pl = 0; pl < planes; ++pl) {
    const T* plane = x + pl * g.in_plane();
    const T* d = dy + pl * g.out_plane();
    const T* m = y + pl * g.out_plane();
    T* out = dx + pl * g.in_plane();
    for (int64_t oh = 0; oh < g.oh; ++oh)
      for (int64_t ow = 0; ow < g.ow; ++ow) {
        const Span s = window_at(g, o, oh, ow);
        const T grad = d[oh * g.ow + ow];
        if (kind == PoolKind::max) {
          const int64_t at = first_index_of(plane, g, s, m[oh * g.ow + ow]);
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

void Pool2d::forward_cpu(Context& ctx, const Tensor& x, Tensor& y, bool) {
  dispatch_float(x.dtype(), [&]<typename T>() {
    ctx.cpu_pool().parallel_for(x.dim(0) * geom_.c, 1, [&](int64_t begin, int64_t end) {
      forward_reference<T>(kind_, opt_, geom_, x.data<T>() + begin * geom_.in_plane(),
                           y.data<T>() + begin * geom_.out_plane(), end - begin);
    });
  });
}

#if QTRAIN_HAS_CUDA
void Pool2d::forward_cuda(Context& ctx, const Tensor& x, Tensor& y, bool) {
  pool2d_forward_cuda(ctx, kind_, opt_, geom_, x, y);
}
#endif

void Pool2d::backward_cpu(Context& ctx, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) {
  dispatch_float(x.dtype(), [&]<typename T>() {
    const int64_t in = geom_.in_plane(), out = geom_.out_plane();
    ctx.cpu_pool().parallel_for(x.dim(0) * geom_.c, 1, [&](int64_t begin, int64_t end) {
      backward_reference<T>(kind_, opt_, geom_, x.data<T>() + begin * in,
                            kind_ == PoolKind::max ? y.data<T>() + begin * out : nullptr, dy.data<T>() + begin * out,
                            dx.data<T>() + begin * in, end - begin);
    });
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
