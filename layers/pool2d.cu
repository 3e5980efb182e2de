// maxpool2d / avgpool2d on CUDA: one thread per output element forward, one thread per input element
// backward. Backward gathers (each input element sums the windows that contain it) instead of
// scattering with atomics, so it is deterministic, and adds in the CPU's order, so it is bitwise equal
// to it. Max backward recomputes each window's first maximum in row-major order: the element the
// CPU finds as the first one equal to the forward output, so ties route to the same element.
#include <cfloat>

#include "framework/core/cuda_context.h"
#include "layers/pool2d.h"

namespace qtrain {
namespace {

constexpr int kThreads = 256;

struct Geo {
  int h, w, oh, ow, kh, kw, sh, sw, ph, pw;
  bool count_include_pad;
};

struct Span {
  int y0, y1, x0, x1, divisor;
};

// The CPU's window_at (pool2d.cpp), line for line.
__device__ Span window_at(const Geo& g, int oh, int ow) {
  int y0 = oh * g.sh - g.ph, x0 = ow * g.sw - g.pw;
  int y1 = min(y0 + g.kh, g.h + g.ph), x1 = min(x0 + g.kw, g.w + g.pw);
  const int padded = (y1 - y0) * (x1 - x0);
  y0 = max(y0, 0);
  x0 = max(x0, 0);
  y1 = min(y1, g.h);
  x1 = min(x1, g.w);
  return {y0, y1, x0, x1, g.count_include_pad ? padded : (y1 - y0) * (x1 - x0)};
}

// The first maximum in row-major order (NaN counts as a maximum): the CPU's max_at value and
// first_index_of position (pool2d.cpp).
__device__ int argmax_at(const float* plane, const Geo& g, const Span& s) {
  int best = -1;
  float best_v = -FLT_MAX;
  for (int iy = s.y0; iy < s.y1; ++iy)
    for (int ix = s.x0; ix < s.x1; ++ix) {
      const float v = plane[iy * g.w + ix];
      if (best < 0 || v > best_v || (isnan(v) && !isnan(best_v))) best = iy * g.w + ix, best_v = v;
    }
  return best;
}

__global__ void pool_forward_kernel(bool is_max, Geo g, const float* __restrict__ x, float* __restrict__ y,
                                    long long n) {
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const int ow = static_cast<int>(i % g.ow), oh = static_cast<int>((i / g.ow) % g.oh);
    const long long plane_index = i / (static_cast<long long>(g.ow) * g.oh);
    const float* plane = x + plane_index * g.h * g.w;
    const Span s = window_at(g, oh, ow);
    if (is_max) {
      const int at = argmax_at(plane, g, s);
      y[i] = at < 0 ? -INFINITY : plane[at];
    } else {
      float sum = 0.0f;
      for (int iy = s.y0; iy < s.y1; ++iy)
        for (int ix = s.x0; ix < s.x1; ++ix) sum += plane[iy * g.w + ix];
      y[i] = s.divisor > 0 ? sum / static_cast<float>(s.divisor) : 0.0f;
    }
  }
}

__global__ void pool_backward_kernel(bool is_max, Geo g, const float* __restrict__ x, const float* __restrict__ dy,
                                     float* __restrict__ dx, long long n) {
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const int ix = static_cast<int>(i % g.w), iy = static_cast<int>((i / g.w) % g.h);
    const long long plane_index = i / (static_cast<long long>(g.w) * g.h);
    const float* plane = x + plane_index * g.h * g.w;
    const float* d = dy + plane_index * g.oh * g.ow;
    // Windows with oh*sh - ph <= iy < oh*sh - ph + kh, i.e. oh in [floor((iy + ph - kh)/sh) + 1, (iy + ph)/sh];
    // a negative numerator truncates toward zero, to a value <= 0 that max(0, .) then clamps.
    const int oh_lo = max(0, (iy + g.ph - g.kh + g.sh) / g.sh), oh_hi = min(g.oh - 1, (iy + g.ph) / g.sh);
    const int ow_lo = max(0, (ix + g.pw - g.kw + g.sw) / g.sw), ow_hi = min(g.ow - 1, (ix + g.pw) / g.sw);
    const int self = iy * g.w + ix;
    float sum = 0.0f;
    for (int oh = oh_lo; oh <= oh_hi; ++oh)
      for (int ow = ow_lo; ow <= ow_hi; ++ow) {
        const Span s = window_at(g, oh, ow);
        if (is_max) {
          if (argmax_at(plane, g, s) == self) sum += d[oh * g.ow + ow];
        } else if (s.divisor > 0) {
          sum += d[oh * g.ow + ow] / static_cast<float>(s.divisor);
        }
      }
    dx[i] = sum;
  }
}

Geo make_geo(const PoolOptions& o, const ImageGeometry& g) {
  const Window2d& w = o.window;
  auto i32 = [](int64_t v) { return checked_int(v, "pooling", "dimension"); };
  return {i32(g.h),  i32(g.w),  i32(g.oh), i32(g.ow), i32(w.kh),          i32(w.kw),
          i32(w.sh), i32(w.sw), i32(w.ph), i32(w.pw), o.count_include_pad};
}

}  // namespace

void pool2d_forward_cuda(Context& ctx, PoolKind kind, const PoolOptions& opt, const ImageGeometry& g, const Tensor& x,
                         Tensor& y) {
  const long long n = y.numel();
  if (n == 0) return;
  pool_forward_kernel<<<blocks_for(n, kThreads), kThreads, 0, ctx.cuda().stream>>>(
      kind == PoolKind::max, make_geo(opt, g), x.data<float>(), y.data<float>(), n);
  CUDA_CHECK(cudaGetLastError());
}

void pool2d_backward_cuda(Context& ctx, PoolKind kind, const PoolOptions& opt, const ImageGeometry& g, const Tensor& x,
                          const Tensor& dy, Tensor& dx) {
  const long long n = dx.numel();
  if (n == 0) return;
  pool_backward_kernel<<<blocks_for(n, kThreads), kThreads, 0, ctx.cuda().stream>>>(
      kind == PoolKind::max, make_geo(opt, g), x.data<float>(), dy.data<float>(), dx.data<float>(), n);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace qtrain
