// Adam's CUDA kernel (f32): the arithmetic of adam.cpp's CPU loop, one grid-stride pass over the
// arena on the context's stream. The bias corrections arrive precomputed on the host (optim/kernels.h).
#include "framework/core/check.h"
#include "framework/core/cuda_context.h"
#include "optim/kernels.h"
#include "optim/adam_step.h"

namespace qtrain::optim_detail {
namespace {

__global__ void adam_kernel(AdamCoeffs<float> c, float* __restrict__ p, const float* __restrict__ g,
                            float* __restrict__ m, float* __restrict__ v, float* __restrict__ vmax, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float d = g[i];
    if (c.decay) d = d + c.weight_decay * p[i];
    const float mi = flush_subnormal(c.beta1 * m[i] + c.one_minus_beta1 * d);
    const float vi = flush_subnormal(c.beta2 * v[i] + c.one_minus_beta2 * d * d);
    m[i] = mi;
    v[i] = vi;
    float denom_v = vi;
    if (c.amsgrad) {
      denom_v = fmaxf(vmax[i], vi);
      vmax[i] = denom_v;
    }
    const float denom = sqrtf(denom_v) / c.bias_correction2_sqrt + c.eps;
    p[i] = p[i] - c.step_size * (mi / denom);
  }
}

}  // namespace

void adam_step_cuda(Context& ctx, const AdamCoeffs<float>& c, float* params, const float* grads, float* exp_avg,
                    float* exp_avg_sq, float* max_exp_avg_sq, int64_t n) {
  QT_CHECK(!c.amsgrad || max_exp_avg_sq != nullptr, "adam: amsgrad without a max_exp_avg_sq buffer");
  if (n == 0) return;
  constexpr int kThreads = 256;
  adam_kernel<<<blocks_for(n, kThreads), kThreads, 0, ctx.cuda().stream>>>(c, params, grads, exp_avg, exp_avg_sq,
                                                                           max_exp_avg_sq, n);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace qtrain::optim_detail
