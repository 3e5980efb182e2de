// clip_grad_norm's CUDA path: the sum of squares in double in the order of clip_order.h (one block of
// kLanes threads per chunk, then the chunk sums level by level), the norm read back to the host (a
// stream synchronization), and, when it exceeds max_norm, one float multiply per value in place: the
// CPU path's arithmetic, so both clip alike and return the same norm.
#include "framework/core/check.h"
#include "framework/core/cuda_context.h"
#include "optim/clip.h"
#include "optim/clip_order.h"

namespace qtrain {
namespace {

using clip_order::kChunk;
using clip_order::kLanes;

struct Squares {
  const float* g;
  __device__ double operator()(int64_t i) const {
    const auto x = static_cast<double>(g[i]);
    return x * x;
  }
};

struct Plain {
  const double* p;
  __device__ double operator()(int64_t i) const { return p[i]; }
};

// Block c sums value(i) for i in chunk c of [0, n) into out[c], as clip_order::chunk_sum does.
template <typename Value>
__global__ void chunk_sums_kernel(Value value, int64_t n, double* __restrict__ out) {
  __shared__ double lanes[kLanes];
  const int64_t t = threadIdx.x;
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * kChunk;
  const int64_t end = begin + kChunk < n ? begin + kChunk : n;
  double acc = 0.0;
  for (int64_t i = begin + t; i < end; i += kLanes) acc += value(i);
  lanes[t] = acc;
  for (int64_t h = kLanes / 2; h >= 1; h /= 2) {
    __syncthreads();
    if (t < h) lanes[t] += lanes[t + h];
  }
  if (t == 0) out[blockIdx.x] = lanes[0];
}

__global__ void scale_kernel(float* __restrict__ g, int64_t n, float scale) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    g[i] *= scale;
}

}  // namespace

double clip_grad_norm_cuda(Context& ctx, Tensor& grads, double max_norm) {
  QT_CHECK(grads.dtype() == DType::f32, "clip_grad_norm: the CUDA path takes f32 gradients, got {}",
           dtype_name(grads.dtype()));
  const int64_t n = grads.numel();
  if (n == 0) return 0.0;
  cudaStream_t s = ctx.cuda().stream;
  // Room for every level: the chunk sums of the values, then of those, ... (each level a 4096th of
  // the one before), from the stream-ordered pool, so a step allocates nothing new after the first.
  int64_t slots = 0;
  for (int64_t m = clip_order::chunks_of(n);; m = clip_order::chunks_of(m)) {
    slots += m;
    if (m == 1) break;
  }
  QT_CHECK(clip_order::chunks_of(n) <= 0x7fffffff, "clip_grad_norm: {} values need more blocks than CUDA launches", n);
  double* partial = nullptr;
  CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&partial), static_cast<size_t>(slots) * sizeof(double), s));
  double* level = partial;
  int64_t m = clip_order::chunks_of(n);
  chunk_sums_kernel<<<static_cast<unsigned>(m), kLanes, 0, s>>>(Squares{grads.data<float>()}, n, level);
  CUDA_CHECK(cudaGetLastError());
  while (m > 1) {
    const int64_t next = clip_order::chunks_of(m);
    chunk_sums_kernel<<<static_cast<unsigned>(next), kLanes, 0, s>>>(Plain{level}, m, level + m);
    CUDA_CHECK(cudaGetLastError());
    level += m;
    m = next;
  }
  double sum = 0.0;
  CUDA_CHECK(cudaMemcpyAsync(&sum, level, sizeof(double), cudaMemcpyDeviceToHost, s));
  CUDA_CHECK(cudaFreeAsync(partial, s));
  CUDA_CHECK(cudaStreamSynchronize(s));
  const double norm = std::sqrt(sum);
  if (norm > max_norm) {
    const auto scale = static_cast<float>(max_norm / (norm + 1e-6));
    constexpr int kThreads = 256;
    const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, 65535);
    scale_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(grads.data<float>(), n, scale);
    CUDA_CHECK(cudaGetLastError());
  }
  return norm;
}

}  // namespace qtrain
