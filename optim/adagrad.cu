// Adagrad's CUDA kernel (f32): the arithmetic of adagrad.cpp's CPU loop, one grid-stride pass over
// the arena on the context's stream. Coefficients arrive precomputed (optim/kernels.h).
#include "framework/core/check.h"
#include "framework/core/cuda_context.h"
#include "optim/kernels.h"
#include "optim/adagrad_step.h"

namespace qtrain::optim_detail {
namespace {

__global__ void adagrad_kernel(AdagradCoeffs<float> c, float* __restrict__ p, const float* __restrict__ g,
                               float* __restrict__ sum, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float d = g[i];
    if (c.decay) d = d + c.weight_decay * p[i];
    const float s = sum[i] + d * d;
    sum[i] = s;
    p[i] = p[i] - c.clr * (d / (sqrtf(s) + c.eps));
  }
}

}  // namespace

void adagrad_step_cuda(Context& ctx, const AdagradCoeffs<float>& c, float* params, const float* grads, float* sum,
                       int64_t n) {
  if (n == 0) return;
  constexpr int kThreads = 256;
  adagrad_kernel<<<blocks_for(n, kThreads), kThreads, 0, ctx.cuda().stream>>>(c, params, grads, sum, n);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace qtrain::optim_detail
