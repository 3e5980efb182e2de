// clip_grad_norm's CUDA path: cuBLAS nrm2 (host pointer mode: returns when the norm is known) and, when
// the norm exceeds max_norm, cuBLAS scal in place, both on ctx's stream.
#include "framework/check.h"
#include "framework/cuda_context.h"
#include "optim/clip.h"

namespace qtrain {

double clip_grad_norm_cuda(Context& ctx, Tensor& grads, double max_norm) {
  QT_CHECK(grads.dtype() == DType::f32, "clip_grad_norm: the CUDA path takes f32 gradients, got {}",
           dtype_name(grads.dtype()));
  QT_CHECK(grads.numel() <= 0x7fffffff, "clip_grad_norm: {} values exceed cuBLAS's int range", grads.numel());
  cublasHandle_t handle = ctx.cuda().cublas;
  CUBLAS_CHECK(cublasSetPointerMode(handle, CUBLAS_POINTER_MODE_HOST));
  float norm = 0;
  const int n = static_cast<int>(grads.numel());
  CUBLAS_CHECK(cublasSnrm2(handle, n, grads.data<float>(), 1, &norm));
  if (static_cast<double>(norm) > max_norm) {
    const float scale = static_cast<float>(max_norm / (static_cast<double>(norm) + 1e-6));
    CUBLAS_CHECK(cublasSscal(handle, n, &scale, grads.data<float>(), 1));
  }
  return norm;
}

}  // namespace qtrain
