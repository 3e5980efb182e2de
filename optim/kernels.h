// Internal to optim/: the per-step coefficients each optimizer computes once on the host (in double,
// then rounded to the arena's type) and hands to both its CPU loop and its CUDA kernel, so the two
// paths do the same arithmetic in the same order (optim/ is built without multiply-add contraction,
// so each operation is also rounded alike). Also declares the CUDA launchers (sgd.cu,
// rmsprop.cu, adam.cu, adagrad.cu; optim/cuda_disabled.cpp in builds without the toolkit).
#pragma once

#include <cfloat>
#include <cstdint>
#include <type_traits>

#include "framework/core/context.h"
#include "framework/core/tensor.h"

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
  T step_size = 0;              // lr / (1 - beta1^t)
  T bias_correction2_sqrt = 0;  // sqrt(1 - beta2^t)
  bool decay = false, amsgrad = false;
};

template <typename T>
struct AdagradCoeffs {
  T clr = 0;  // lr / (1 + (t - 1) * lr_decay)
  T weight_decay = 0, eps = 0;
  bool decay = false;
};

// The optimizers' state never holds subnormal numbers. A state that decays geometrically where the
// gradient stays zero reaches the subnormal range after a few thousand steps: RMSProp's square_avg
// (by alpha per step), momentum buffers, Adam's moments. Past that point every x86 operation on it
// costs ~100x. In a 20-epoch MNIST run with RMSProp, 35% of square_avg ended subnormal, and the
// optimizer took 12x longer per epoch at the end than at the start (issue 22).
// So each new state value whose magnitude is below the smallest normal number is stored as a zero of
// its sign. The CPU loops and the CUDA kernels do this alike, so they keep writing the same bits; a GPU
// would compute the subnormal at full speed, but the CPU does not. Zero stays zero under decay, so the
// slow operation happens once per value, not every step. The effect on training is nil: such a value
// is below 1.2e-38 (f32), and where it feeds a division (RMSProp, Adam) eps dominates it by 30 orders
// of magnitude.
#if defined(__CUDACC__)
#define QT_OPTIM_HD __host__ __device__ __forceinline__
#else
#define QT_OPTIM_HD inline
#endif
QT_OPTIM_HD float flush_subnormal(float x) { return x < FLT_MIN && x > -FLT_MIN ? x * 0.0f : x; }
QT_OPTIM_HD double flush_subnormal(double x) { return x < DBL_MIN && x > -DBL_MIN ? x * 0.0 : x; }
#undef QT_OPTIM_HD

// Calls f(std::true_type) or f(std::false_type): turns a loop-invariant flag into a template constant
// so the CPU loops carry no per-element branches and vectorize.
template <typename F>
void with_flag(bool flag, F&& f) {
  if (flag)
    f(std::true_type{});
  else
    f(std::false_type{});
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
