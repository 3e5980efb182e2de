// batch norm's CUDA path: cuDNN's spatial batch normalization on (B, C, S, 1) NCHW views. cuDNN's
// exponentialAverageFactor is PyTorch's momentum (running = (1 - f) running + f batch), and its
// running variance, like PyTorch's, is the unbiased one; the saved mean / inverse std of the training
// forward feed the backward. Descriptors are host objects created per call (cheap, no GPU memory).
#include "framework/core/cuda_context.h"
#include "layers/batchnorm.h"

namespace qtrain {
namespace {

constexpr cudnnBatchNormMode_t kMode = CUDNN_BATCHNORM_SPATIAL;

// The data descriptor (B, C, S, 1) and the per-channel descriptor derived from it.
struct Descriptors {
  cudnnTensorDescriptor_t data = nullptr, channel = nullptr;
  Descriptors(int64_t batch, int64_t channels, int64_t spatial) {
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&data));
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&channel));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(data, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, static_cast<int>(batch),
                                           static_cast<int>(channels), static_cast<int>(spatial), 1));
    CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(channel, data, kMode));
  }
  ~Descriptors() {
    cudnnDestroyTensorDescriptor(channel);
    cudnnDestroyTensorDescriptor(data);
  }
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;
};

__global__ void fill_kernel(float* __restrict__ t, float value, long long n) {
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x)
    t[i] = value;
}

}  // namespace

void batchnorm_fill_cuda(Context& ctx, Tensor& t, float value) {
  const long long n = t.numel();
  if (n == 0) return;
  fill_kernel<<<blocks_for(n), 256, 0, ctx.cuda().stream>>>(t.data<float>(), value, n);
  CUDA_CHECK(cudaGetLastError());
}

void batchnorm_forward_training_cuda(Context& ctx, int64_t batch, int64_t channels, int64_t spatial, double eps,
                                     double momentum, const Tensor& x, const Tensor& scale, const Tensor& bias,
                                     Tensor& running_mean, Tensor& running_var, Tensor& save_mean, Tensor& save_invstd,
                                     Tensor& y) {
  Descriptors d(batch, channels, spatial);
  const float one = 1.0f, zero = 0.0f;
  CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(
      ctx.cuda().cudnn, kMode, &one, &zero, d.data, x.data<float>(), d.data, y.data<float>(), d.channel,
      scale.data<float>(), bias.data<float>(), momentum, running_mean.data<float>(), running_var.data<float>(), eps,
      save_mean.data<float>(), save_invstd.data<float>()));
}

void batchnorm_forward_inference_cuda(Context& ctx, int64_t batch, int64_t channels, int64_t spatial, double eps,
                                      const Tensor& x, const Tensor& scale, const Tensor& bias,
                                      const Tensor& running_mean, const Tensor& running_var, Tensor& y) {
  Descriptors d(batch, channels, spatial);
  const float one = 1.0f, zero = 0.0f;
  CUDNN_CHECK(cudnnBatchNormalizationForwardInference(
      ctx.cuda().cudnn, kMode, &one, &zero, d.data, x.data<float>(), d.data, y.data<float>(), d.channel,
      scale.data<float>(), bias.data<float>(), running_mean.data<float>(), running_var.data<float>(), eps));
}

void batchnorm_backward_cuda(Context& ctx, int64_t batch, int64_t channels, int64_t spatial, double eps,
                             const Tensor& x, const Tensor& dy, const Tensor& scale, const Tensor& save_mean,
                             const Tensor& save_invstd, Tensor& dscale, Tensor& dbias, Tensor* dx) {
  Descriptors d(batch, channels, spatial);
  const float one = 1.0f, zero = 0.0f;
  // beta = 0 for dx and the parameter gradients: overwrite, as the layer contract requires.
  CUDNN_CHECK(cudnnBatchNormalizationBackward(ctx.cuda().cudnn, kMode, &one, &zero, &one, &zero, d.data,
                                              x.data<float>(), d.data, dy.data<float>(), d.data, dx->data<float>(),
                                              d.channel, scale.data<float>(), dscale.data<float>(), dbias.data<float>(),
                                              eps, save_mean.data<float>(), save_invstd.data<float>()));
}

}  // namespace qtrain
