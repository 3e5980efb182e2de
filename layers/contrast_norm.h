// contrast_norm: local contrast normalization within each channel over a size x size spatial window,
// cuda-convnet's "cnorm" layer (Krizhevsky's cuda-convnet, layer.cu ContrastNormLayer::fpropActs and
// the kCNorm kernels; the layer of Dettmers' CIFAR-10 network). For a plane x (H, W):
//   m(p)  = 1/size^2 * sum_{q in W(p)} x(q)                    local mean (zero padding, fixed divisor)
//   d(q)  = x(q) - m(q)                                        each position minus its own local mean
//   D(p)  = k + alpha/size^2 * sum_{q in W(p)} d(q)^2          local (non-normalized) variance
//   y(p)  = x(p) * D(p)^-beta
// W(p) is the size x size window whose top-left corner is p - size/2 in both axes (cuda-convnet's
// start = -size/2), clipped to the plane. As in cuda-convnet the numerator is x itself and the
// centering enters through D only; cuda-convnet's "scale" is alpha/size^2 after its Python layer
// parser divides it, and its constant is k = 1.
// The gradient here is exact, including the path through the local means (cuda-convnet's backward
// treats d as a constant input); the float64 gradient check holds it to that.
// Config keys: size (required, >= 1), alpha (default 1e-3), beta (default 0.75), k (default 1).
#pragma once

#include <memory>

#include "framework/core/layer.h"
#include "layers/cpu_scratch.h"

namespace qtrain {

struct ContrastNormOptions {
  int64_t size = 9;
  double alpha = 1e-3;
  double beta = 0.75;
  double k = 1.0;
};

class ContrastNorm : public Layer {
 public:
  explicit ContrastNorm(ContrastNormOptions options);

  const char* type() const override { return "contrast_norm"; }

 protected:
  Shape configure(const Shape& input) override;
  void forward_cpu(Context& ctx, const Tensor& x, Tensor& y, bool training) override;
  void backward_cpu(Context& ctx, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) override;
#if QTRAIN_HAS_CUDA  // contrast_norm.cu; without the toolkit the base refuses by layer type
  void forward_cuda(Context& ctx, const Tensor& x, Tensor& y, bool training) override;
  void backward_cuda(Context& ctx, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) override;
#endif

 private:
  ContrastNormOptions opt_;
  CpuScratch scratch_;
  Tensor device_scratch_;  // CUDA path: d, D and the backward temporaries, grown to the largest batch
};

std::unique_ptr<Layer> make_contrast_norm(ConfigNode& cfg);

// CUDA entry points (contrast_norm.cu). x, y, dy, dx (B, C, H, W), f32; scratch grows as needed.
void contrast_norm_forward_cuda(Context& ctx, const ContrastNormOptions& opt, const Tensor& x, Tensor& y,
                                Tensor& scratch);
void contrast_norm_backward_cuda(Context& ctx, const ContrastNormOptions& opt, const Tensor& x, const Tensor& dy,
                                 Tensor& dx, Tensor& scratch);

}  // namespace qtrain
