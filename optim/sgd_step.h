// Internal to optim/: the per-step coefficients of SGD (momentum, dampening, Nesterov, weight
// decay), computed once on the host (in double, then rounded to the arena's type) and handed to
// both its CPU loop (sgd.cpp) and its CUDA kernel (sgd.cu), so the two paths do the same arithmetic
// in the same order (optim/ is built without multiply-add contraction, so each operation is also
// rounded alike); and the kernel's launcher.
#pragma once

#include <cstdint>

#include "framework/core/context.h"

namespace qtrain::optim_detail {

template <typename T>
struct SgdCoeffs {
  T lr = 0, weight_decay = 0, momentum = 0;
  // buf <- buf_scale * buf + grad_scale * d. PyTorch copies the gradient into the buffer on the first
  // step (buf_scale 0, grad_scale 1) and applies dampening afterwards (momentum, 1 - dampening).
  T buf_scale = 0, grad_scale = 1;
  bool decay = false, use_momentum = false, nesterov = false;
};

// The CUDA launcher (sgd.cu; builds with the toolkit only): f32 arenas, on ctx's stream, asynchronous.
// Optional state (momentum buffers, averages) is null where its option is off.
void sgd_step_cuda(Context& ctx, const SgdCoeffs<float>& c, float* params, const float* grads, float* momentum_buffer,
                   int64_t n);

}  // namespace qtrain::optim_detail
