// global_avgpool on CUDA: one warp per (sample, channel) row for the forward mean (a shuffle
// reduction in a fixed order, so results are deterministic), a grid-stride broadcast for backward.
#include <algorithm>

#include "framework/core/cuda_context.h"
#include "layers/global_avgpool.h"

namespace qtrain {
namespace {

constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / 32;

__global__ void mean_rows_kernel(const float* __restrict__ x, float* __restrict__ y, long long rows, long long plane) {
  const long long warp = (blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  const long long warps = static_cast<long long>(gridDim.x) * blockDim.x / 32;
  for (long long r = warp; r < rows; r += warps) {
    const float* row = x + r * plane;
    float sum = 0.0f;
    for (long long i = lane; i < plane; i += 32) sum += row[i];
    for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_down_sync(0xffffffffu, sum, offset);
    if (lane == 0) y[r] = sum / static_cast<float>(plane);
  }
}

__global__ void broadcast_rows_kernel(const float* __restrict__ dy, float* __restrict__ dx, long long rows,
                                      long long plane) {
  const long long n = rows * plane;
  const float inv = 1.0f / static_cast<float>(plane);
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x)
    dx[i] = dy[i / plane] * inv;
}

}  // namespace

void global_avgpool_forward_cuda(Context& ctx, const Tensor& x, Tensor& y, int64_t rows, int64_t plane) {
  if (rows == 0) return;
  const long long blocks = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  mean_rows_kernel<<<static_cast<unsigned>(std::min<long long>(blocks, 65535LL * 8)), kThreads, 0, ctx.cuda().stream>>>(
      x.data<float>(), y.data<float>(), rows, plane);
  CUDA_CHECK(cudaGetLastError());
}

void global_avgpool_backward_cuda(Context& ctx, const Tensor& dy, Tensor& dx, int64_t rows, int64_t plane) {
  const long long n = rows * plane;
  if (n == 0) return;
  broadcast_rows_kernel<<<blocks_for(n, kThreads), kThreads, 0, ctx.cuda().stream>>>(dy.data<float>(), dx.data<float>(),
                                                                                     rows, plane);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace qtrain
