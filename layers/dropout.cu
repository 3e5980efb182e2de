// dropout on CUDA. Thread g handles the four elements 4g..4g+3 with cuRAND's device API:
// curand_init(philox_key_as_seed(key), g, 0) then curand_uniform4, which framework/core/philox.h shows is
// philox_subsequence_block(key, g) mapped by uniform_from_bits: the CPU mask, bit for bit.
#include <curand_kernel.h>

#include "framework/core/cuda_context.h"
#include "layers/dropout.h"

namespace qtrain {
namespace {

constexpr int kThreads = 256;

__global__ void dropout_kernel(unsigned long long seed, float p, float scale, const float* __restrict__ in,
                               float* __restrict__ out, long long n) {
  const long long groups = (n + 3) / 4;
  for (long long g = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; g < groups;
       g += static_cast<long long>(gridDim.x) * blockDim.x) {
    // Philox's curand_init only sets the counter (no sequential skip-ahead), so a fresh state per group
    // costs nothing and keeps the element -> random-word mapping independent of the launch shape.
    curandStatePhilox4_32_10_t state;
    curand_init(seed, static_cast<unsigned long long>(g), 0, &state);
    const float4 u = curand_uniform4(&state);
    const float draws[4] = {u.x, u.y, u.z, u.w};
    const long long base = 4 * g;
    for (int w = 0; w < 4; ++w) {
      const long long i = base + w;
      if (i < n) out[i] = draws[w] > p ? in[i] * scale : 0.0f;
    }
  }
}

}  // namespace

void dropout_apply_cuda(Context& ctx, PhiloxKey key, float p, float scale, const Tensor& in, Tensor& out) {
  QT_CHECK(in.numel() == out.numel(), "dropout: input has {} elements, output {}", in.numel(), out.numel());
  QT_CHECK(p >= 0.0f && p < 1.0f, "dropout: p must be in [0, 1), got {}", p);
  const long long n = in.numel();
  if (n == 0) return;
  dropout_kernel<<<blocks_for((n + 3) / 4, kThreads), kThreads, 0, ctx.cuda().stream>>>(
      philox_key_as_seed(key), p, scale, in.data<float>(), out.data<float>(), n);
  CUDA_CHECK(cudaGetLastError());
}

void dropout_copy_cuda(Context& ctx, const Tensor& in, Tensor& out) {
  QT_CHECK(in.nbytes() == out.nbytes(), "dropout: copy of {} bytes into {}", in.nbytes(), out.nbytes());
  if (in.nbytes() == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(out.raw(), in.raw(), in.nbytes(), cudaMemcpyDeviceToDevice, ctx.cuda().stream));
}

}  // namespace qtrain
