// global_avgpool: the mean of each channel over all positions, (C, H, W) -> (C), as ResNet's last
// pooling (PyTorch's nn.AdaptiveAvgPool2d(1) followed by flatten). No config keys.
#pragma once

#include <memory>

#include "framework/core/layer.h"

namespace qtrain {

class GlobalAvgPool : public Layer {
 public:
  const char* type() const override { return "global_avgpool"; }

 protected:
  Shape configure(const Shape& input) override;
  void forward_cpu(Context& ctx, const Tensor& x, Tensor& y, bool training) override;
  void backward_cpu(Context& ctx, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) override;
#if QTRAIN_HAS_CUDA  // global_avgpool.cu; without the toolkit the base refuses by layer type
  void forward_cuda(Context& ctx, const Tensor& x, Tensor& y, bool training) override;
  void backward_cuda(Context& ctx, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) override;
#endif

 private:
  int64_t plane_ = 0;  // H*W
};

std::unique_ptr<Layer> make_global_avgpool(ConfigNode& cfg);

// CUDA entry points (global_avgpool.cu): x/dx (rows, plane) flattened, y/dy (rows), f32.
void global_avgpool_forward_cuda(Context& ctx, const Tensor& x, Tensor& y, int64_t rows, int64_t plane);
void global_avgpool_backward_cuda(Context& ctx, const Tensor& dy, Tensor& dx, int64_t rows, int64_t plane);

}  // namespace qtrain
