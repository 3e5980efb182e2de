// contrast_norm on CUDA: the CPU reference's formulas (contrast_norm.h/.cpp) as element-wise kernels,
// each window sum a direct loop over the size x size neighbourhood (size is small: 3..9), in the
// same clipped window as the CPU. Four passes, each reading what the previous wrote:
//   forward   d = x - box(x)/size^2;  y = x (k + s box(d^2))^-beta
//   backward  d;  D and g = -beta dy x D^(-beta-1);  h = 2 s d box'(g);  dx = dy D^-beta + h - box'(h)/size^2
// box' is the mirrored (adjoint) window. No atomics: every output element is written by one thread.
#include "framework/core/cuda_context.h"
#include "layers/contrast_norm.h"

namespace qtrain {
namespace {

constexpr int kThreads = 256;

struct Plane {
  int h, w;
  int before, after;  // the forward window of p is [p - before, p + after] in both axes
};

// Sum of f(v[q]) over the window [p - lo_off, p + hi_off] of element i's plane, clipped.
template <typename F>
__device__ float window_sum(const float* __restrict__ v, long long i, const Plane& g, int lo_off, int hi_off, F f) {
  const long long n = static_cast<long long>(g.h) * g.w;
  const float* plane = v + (i / n) * n;
  const int p = static_cast<int>(i % n), y = p / g.w, x = p % g.w;
  const int y0 = max(0, y - lo_off), y1 = min(g.h - 1, y + hi_off);
  const int x0 = max(0, x - lo_off), x1 = min(g.w - 1, x + hi_off);
  float s = 0.0f;
  for (int yy = y0; yy <= y1; ++yy)
    for (int xx = x0; xx <= x1; ++xx) s += f(plane[yy * g.w + xx]);
  return s;
}

struct Identity {
  __device__ float operator()(float v) const { return v; }
};
struct Square {
  __device__ float operator()(float v) const { return v * v; }
};

#define QT_GRID_STRIDE(i, n)                                                                 \
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<long long>(gridDim.x) * blockDim.x)

__global__ void centered_kernel(Plane g, float inv_area, const float* __restrict__ x, float* __restrict__ d,
                                long long n) {
  QT_GRID_STRIDE(i, n) { d[i] = x[i] - window_sum(x, i, g, g.before, g.after, Identity{}) * inv_area; }
}

__global__ void output_kernel(Plane g, float k, float s, float beta, const float* __restrict__ x,
                              const float* __restrict__ d, float* __restrict__ y, long long n) {
  QT_GRID_STRIDE(i, n) {
    const float den = k + s * window_sum(d, i, g, g.before, g.after, Square{});
    y[i] = x[i] * powf(den, -beta);
  }
}

// den = D; g = -beta dy y / D = -beta dy x D^(-beta-1)
__global__ void denominator_grad_kernel(Plane g, float k, float s, float beta, const float* __restrict__ x,
                                        const float* __restrict__ d, const float* __restrict__ dy,
                                        float* __restrict__ den, float* __restrict__ grad, long long n) {
  QT_GRID_STRIDE(i, n) {
    const float dd = k + s * window_sum(d, i, g, g.before, g.after, Square{});
    den[i] = dd;
    grad[i] = -beta * dy[i] * x[i] * powf(dd, -beta) / dd;
  }
}

// h = 2 s d box'(g): dL/dd
__global__ void centered_grad_kernel(Plane g, float two_s, const float* __restrict__ d, const float* __restrict__ grad,
                                     float* __restrict__ h, long long n) {
  QT_GRID_STRIDE(i, n) { h[i] = two_s * d[i] * window_sum(grad, i, g, g.after, g.before, Identity{}); }
}

__global__ void input_grad_kernel(Plane g, float beta, float inv_area, const float* __restrict__ dy,
                                  const float* __restrict__ den, const float* __restrict__ h, float* __restrict__ dx,
                                  long long n) {
  QT_GRID_STRIDE(i, n) {
    dx[i] = dy[i] * powf(den[i], -beta) + h[i] - window_sum(h, i, g, g.after, g.before, Identity{}) * inv_area;
  }
}

#undef QT_GRID_STRIDE

Plane make_plane(const ContrastNormOptions& o, const Tensor& x) {
  QT_CHECK(x.ndim() == 4 && x.dim(2) <= 0x7fffffffLL && x.dim(3) <= 0x7fffffffLL,
           "contrast_norm: CUDA input of shape {} is not (B, C, H, W)", shape_str(x.shape()));
  const int size = static_cast<int>(o.size);
  return {static_cast<int>(x.dim(2)), static_cast<int>(x.dim(3)), size / 2, size - 1 - size / 2};
}

float* ensure_scratch(Tensor& scratch, int64_t elements, Device device) {
  if (!scratch.defined() || scratch.numel() < elements) scratch = Tensor::empty({elements}, DType::f32, device);
  return scratch.data<float>();
}

}  // namespace

