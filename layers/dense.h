// dense: a fully connected layer, y = x W^T + b, with W of shape (out, in) as in PyTorch's nn.Linear
// (so checkpoints map one to one) and PyTorch's default initialization, U(+-1/sqrt(in)) for W and b.
// Config keys: units (required), bias (default true).
#pragma once

#include <memory>

#include "framework/core/layer.h"

namespace qtrain {

class Dense : public Layer {
 public:
  Dense(int64_t units, bool bias);

  const char* type() const override { return "dense"; }
  int64_t units() const { return units_; }
  bool has_bias() const { return bias_; }

  std::vector<ParamSpec> param_specs() const override;

 protected:
  Shape configure(const Shape& input) override;
  void forward_cpu(Context& ctx, const Tensor& x, Tensor& y, bool training) override;
  // Exactly two GEMMs (dW, and dx only when dx is defined) plus the bias reduction.
  void backward_cpu(Context& ctx, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) override;
#if QTRAIN_HAS_CUDA  // dense.cu; without the toolkit the base refuses by layer type
  void forward_cuda(Context& ctx, const Tensor& x, Tensor& y, bool training) override;
  void backward_cuda(Context& ctx, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) override;
#endif

 private:
  int64_t units_;
  bool bias_;
  int64_t in_ = -1;  // -1 until setup()
};

// Factory for the layer registry: reads units and bias, rejects other keys.
std::unique_ptr<Layer> make_dense(ConfigNode& cfg);

// CUDA entry points (dense.cu; built with the CUDA toolkit only). Shapes: x (B, in), w (out, in),
// b (out) or null, y/dy (B, out), dx (B, in) or null (first layer); all f32 on ctx's device.
void dense_forward_cuda(Context& ctx, const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y);
void dense_backward_cuda(Context& ctx, const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dw, Tensor* db,
                         Tensor* dx);

}  // namespace qtrain
