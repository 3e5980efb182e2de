// Activations on CUDA: one grid-stride kernel per direction, templated on the kind so each
// instantiation is branch-free. expf/tanhf (not the __expf intrinsics) keep the results within a few
// ulps of the CPU reference (the parity test's tolerance relies on it).
#include "framework/core/cuda_context.h"
#include "layers/activation.h"

namespace qtrain {
namespace {

constexpr int kThreads = 256;

template <ActivationKind K>
__device__ __forceinline__ float activate(float x) {
  if constexpr (K == ActivationKind::relu)
    return x > 0.0f ? x : 0.0f;
  else if constexpr (K == ActivationKind::tanh)
    return tanhf(x);
  else
    return 1.0f / (1.0f + expf(-x));
}

// The derivative from the output y (see activation.h).
template <ActivationKind K>
__device__ __forceinline__ float derivative_times(float y, float dy) {
  if constexpr (K == ActivationKind::relu)
    return y > 0.0f ? dy : 0.0f;
  else if constexpr (K == ActivationKind::tanh)
    return dy * (1.0f - y * y);
  else
    return dy * (y * (1.0f - y));
}

template <ActivationKind K>
__global__ void forward_kernel(const float* __restrict__ x, float* __restrict__ y, long long n) {
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x)
    y[i] = activate<K>(x[i]);
}

template <ActivationKind K>
__global__ void backward_kernel(const float* __restrict__ y, const float* __restrict__ dy, float* __restrict__ dx,
                                long long n) {
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x)
    dx[i] = derivative_times<K>(y[i], dy[i]);
}

template <ActivationKind K>
void launch_forward(const Tensor& x, Tensor& y, cudaStream_t stream) {
  const long long n = x.numel();
  forward_kernel<K><<<blocks_for(n, kThreads), kThreads, 0, stream>>>(x.data<float>(), y.data<float>(), n);
  CUDA_CHECK(cudaGetLastError());
}

template <ActivationKind K>
void launch_backward(const Tensor& y, const Tensor& dy, Tensor& dx, cudaStream_t stream) {
  const long long n = y.numel();
  backward_kernel<K>
      <<<blocks_for(n, kThreads), kThreads, 0, stream>>>(y.data<float>(), dy.data<float>(), dx.data<float>(), n);
  CUDA_CHECK(cudaGetLastError());
}

// relu in place (the relu layer's rule: a NaN becomes 0) for the layers that fuse it: no __restrict__,
// the kernel reads and writes one tensor.
__global__ void relu_in_place_kernel(float* y, long long n) {
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const float v = y[i];
    y[i] = v > 0.0f ? v : 0.0f;
  }
}

}  // namespace

void relu_in_place_cuda(Context& ctx, Tensor& y) {
  const long long n = y.numel();
  if (n == 0) return;
  relu_in_place_kernel<<<blocks_for(n, kThreads), kThreads, 0, ctx.cuda().stream>>>(y.data<float>(), n);
  CUDA_CHECK(cudaGetLastError());
}

void activation_forward_cuda(Context& ctx, ActivationKind kind, const Tensor& x, Tensor& y) {
  QT_CHECK(x.numel() == y.numel(), "{}: x has {} elements, y {}", activation_name(kind), x.numel(), y.numel());
  if (x.numel() == 0) return;
  cudaStream_t stream = ctx.cuda().stream;
  switch (kind) {
    case ActivationKind::relu: return launch_forward<ActivationKind::relu>(x, y, stream);
    case ActivationKind::tanh: return launch_forward<ActivationKind::tanh>(x, y, stream);
    case ActivationKind::sigmoid: return launch_forward<ActivationKind::sigmoid>(x, y, stream);
  }
}

void activation_backward_cuda(Context& ctx, ActivationKind kind, const Tensor& y, const Tensor& dy, Tensor& dx) {
  QT_CHECK(y.numel() == dy.numel() && y.numel() == dx.numel(), "{}: y, dy, dx have {}, {}, {} elements",
           activation_name(kind), y.numel(), dy.numel(), dx.numel());
  if (y.numel() == 0) return;
  cudaStream_t stream = ctx.cuda().stream;
  switch (kind) {
    case ActivationKind::relu: return launch_backward<ActivationKind::relu>(y, dy, dx, stream);
    case ActivationKind::tanh: return launch_backward<ActivationKind::tanh>(y, dy, dx, stream);
    case ActivationKind::sigmoid: return launch_backward<ActivationKind::sigmoid>(y, dy, dx, stream);
  }
}

}  // namespace qtrain