void contrast_norm_forward_cuda(Context& ctx, const ContrastNormOptions& opt, const Tensor& x, Tensor& y,
                                Tensor& scratch) {
  const long long n = x.numel();
  if (n == 0) return;
  const Plane g = make_plane(opt, x);
  cudaStream_t stream = ctx.cuda().stream;
  if (!scratch.defined() || scratch.numel() < n) CUDA_CHECK(cudaStreamSynchronize(stream));  // old one may be in use
  float* d = ensure_scratch(scratch, n, x.device());
  const float inv_area = 1.0f / static_cast<float>(opt.size * opt.size);
  const int blocks = blocks_for(n, kThreads);
  centered_kernel<<<blocks, kThreads, 0, stream>>>(g, inv_area, x.data<float>(), d, n);
  CUDA_CHECK(cudaGetLastError());
  output_kernel<<<blocks, kThreads, 0, stream>>>(g, static_cast<float>(opt.k), static_cast<float>(opt.alpha) * inv_area,
                                                 static_cast<float>(opt.beta), x.data<float>(), d, y.data<float>(), n);
  CUDA_CHECK(cudaGetLastError());
}

void contrast_norm_backward_cuda(Context& ctx, const ContrastNormOptions& opt, const Tensor& x, const Tensor& dy,
                                 Tensor& dx, Tensor& scratch) {
  const long long n = x.numel();
  if (n == 0) return;
  const Plane g = make_plane(opt, x);
  cudaStream_t stream = ctx.cuda().stream;
  if (!scratch.defined() || scratch.numel() < 4 * n) CUDA_CHECK(cudaStreamSynchronize(stream));
  float* d = ensure_scratch(scratch, 4 * n, x.device());
  float* den = d + n;
  float* grad = d + 2 * n;
  float* h = d + 3 * n;
  const float inv_area = 1.0f / static_cast<float>(opt.size * opt.size);
  const float s = static_cast<float>(opt.alpha) * inv_area, beta = static_cast<float>(opt.beta);
  const int blocks = blocks_for(n, kThreads);
  centered_kernel<<<blocks, kThreads, 0, stream>>>(g, inv_area, x.data<float>(), d, n);
  CUDA_CHECK(cudaGetLastError());
  denominator_grad_kernel<<<blocks, kThreads, 0, stream>>>(g, static_cast<float>(opt.k), s, beta, x.data<float>(), d,
                                                           dy.data<float>(), den, grad, n);
  CUDA_CHECK(cudaGetLastError());
  centered_grad_kernel<<<blocks, kThreads, 0, stream>>>(g, 2.0f * s, d, grad, h, n);
  CUDA_CHECK(cudaGetLastError());
  input_grad_kernel<<<blocks, kThreads, 0, stream>>>(g, beta, inv_area, dy.data<float>(), den, h, dx.data<float>(), n);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace qtrain
