// add's CUDA path: grid-stride elementwise kernels on the context's stream.
#include "framework/core/cuda_context.h"
#include "layers/add.h"

namespace qtrain {
namespace {

// y may be a (in place, see add.h): no __restrict__ on either.
__global__ void sum2_kernel(const float* a, const float* __restrict__ b, float* y, long long n) {
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x)
    y[i] = a[i] + b[i];
}

__global__ void accumulate_kernel(float* __restrict__ y, const float* __restrict__ x, long long n) {
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x)
    y[i] += x[i];
}

}  // namespace

void add_forward_cuda(Context& ctx, std::span<const Tensor> xs, Tensor& y) {
  const long long n = y.numel();
  if (n == 0) return;
  cudaStream_t s = ctx.cuda().stream;
  sum2_kernel<<<blocks_for(n), 256, 0, s>>>(xs[0].data<float>(), xs[1].data<float>(), y.data<float>(), n);
  for (size_t k = 2; k < xs.size(); ++k)
    accumulate_kernel<<<blocks_for(n), 256, 0, s>>>(y.data<float>(), xs[k].data<float>(), n);
  CUDA_CHECK(cudaGetLastError());
}

void add_into_cuda(Context& ctx, Tensor& dst, const Tensor& src) {
  const long long n = dst.numel();
  if (n == 0) return;
  accumulate_kernel<<<blocks_for(n), 256, 0, ctx.cuda().stream>>>(dst.data<float>(), src.data<float>(), n);
  CUDA_CHECK(cudaGetLastError());
}

void add_copy_cuda(Context& ctx, const Tensor& src, Tensor& dst) {
  QT_CHECK(src.nbytes() == dst.nbytes(), "add: copy of {} bytes into {}", src.nbytes(), dst.nbytes());
  if (src.nbytes() == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(dst.raw(), src.raw(), src.nbytes(), cudaMemcpyDeviceToDevice, ctx.cuda().stream));
}

}  // namespace qtrain
