// flatten: (B, d1, d2, ...) -> (B, d1*d2*...), the bridge from image-shaped inputs to dense layers.
// Tensors are contiguous, so forward and backward are plain copies of the same bytes under another
// shape (the caller owns y and dx, so a view cannot be returned).
#pragma once

#include <memory>

#include "framework/core/layer.h"

namespace qtrain {

class Flatten : public Layer {
 public:
  const char* type() const override { return "flatten"; }

 protected:
  Shape configure(const Shape& input) override;
  void forward_cpu(Context& ctx, const Tensor& x, Tensor& y, bool training) override;
  void backward_cpu(Context& ctx, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) override;
#if QTRAIN_HAS_CUDA  // flatten.cu; without the toolkit the base refuses by layer type
  void forward_cuda(Context& ctx, const Tensor& x, Tensor& y, bool training) override;
  void backward_cuda(Context& ctx, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) override;
#endif
};

// Factory for the layer registry: no keys of its own.
std::unique_ptr<Layer> make_flatten(ConfigNode& cfg);

// CUDA entry point (flatten.cu; built with the CUDA toolkit only): a device-to-device copy on ctx's stream.
void flatten_copy_cuda(Context& ctx, const Tensor& src, Tensor& dst);

}  // namespace qtrain
