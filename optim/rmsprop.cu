// RMSprop's CUDA kernel (f32): the arithmetic of rmsprop.cpp's CPU loop, one grid-stride pass over
// the arena on the context's stream. Coefficients arrive precomputed (optim/kernels.h).
#include "framework/core/check.h"
#include "framework/core/cuda_context.h"
#include "optim/kernels.h"
#include "optim/rmsprop_step.h"

namespace qtrain::optim_detail {
namespace {

__global__ void rmsprop_kernel(RmsPropCoeffs<float> c, float* __restrict__ p, const float* __restrict__ g,
                               float* __restrict__ sq, float* __restrict__ ga, float* __restrict__ buf, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float d = g[i];
    if (c.decay) d = d + c.weight_decay * p[i];
    const float s = flush_subnormal(c.alpha * sq[i] + c.one_minus_alpha * d * d);
    sq[i] = s;
    float avg;
    if (c.centered) {
      const float a = flush_subnormal(c.alpha * ga[i] + c.one_minus_alpha * d);
      ga[i] = a;
      const float var = s - a * a;
      avg = sqrtf(var < 0 ? 0.0f : var) + c.eps;
    } else {
      avg = sqrtf(s) + c.eps;
    }
    if (c.use_momentum) {
      const float b = flush_subnormal(c.momentum * buf[i] + d / avg);
      buf[i] = b;
      p[i] = p[i] - c.lr * b;
    } else {
      p[i] = p[i] - c.lr * (d / avg);
    }
  }
}

}  // namespace

void rmsprop_step_cuda(Context& ctx, const RmsPropCoeffs<float>& c, float* params, const float* grads,
                       float* square_avg, float* grad_avg, float* momentum_buffer, int64_t n) {
  QT_CHECK(!c.centered || grad_avg != nullptr, "rmsprop: centered without a grad_avg buffer");
  QT_CHECK(!c.use_momentum || momentum_buffer != nullptr, "rmsprop: momentum without a buffer");
  if (n == 0) return;
  constexpr int kThreads = 256;
  rmsprop_kernel<<<blocks_for(n, kThreads), kThreads, 0, ctx.cuda().stream>>>(c, params, grads, square_avg, grad_avg,
                                                                              momentum_buffer, n);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace qtrain::optim_detail
