// pad_channels: the parameter-free identity shortcut of a residual block whose main path changes the
// shape ("option A" of He et al. 2016's CIFAR ResNets): subsamples the input spatially by `stride`
// (x[:, :, ::s, ::s], PyTorch's slicing, so the output is ceil(H/s) x ceil(W/s)) and zero-pads the
// channels to `channels`, the added zero channels split evenly before and after the input's (the
// extra one after when odd), as in the widely used PyTorch CIFAR ResNet (F.pad(x[:, :, ::2, ::2],
// (0, 0, 0, 0, planes // 4, planes // 4))).
// Config keys: channels (required, >= the input's channels), stride (default 1). Input (C, H, W).
#pragma once

#include <memory>

#include "framework/core/layer.h"

namespace qtrain {

class PadChannels : public Layer {
 public:
  PadChannels(int64_t channels, int64_t stride);

  const char* type() const override { return "pad_channels"; }
  // The geometry both paths share.
  struct Geometry {
    int64_t c_in = 0, h_in = 0, w_in = 0;
    int64_t c_out = 0, h_out = 0, w_out = 0;
    int64_t stride = 1, before = 0;  // zero channels in front of the input's
  };

 protected:
  Shape configure(const Shape& input) override;
  void forward_cpu(Context& ctx, const Tensor& x, Tensor& y, bool training) override;
  void backward_cpu(Context& ctx, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) override;
#if QTRAIN_HAS_CUDA  // pad_channels.cu; without the toolkit the base refuses by layer type
  void forward_cuda(Context& ctx, const Tensor& x, Tensor& y, bool training) override;
  void backward_cuda(Context& ctx, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) override;
#endif

 private:
  Geometry g_;
};

std::unique_ptr<Layer> make_pad_channels(ConfigNode& cfg);

// CUDA entry points (pad_channels.cu): y (B, c_out, h_out, w_out) from x, and dx from dy; f32.
void pad_channels_forward_cuda(Context& ctx, const PadChannels::Geometry& g, const Tensor& x, Tensor& y);
void pad_channels_backward_cuda(Context& ctx, const PadChannels::Geometry& g, const Tensor& dy, Tensor& dx);

}  // namespace qtrain
