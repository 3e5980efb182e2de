// maxpool2d and avgpool2d: 2-D pooling over each channel of one image (C, H, W) per sample, with
// exactly PyTorch's nn.MaxPool2d / nn.AvgPool2d semantics, including the overlapping 3x3 stride-2
// pooling of AlexNet and Dettmers' CIFAR-10 network:
//  - output size floor((H + 2p - k)/s) + 1, or with ceil_mode the ceiling (a last window that would
//    start in the right padding is dropped);
//  - padding at most half the kernel (PyTorch's rule);
//  - max: padded positions never win; the gradient goes to the first maximum of the window in
//    row-major order (NaN counts as a maximum, as in PyTorch). The CPU and CUDA paths apply this
//    same rule, so their gradients agree on ties too;
//  - avg: the divisor is the window clipped to the padded input (count_include_pad true, PyTorch's
//    default; with ceil_mode a window hanging past the padding counts only its padded part), or the
//    number of real input elements with count_include_pad false.
// Config keys: kernel (int or [kh, kw], required), stride (default: the kernel), padding (default 0),
// ceil_mode (default false); avgpool2d also count_include_pad (default true).
// The CUDA path uses its own kernels rather than cuDNN's pooling: cuDNN documents neither its tie rule
// for max nor ceil_mode, and these are what parity with the CPU reference needs.
#pragma once

#include <memory>

#include "framework/core/layer.h"
#include "layers/conv_geometry.h"

namespace qtrain {

enum class PoolKind { max, avg };

struct PoolOptions {
  Window2d window;
  bool ceil_mode = false;
  bool count_include_pad = true;  // avg only
};

class Pool2d : public Layer {
 public:
  Pool2d(PoolKind kind, PoolOptions options);

  const char* type() const override { return kind_ == PoolKind::max ? "maxpool2d" : "avgpool2d"; }
  const ImageGeometry& geometry() const { return geom_; }

 protected:
  Shape configure(const Shape& input) override;
  void forward_cpu(Context& ctx, const Tensor& x, Tensor& y, bool training) override;
  // Max: the gradient goes to the first element of each window equal to y (the matching forward's
  // output), i.e. the window's first maximum; nothing is stored between the calls.
  void backward_cpu(Context& ctx, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) override;
#if QTRAIN_HAS_CUDA  // pool2d.cu; without the toolkit the base refuses by layer type
  void forward_cuda(Context& ctx, const Tensor& x, Tensor& y, bool training) override;
  void backward_cuda(Context& ctx, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) override;
#endif

 private:
  PoolKind kind_;
  PoolOptions opt_;
  ImageGeometry geom_;
};

std::unique_ptr<Layer> make_maxpool2d(ConfigNode& cfg);
std::unique_ptr<Layer> make_avgpool2d(ConfigNode& cfg);

// CUDA entry points (pool2d.cu). x/dx (B, C, H, W), y/dy (B, C, OH, OW), f32.
void pool2d_forward_cuda(Context& ctx, PoolKind kind, const PoolOptions& opt, const ImageGeometry& g, const Tensor& x,
                         Tensor& y);
void pool2d_backward_cuda(Context& ctx, PoolKind kind, const PoolOptions& opt, const ImageGeometry& g, const Tensor& x,
                          const Tensor& dy, Tensor& dx);

}  // namespace qtrain
