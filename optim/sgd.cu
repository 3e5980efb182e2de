// SGD's CUDA kernel (f32): the arithmetic of sgd.cpp's CPU loop, one grid-stride pass over the arena
// on the context's stream. Coefficients arrive precomputed (optim/kernels.h).
#include "framework/core/check.h"
#include "framework/core/cuda_context.h"
#include "optim/kernels.h"
#include "optim/sgd_step.h"

namespace qtrain::optim_detail {
namespace {

__global__ void sgd_kernel(SgdCoeffs<float> c, float* __restrict__ p, const float* __restrict__ g,
                           float* __restrict__ buf, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float d = g[i];
    if (c.decay) d = d + c.weight_decay * p[i];
    if (c.use_momentum) {
      const float b = flush_subnormal(c.buf_scale * buf[i] + c.grad_scale * d);
      buf[i] = b;
      d = c.nesterov ? d + c.momentum * b : b;
    }
    p[i] = p[i] - c.lr * d;
  }
}

}  // namespace

void sgd_step_cuda(Context& ctx, const SgdCoeffs<float>& c, float* params, const float* grads, float* momentum_buffer,
                   int64_t n) {
  QT_CHECK(!c.use_momentum || momentum_buffer != nullptr, "sgd: momentum without a buffer");
  if (n == 0) return;
  constexpr int kThreads = 256;
  sgd_kernel<<<blocks_for(n, kThreads), kThreads, 0, ctx.cuda().stream>>>(c, params, grads, momentum_buffer, n);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace qtrain::optim_detail
