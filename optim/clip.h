// Gradient clipping by global norm (Pascanu et al. 2013; PyTorch's clip_grad_norm_): when the L2 norm
// of the whole gradient arena exceeds max_norm, every gradient is scaled by max_norm / (norm + 1e-6).
// The trainer applies it after the gradient exchange, to the averaged gradients every rank holds, so
// all replicas scale identically. Config key: optimizer.clip_norm (0 = off).
#pragma once

#include "framework/core/context.h"
#include "framework/core/tensor.h"

namespace qtrain {

// Returns the norm before clipping. grads: f32 or f64 on the CPU, f32 on CUDA (ctx's device).
double clip_grad_norm(Context& ctx, Tensor& grads, double max_norm);

// CUDA path (clip.cu; without the toolkit clip.cpp fails with QT_FAIL_NO_CUDA): the same sum in the same order
// (clip_order.h) and the same scaling as the CPU path, on ctx's stream (synchronizes to read the norm).
double clip_grad_norm_cuda(Context& ctx, Tensor& grads, double max_norm);

}  // namespace qtrain
