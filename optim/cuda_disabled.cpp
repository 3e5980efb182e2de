// Builds without the CUDA toolkit: the optimizers' CUDA launchers exist but throw, naming the
// optimizer, so a CUDA arena reaching them is a clear error (never a silent CPU fallback).
#include "framework/core/check.h"
#include "optim/clip.h"
#include "optim/kernels.h"

namespace qtrain::optim_detail {
namespace {
[[noreturn]] void no_cuda(const char* optimizer) {
  throw Error(
      fmt::format("{}: a CUDA step was requested but this qtrain was built without CUDA (QTRAIN_CUDA=OFF)", optimizer));
}
}  // namespace

void sgd_step_cuda(Context&, const SgdCoeffs<float>&, float*, const float*, float*, int64_t) { no_cuda("sgd"); }
void rmsprop_step_cuda(Context&, const RmsPropCoeffs<float>&, float*, const float*, float*, float*, float*, int64_t) {
  no_cuda("rmsprop");
}
void adam_step_cuda(Context&, const AdamCoeffs<float>&, float*, const float*, float*, float*, float*, int64_t) {
  no_cuda("adam");
}
void adagrad_step_cuda(Context&, const AdagradCoeffs<float>&, float*, const float*, float*, int64_t) {
  no_cuda("adagrad");
}

}  // namespace qtrain::optim_detail

namespace qtrain {
double clip_grad_norm_cuda(Context&, Tensor&, double) {
  throw Error("clip_grad_norm: a CUDA tensor arrived but this qtrain was built without CUDA (QTRAIN_CUDA=OFF)");
}
}  // namespace qtrain
