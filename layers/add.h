// add: the elementwise sum of two or more inputs of one shape (the join of a residual block).
// Config keys besides `inputs:` (read by Net), e.g. {type: add, inputs: [conv2, input]}: activation
// (none or relu). Backward copies dy into the gradient of every input that needs one.
// - activation: relu fuses the relu that ends a residual block: the output is relu(sum), the bits of
//   add followed by a relu layer, and backward writes dy masked by output > 0 into each input's
//   gradient. One pass over the data each way instead of two (see batchnorm.h).
//
// Forward may run in place over its first input (y the same tensor as xs[0]): Net sums the gradients
// of an activation that feeds several layers that way, through the registry's `add`.
#pragma once

#include <memory>

#include "framework/core/layer.h"

namespace qtrain {

class Add : public MultiInputLayer {
 public:
  explicit Add(bool relu = false) : relu_(relu) {}
  const char* type() const override { return "add"; }
  bool fused_relu() const { return relu_; }

 protected:
  Shape configure_inputs(const std::vector<Shape>& inputs) override;
  void forward_inputs_cpu(Context& ctx, std::span<const Tensor> xs, Tensor& y, bool training) override;
  void backward_inputs_cpu(Context& ctx, std::span<const Tensor> xs, const Tensor& y, const Tensor& dy,
                           std::span<Tensor> dxs) override;
#if QTRAIN_HAS_CUDA  // add.cu; without the toolkit the base refuses by layer type
  void forward_inputs_cuda(Context& ctx, std::span<const Tensor> xs, Tensor& y, bool training) override;
  void backward_inputs_cuda(Context& ctx, std::span<const Tensor> xs, const Tensor& y, const Tensor& dy,
                            std::span<Tensor> dxs) override;
#endif

 private:
  bool relu_;  // activation: relu, fused
};

std::unique_ptr<Layer> make_add(ConfigNode& cfg);

// dst += src, elementwise; same shape, dtype and device (CPU f32/f64, CUDA f32).
void add_into(Context& ctx, Tensor& dst, const Tensor& src);

// CUDA entry points (add.cu; built with the CUDA toolkit only); f32, n elements each.
void add_forward_cuda(Context& ctx, std::span<const Tensor> xs, Tensor& y);
void add_into_cuda(Context& ctx, Tensor& dst, const Tensor& src);
void add_copy_cuda(Context& ctx, const Tensor& src, Tensor& dst);

}  // namespace qtrain
