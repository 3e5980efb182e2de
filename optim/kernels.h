// Internal to optim/: what every optimizer's CPU loop and CUDA kernel share: the subnormal flush of
// the state, the flag-to-template helper of the CPU loops, and the refusal of a CUDA step in a build
// without the toolkit. Each optimizer's coefficients and CUDA launcher are in optim/<name>_step.h.
#pragma once

#include <cfloat>
#include <cstdint>
#include <type_traits>

#include "framework/core/check.h"

namespace qtrain::optim_detail {

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

// A CUDA arena in a build without the toolkit: a clear error naming the optimizer, never a silent
// CPU fallback.
[[noreturn]] inline void refuse_cuda_step(const char* optimizer) {
  QT_FAIL_NO_CUDA("{}: a CUDA step was requested", optimizer);
}

}  // namespace qtrain::optim_detail
