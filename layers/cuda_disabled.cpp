// Builds without the CUDA toolkit link this file instead of the layers' .cu files: every CUDA entry
// point is a clear error naming the layer. (A CUDA tensor cannot be allocated in such a build either;
// this keeps the link complete and the message honest if one ever arrives.)
#include "framework/core/check.h"
#include "layers/activation.h"
#include "layers/add.h"
#include "layers/batchnorm.h"
#include "layers/contrast_norm.h"
#include "layers/conv2d.h"
#include "layers/dense.h"
#include "layers/dropout.h"
#include "layers/flatten.h"
#include "layers/global_avgpool.h"
#include "layers/locally_connected2d.h"
#include "layers/lrn.h"
#include "layers/pad_channels.h"
#include "layers/pool2d.h"
#include "layers/softmax_cross_entropy.h"

namespace qtrain {
namespace {
[[noreturn]] void no_cuda(const char* layer) {
  detail::fail(__FILE__, __LINE__, "QTRAIN_HAS_CUDA", fmt::format("{}: this qtrain was built without CUDA", layer));
}
}  // namespace

void flatten_copy_cuda(Context&, const Tensor&, Tensor&) { no_cuda("flatten"); }

void dense_forward_cuda(Context&, const Tensor&, const Tensor&, const Tensor*, Tensor&) { no_cuda("dense"); }
void dense_backward_cuda(Context&, const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor*, Tensor*) {
  no_cuda("dense");
}

void activation_forward_cuda(Context&, ActivationKind kind, const Tensor&, Tensor&) { no_cuda(activation_name(kind)); }
void activation_backward_cuda(Context&, ActivationKind kind, const Tensor&, const Tensor&, Tensor&) {
  no_cuda(activation_name(kind));
}

void dropout_apply_cuda(Context&, PhiloxKey, float, float, const Tensor&, Tensor&) { no_cuda("dropout"); }
void dropout_copy_cuda(Context&, const Tensor&, Tensor&) { no_cuda("dropout"); }

void add_forward_cuda(Context&, std::span<const Tensor>, Tensor&) { no_cuda("add"); }
void add_into_cuda(Context&, Tensor&, const Tensor&) { no_cuda("add"); }
void add_copy_cuda(Context&, const Tensor&, Tensor&) { no_cuda("add"); }

void pad_channels_forward_cuda(Context&, const PadChannels::Geometry&, const Tensor&, Tensor&) {
  no_cuda("pad_channels");
}
void pad_channels_backward_cuda(Context&, const PadChannels::Geometry&, const Tensor&, Tensor&) {
  no_cuda("pad_channels");
}

void batchnorm_forward_training_cuda(Context&, int64_t, int64_t, int64_t, double, double, const Tensor&,
                                     const Tensor&, const Tensor&, Tensor&, Tensor&, Tensor&, Tensor&, Tensor&) {
  no_cuda("batchnorm");
}
void batchnorm_forward_inference_cuda(Context&, int64_t, int64_t, int64_t, double, const Tensor&, const Tensor&,
                                      const Tensor&, const Tensor&, const Tensor&, Tensor&) {
  no_cuda("batchnorm");
}
void batchnorm_fill_cuda(Context&, Tensor&, float) { no_cuda("batchnorm"); }
void batchnorm_backward_cuda(Context&, int64_t, int64_t, int64_t, double, const Tensor&, const Tensor&,
                             const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&, Tensor*) {
  no_cuda("batchnorm");
}

LossStats softmax_cross_entropy_cuda(Context&, const Tensor&, const Tensor&, Tensor*, SoftmaxCrossEntropyScratch&) {
  no_cuda("softmax_cross_entropy");
}

// Without CUDA no cuDNN state is ever created, so there is nothing to free.
void Conv2dCudnnDeleter::operator()(Conv2dCudnn*) const noexcept {}
void conv2d_forward_cuda(Context&, Conv2dCudnnPtr&, const ImageGeometry&, const Window2d&, const Tensor&,
                         const Tensor&, const Tensor*, Tensor&) {
  no_cuda("conv2d");
}
void conv2d_backward_cuda(Context&, Conv2dCudnnPtr&, const ImageGeometry&, const Window2d&, const Tensor&,
                          const Tensor&, const Tensor&, Tensor&, Tensor*, Tensor*) {
  no_cuda("conv2d");
}

void pool2d_forward_cuda(Context&, PoolKind kind, const PoolOptions&, const ImageGeometry&, const Tensor&, Tensor&) {
  no_cuda(kind == PoolKind::max ? "maxpool2d" : "avgpool2d");
}
void pool2d_backward_cuda(Context&, PoolKind kind, const PoolOptions&, const ImageGeometry&, const Tensor&,
                          const Tensor&, Tensor&) {
  no_cuda(kind == PoolKind::max ? "maxpool2d" : "avgpool2d");
}

void global_avgpool_forward_cuda(Context&, const Tensor&, Tensor&, int64_t, int64_t) { no_cuda("global_avgpool"); }
void global_avgpool_backward_cuda(Context&, const Tensor&, Tensor&, int64_t, int64_t) { no_cuda("global_avgpool"); }

void lrn_forward_cuda(Context&, const LrnOptions&, const Tensor&, Tensor&) { no_cuda("lrn"); }
void lrn_backward_cuda(Context&, const LrnOptions&, const Tensor&, const Tensor&, const Tensor&, Tensor&) {
  no_cuda("lrn");
}

void contrast_norm_forward_cuda(Context&, const ContrastNormOptions&, const Tensor&, Tensor&, Tensor&) {
  no_cuda("contrast_norm");
}
void contrast_norm_backward_cuda(Context&, const ContrastNormOptions&, const Tensor&, const Tensor&, Tensor&,
                                 Tensor&) {
  no_cuda("contrast_norm");
}

void locally_connected2d_forward_cuda(Context&, const ImageGeometry&, const Window2d&, const Tensor&, const Tensor&,
                                      const Tensor*, Tensor&, Tensor&) {
  no_cuda("locally_connected2d");
}
void locally_connected2d_backward_cuda(Context&, const ImageGeometry&, const Window2d&, const Tensor&, const Tensor&,
                                       const Tensor&, Tensor&, Tensor*, Tensor*, Tensor&) {
  no_cuda("locally_connected2d");
}

}  // namespace qtrain
