// Internal to optim/: the per-step coefficients of Adam (AMSGrad, weight decay), computed once on
// the host (in double, then rounded to the arena's type) and handed to both its CPU loop (adam.cpp)
// and its CUDA kernel (adam.cu), so the two paths do the same arithmetic in the same order (optim/
// is built without multiply-add contraction, so each operation is also rounded alike); and the
// kernel's launcher.
#pragma once

#include <cstdint>

#include "framework/core/context.h"

namespace qtrain::optim_detail {

template <typename T>
struct AdamCoeffs {
  T weight_decay = 0, beta1 = 0, one_minus_beta1 = 0, beta2 = 0, one_minus_beta2 = 0, eps = 0;
  T step_size = 0;              // lr / (1 - beta1^t)
  T bias_correction2_sqrt = 0;  // sqrt(1 - beta2^t)
  bool decay = false, amsgrad = false;
};

// The CUDA launcher (adam.cu; builds with the toolkit only): f32 arenas, on ctx's stream, asynchronous.
// Optional state (momentum buffers, averages) is null where its option is off.
void adam_step_cuda(Context& ctx, const AdamCoeffs<float>& c, float* params, const float* grads, float* exp_avg,
                    float* exp_avg_sq, float* max_exp_avg_sq, int64_t n);

}  // namespace qtrain::optim_detail
