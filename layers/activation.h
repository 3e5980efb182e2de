// Elementwise activations: relu, tanh and sigmoid, one class registered under three type names.
// Each derivative is written in terms of the output y (relu: y > 0, tanh: 1 - y^2, sigmoid:
// y (1 - y)), so backward needs no copy of x and no second transcendental evaluation.
#pragma once

#include <memory>

#include "framework/core/layer.h"

namespace qtrain {

enum class ActivationKind : unsigned char { relu, tanh, sigmoid };
const char* activation_name(ActivationKind kind);

class Activation : public Layer {
 public:
  explicit Activation(ActivationKind kind) : kind_(kind) {}
  const char* type() const override { return activation_name(kind_); }
  ActivationKind kind() const { return kind_; }

 protected:
  Shape configure(const Shape& input) override;
  void forward_cpu(Context& ctx, const Tensor& x, Tensor& y, bool training) override;
  void backward_cpu(Context& ctx, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) override;
#if QTRAIN_HAS_CUDA
  void forward_cuda(Context& ctx, const Tensor& x, Tensor& y, bool training) override;
  void backward_cuda(Context& ctx, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) override;
#endif

 private:
  ActivationKind kind_;
};

// Factory for the layer registry: no keys of its own.
std::unique_ptr<Layer> make_activation(ConfigNode& cfg, ActivationKind kind);

// CUDA entry points (activation.cu; built with the CUDA toolkit only). Same numel, f32, ctx's device.
void activation_forward_cuda(Context& ctx, ActivationKind kind, const Tensor& x, Tensor& y);
void activation_backward_cuda(Context& ctx, ActivationKind kind, const Tensor& y, const Tensor& dy, Tensor& dx);
// y = relu(y) in place, for the layers that fuse a relu (batchnorm2d, add with `activation: relu`).
void relu_in_place_cuda(Context& ctx, Tensor& y);

}  // namespace qtrain
