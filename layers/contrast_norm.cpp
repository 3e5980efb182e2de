// contrast_norm: configuration and the CPU reference, one (sample, channel) plane at a time, the
// planes split among the CpuPool's lanes (each lane with its own scratch; planes are independent, so
// the split changes no bit). The window sums are separable sliding box sums (a row pass, then a column pass), O(1) per
// element.
//   forward   m = box(x)/size^2, d = x - m, D = k + s box(d^2) (s = alpha/size^2), y = x D^-beta
//   backward  with g = -beta dy y / D (dL/dD) and the adjoint box box' (window mirrored):
//             dL/dd = 2 s d box'(g) =: h,  dx = dy D^-beta + h - box'(h)/size^2
#include "layers/contrast_norm.h"

#include <algorithm>
#include <cmath>

#include "framework/core/cpu_pool.h"
#include "layers/conv_geometry.h"
#include "layers/dispatch.h"
#include "layers/vector_math.h"

namespace qtrain {

using layer_detail::dispatch_float;

namespace {

// out(y, x) = sum of in(y', x') for y' in [y - before, y + after], x' likewise, clipped to (h, w).
// tmp holds h*w elements. Both passes are sliding sums (add the element entering the window,
// subtract the one leaving it): O(1) per element whatever the window size; the column pass slides
// whole rows, so its inner loops are unit-stride vector loops over x.
template <typename T>
void box_sum(const T* __restrict in, T* __restrict out, T* __restrict tmp, int64_t h, int64_t w, int64_t before,
             int64_t after) {
  for (int64_t y = 0; y < h; ++y) {
    const T* __restrict row = in + y * w;
    T* __restrict t = tmp + y * w;
    T s = 0;
    for (int64_t x = 0; x <= std::min(after, w - 1); ++x) s += row[x];
    t[0] = s;
    for (int64_t x = 1; x < w; ++x) {
      if (x + after < w) s += row[x + after];
      if (x - before - 1 >= 0) s -= row[x - before - 1];
      t[x] = s;
    }
  }
  T* __restrict o = out;
  std::fill_n(o, w, T(0));
  for (int64_t yy = 0; yy <= std::min(after, h - 1); ++yy) {
    const T* __restrict t = tmp + yy * w;
    for (int64_t x = 0; x < w; ++x) o[x] += t[x];
  }
  for (int64_t y = 1; y < h; ++y) {
    const T* __restrict prev = out + (y - 1) * w;
    T* __restrict cur = out + y * w;
    const T* __restrict enter = y + after < h ? tmp + (y + after) * w : nullptr;
    const T* __restrict leave = y - before - 1 >= 0 ? tmp + (y - before - 1) * w : nullptr;
    if (enter && leave) {
      for (int64_t x = 0; x < w; ++x) cur[x] = prev[x] + enter[x] - leave[x];
    } else if (enter) {
      for (int64_t x = 0; x < w; ++x) cur[x] = prev[x] + enter[x];
    } else if (leave) {
      for (int64_t x = 0; x < w; ++x) cur[x] = prev[x] - leave[x];
    } else {
      std::copy_n(prev, w, cur);
    }
  }
}

// d and D of one plane. buf holds 2 planes of scratch.
template <typename T>
void centered_and_denominator(const ContrastNormOptions& o, const T* x, T* d, T* den, T* buf, int64_t h, int64_t w) {
  const int64_t n = h * w, before = o.size / 2, after = o.size - 1 - o.size / 2;
  const T inv_area = T(1) / static_cast<T>(o.size * o.size);
  const T k = static_cast<T>(o.k), s = static_cast<T>(o.alpha) * inv_area;
  box_sum(x, d, buf, h, w, before, after);
  for (int64_t i = 0; i < n; ++i) d[i] = x[i] - d[i] * inv_area;
  T* sq = buf + n;
  for (int64_t i = 0; i < n; ++i) sq[i] = d[i] * d[i];
  box_sum(sq, den, buf, h, w, before, after);
  for (int64_t i = 0; i < n; ++i) den[i] = k + s * den[i];
}

template <typename T>
void forward_reference(const ContrastNormOptions& o, const T* x, T* y, int64_t planes, int64_t h, int64_t w,
                       T* scratch) {
  const int64_t n = h * w;
  T* d = scratch;
  T* den = scratch + n;
  T* buf = scratch + 2 * n;
  const T beta = static_cast<T>(o.beta);
  for (int64_t pl = 0; pl < planes; ++pl) {
    const T* xs = x + pl * n;
    T* ys = y + pl * n;
    centered_and_denominator(o, xs, d, den, buf, h, w);
    for (int64_t i = 0; i < n; ++i) ys[i] = xs[i] * vector_math::pow_of(den[i], -beta);
  }
}

template <typename T>
void backward_reference(const ContrastNormOptions& o, const T* x, const T* dy, T* dx, int64_t planes, int64_t h,
                        int64_t w, T* scratch) {
  const int64_t n = h * w, before = o.size / 2, after = o.size - 1 - o.size / 2;
  T* d = scratch;
  T* den = scratch + n;
  T* buf = scratch + 2 * n;  // 2 planes
  T* g = scratch + 4 * n;
  T* acc = scratch + 5 * n;
  const T beta = static_cast<T>(o.beta), inv_area = T(1) / static_cast<T>(o.size * o.size);
  const T two_s = 2 * static_cast<T>(o.alpha) * inv_area;
  for (int64_t pl = 0; pl < planes; ++pl) {
    const T* xs = x + pl * n;
    const T* ds = dy + pl * n;
    T* out = dx + pl * n;
    centered_and_denominator(o, xs, d, den, buf, h, w);
    for (int64_t i = 0; i < n; ++i) {
      const T scale = vector_math::pow_of(den[i], -beta);
      out[i] = ds[i] * scale;
      g[i] = -beta * ds[i] * xs[i] * scale / den[i];
    }
    // The adjoint of a window [p - before, p + after] is the window [q - after, q + before].
    box_sum(g, acc, buf, h, w, after, before);
    for (int64_t i = 0; i < n; ++i) g[i] = two_s * d[i] * acc[i];  // h = dL/dd
    box_sum(g, acc, buf, h, w, after, before);
    for (int64_t i = 0; i < n; ++i) out[i] += g[i] - acc[i] * inv_area;
  }
}

// Calls fn(first plane, planes, lane's scratch) on the pool's lanes with contiguous ranges of the
// planes; each lane's scratch holds per_lane elements of T.
template <typename T, typename F>
void for_plane_ranges(CpuPool& pool, CpuScratch& scratch, int64_t planes, int64_t per_lane, F&& fn) {
  T* all = scratch.get<T>(static_cast<size_t>(pool.lanes() * per_lane));
  pool.parallel_for_lanes(planes, 1,
                          [&](int lane, int64_t begin, int64_t end) { fn(begin, end - begin, all + lane * per_lane); });
}

}  // namespace

ContrastNorm::ContrastNorm(ContrastNormOptions options) : opt_(options) {
  QT_CHECK(opt_.size >= 1, "contrast_norm: size must be >= 1, got {}", opt_.size);
}

Shape ContrastNorm::configure(const Shape& input) {
  check_image_input(describe(), input);
  return input;
}

void ContrastNorm::forward_cpu(Context& ctx, const Tensor& x, Tensor& y, bool) {
  const int64_t h = input_shape()[1], w = input_shape()[2], n = h * w;
  dispatch_float(x.dtype(), [&]<typename T>() {
    for_plane_ranges<T>(
        ctx.cpu_pool(), scratch_, x.dim(0) * input_shape()[0], 4 * n, [&](int64_t first, int64_t planes, T* scratch) {
          forward_reference<T>(opt_, x.data<T>() + first * n, y.data<T>() + first * n, planes, h, w, scratch);
        });
  });
}

#if QTRAIN_HAS_CUDA
void ContrastNorm::forward_cuda(Context& ctx, const Tensor& x, Tensor& y, bool) {
  contrast_norm_forward_cuda(ctx, opt_, x, y, device_scratch_);
}
#endif

void ContrastNorm::backward_cpu(Context& ctx, const Tensor& x, const Tensor&, const Tensor& dy, Tensor& dx) {
  const int64_t h = input_shape()[1], w = input_shape()[2], n = h * w;
  dispatch_float(x.dtype(), [&]<typename T>() {
    for_plane_ranges<T>(ctx.cpu_pool(), scratch_, x.dim(0) * input_shape()[0], 6 * n,
                        [&](int64_t first, int64_t planes, T* scratch) {
                          backward_reference<T>(opt_, x.data<T>() + first * n, dy.data<T>() + first * n,
                                                dx.data<T>() + first * n, planes, h, w, scratch);
                        });
  });
}

#if QTRAIN_HAS_CUDA
void ContrastNorm::backward_cuda(Context& ctx, const Tensor& x, const Tensor&, const Tensor& dy, Tensor& dx) {
  contrast_norm_backward_cuda(ctx, opt_, x, dy, dx, device_scratch_);
}
#endif

std::unique_ptr<Layer> make_contrast_norm(ConfigNode& cfg) {
  ContrastNormOptions o;
  if (!cfg.has("size")) cfg.fail("size", "is required (the side of the square window, e.g. 9)");
  o.size = cfg.get_int("size", 9, 1, 1 << 12);
  o.alpha = cfg.get_double("alpha", o.alpha, 0.0, 1e30);
  o.beta = cfg.get_double("beta", o.beta, 0.0, 1e30);
  o.k = cfg.get_double("k", o.k, 0.0, 1e30, /*min_exclusive=*/true);
  cfg.finish();
  return std::make_unique<ContrastNorm>(o);
}

}  // namespace qtrain
