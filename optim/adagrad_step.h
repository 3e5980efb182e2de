// Internal to optim/: the per-step coefficients of Adagrad (learning-rate decay, weight decay),
// computed once on the host (in double, then rounded to the arena's type) and handed to both its
// CPU loop (adagrad.cpp) and its CUDA kernel (adagrad.cu), so the two paths do the same arithmetic
// in the same order (optim/ is built without multiply-add contraction, so each operation is also
// rounded alike); and the kernel's launcher.
#pragma once

#include <cstdint>

#include "framework/core/context.h"

namespace qtrain::optim_detail {

template <typename T>
struct AdagradCoeffs {
  T clr = 0;  // lr / (1 + (t - 1) * lr_decay)
  T weight_decay = 0, eps = 0;
  bool decay = false;
};

// The CUDA launcher (adagrad.cu; builds with the toolkit only): f32 arenas, on ctx's stream, asynchronous.
// Optional state (momentum buffers, averages) is null where its option is off.
void adagrad_step_cuda(Context& ctx, const AdagradCoeffs<float>& c, float* params, const float* grads, float* sum,
                       int64_t n);

}  // namespace qtrain::optim_detail
