// Internal to optim/: the per-step coefficients of RMSProp (centered, momentum, weight decay),
// computed once on the host (in double, then rounded to the arena's type) and handed to both its
// CPU loop (rmsprop.cpp) and its CUDA kernel (rmsprop.cu), so the two paths do the same arithmetic
// in the same order (optim/ is built without multiply-add contraction, so each operation is also
// rounded alike); and the kernel's launcher.
#pragma once

#include <cstdint>

#include "framework/core/context.h"

namespace qtrain::optim_detail {

template <typename T>
struct RmsPropCoeffs {
  T lr = 0, weight_decay = 0, alpha = 0, one_minus_alpha = 0, eps = 0, momentum = 0;
  bool decay = false, centered = false, use_momentum = false;
};

// The CUDA launcher (rmsprop.cu; builds with the toolkit only): f32 arenas, on ctx's stream, asynchronous.
// Optional state (momentum buffers, averages) is null where its option is off.
void rmsprop_step_cuda(Context& ctx, const RmsPropCoeffs<float>& c, float* params, const float* grads,
                       float* square_avg, float* grad_avg, float* momentum_buffer, int64_t n);

}  // namespace qtrain::optim_detail
