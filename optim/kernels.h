// Internal to optim/: the per-step coefficients each optimizer computes once on the host (in double,
// then rounded to the arena's type) and hands to both its CPU loop and its CUDA kernel, so the two
// paths do the same arithmetic in the same order (optim/ is built without multiply-add contraction,
// so each operation is also rounded alike). Also declares the CUDA launchers (sgd.cu,
// rmsprop.cu, adam.cu, adagrad.cu; optim/cuda_disabled.cpp in builds without the toolkit).
#pragma once

#include <cstdint>
#include <type_traits>

#include "framework/context.h"
#include "framework/tensor.h"

namespace qtrain::optim_detail {

template <typename T>
struct SgdCoeffs {
  T lr = 0, weight_decay = 0, momentum = 0;
  // buf <- buf_scale * buf + grad_scale * d. PyTorch copies the gradient into the buffer on the first
  // step (buf_scale 0, grad_scale 1) and applies dampening afterwards (momentum, 1 - dampening).
  T buf_scale = 0, grad_scale = 1;
  bool decay = false, use_momentum = false, nesterov = false;
};

template <typename T>
struct RmsPropCoeffs {
  T lr = 0, weight_decay = 0, alpha = 0, one_minus_alpha = 0, eps = 0, momentum = 0;
  bool decay = false, centered = false, use_momentum = false;
};

template <typename T>
struct AdamCoeffs {
  T weight_decay = 0, beta1 = 0, one_minus_beta1 = 0, beta2 = 0, one_minus_beta2 = 0, eps = 0;
  T step_size = 0;         // lr / (1 - beta1^t)
  T bias_correction2_sqrt = 0;  // sqrt(1 - beta2^t)
  bool decay = false, amsgrad = false;
};

template <typename T>
struct AdagradCoeffs {
  T clr = 0;  // lr / (1 + (t - 1) * lr_decay)
  T weight_decay = 0, eps = 0;
  bool decay = false;
};

// Calls f(std::true_type) or f(std::false_type): turns a loop-invariant flag into a template constant
// so the CPU loops carry no per-element branches and vectorize.
template <typename F>
void with_flag(bool flag, F&& f) {
  if (flag) f(std::true_type{});
  else f(std::false_type{});
}


// CUDA launchers (f32 arenas, on ctx's stream, asynchronous). `buf`/`grad_avg`/`max_sq` may be null
// when the corresponding option is off.
void sgd_step_cuda(Context& ctx, const SgdCoeffs<float>& c, float* params, const float* grads, float* momentum_buffer,
                   int64_t n);
void rmsprop_step_cuda(Context& ctx, const RmsPropCoeffs<float>& c, float* params, const float* grads,
                       float* square_avg, float* grad_avg, float* momentum_buffer, int64_t n);
void adam_step_cuda(Context& ctx, const AdamCoeffs<float>& c, float* params, const float* grads, float* exp_avg,
                    float* exp_avg_sq, float* max_exp_avg_sq, int64_t n);
void adagrad_step_cuda(Context& ctx, const AdagradCoeffs<float>& c, float* params, const float* grads, float* sum,
                       int64_t n);

}  // namespace qtrain::optim_detail
