// lrn on CUDA through cuDNN's cross-channel LRN (cudnnLRNCrossChannelForward / Backward). cuDNN's
// lrnAlpha is divided by the window width inside the library, exactly as PyTorch's alpha (lrn.h), so
// it is passed unchanged; for odd sizes its window is centered as PyTorch's. Even sizes (whose window
// PyTorch shifts by one channel, a detail cuDNN does not document) and parameters outside cuDNN's
// limits are refused with a message rather than computed differently from the CPU reference.
#include "framework/core/cuda_context.h"
#include "layers/lrn.h"

namespace qtrain {
namespace {

struct LrnDescriptors {
  cudnnLRNDescriptor_t lrn = nullptr;
  cudnnTensorDescriptor_t t = nullptr;
  LrnDescriptors(const LrnOptions& o, const Tensor& x) {
    QT_CHECK(o.size % 2 == 1 && o.size <= CUDNN_LRN_MAX_N,
             "lrn: the CUDA path (cuDNN) supports odd sizes up to {}, got {}", CUDNN_LRN_MAX_N, o.size);
    QT_CHECK(o.k >= CUDNN_LRN_MIN_K && o.beta >= CUDNN_LRN_MIN_BETA,
             "lrn: the CUDA path (cuDNN) needs k >= {} and beta >= {}, got k {} beta {}", CUDNN_LRN_MIN_K,
             CUDNN_LRN_MIN_BETA, o.k, o.beta);
    QT_CHECK(x.ndim() == 4 && x.dim(0) <= 0x7fffffffLL && x.dim(1) <= 0x7fffffffLL && x.dim(2) <= 0x7fffffffLL &&
                 x.dim(3) <= 0x7fffffffLL,
             "lrn: CUDA input of shape {} is not (B, C, H, W) within cuDNN's int range", shape_str(x.shape()));
    CUDNN_CHECK(cudnnCreateLRNDescriptor(&lrn));
    CUDNN_CHECK(cudnnSetLRNDescriptor(lrn, static_cast<unsigned>(o.size), o.alpha, o.beta, o.k));
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&t));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(t, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, static_cast<int>(x.dim(0)),
                                           static_cast<int>(x.dim(1)), static_cast<int>(x.dim(2)),
                                           static_cast<int>(x.dim(3))));
  }
  ~LrnDescriptors() {
    if (t) cudnnDestroyTensorDescriptor(t);
    if (lrn) cudnnDestroyLRNDescriptor(lrn);
  }
  LrnDescriptors(const LrnDescriptors&) = delete;
  LrnDescriptors& operator=(const LrnDescriptors&) = delete;
};

}  // namespace

void lrn_forward_cuda(Context& ctx, const LrnOptions& opt, const Tensor& x, Tensor& y) {
  if (x.numel() == 0) return;
  // Descriptors are host-side structs: creating them per call costs microseconds and no device work.
  LrnDescriptors d(opt, x);
  const float one = 1.0f, zero = 0.0f;
  CUDNN_CHECK(cudnnLRNCrossChannelForward(ctx.cuda().cudnn, d.lrn, CUDNN_LRN_CROSS_CHANNEL_DIM1, &one, d.t,
                                          x.data<float>(), &zero, d.t, y.data<float>()));
}

void lrn_backward_cuda(Context& ctx, const LrnOptions& opt, const Tensor& x, const Tensor& y, const Tensor& dy,
                       Tensor& dx) {
  if (x.numel() == 0) return;
  LrnDescriptors d(opt, x);
  const float one = 1.0f, zero = 0.0f;
  CUDNN_CHECK(cudnnLRNCrossChannelBackward(ctx.cuda().cudnn, d.lrn, CUDNN_LRN_CROSS_CHANNEL_DIM1, &one, d.t,
                                           y.data<float>(), d.t, dy.data<float>(), d.t, x.data<float>(), &zero, d.t,
                                           dx.data<float>()));
}

}  // namespace qtrain
