// lrn: local response normalization across channels, as in AlexNet and PyTorch's
// nn.LocalResponseNorm(size, alpha, beta, k), on one image (C, H, W) per sample:
//   D[c] = k + alpha/size * sum_{c' = c - size/2}^{c + (size-1)/2} x[c']^2   (channels outside [0, C) add 0)
//   y[c] = x[c] * D[c]^-beta
// alpha is divided by the window size, as PyTorch does (it averages the squares); AlexNet's paper
// writes alpha without the division, so its alpha = 1e-4 is PyTorch's (and this layer's) 5e-4 for
// size 5. cuDNN's cudnnLRNCrossChannelForward uses the same convention (its documentation: lrnAlpha
// "is divided by the window width"), and for odd sizes the same centered window, so the CUDA path
// passes alpha unchanged; it supports odd sizes 1..15, k >= 1e-5 and beta >= 0.01 (cuDNN's limits).
// Config keys: size (required, >= 1), alpha (default 1e-4), beta (default 0.75), k (default 1): the
// defaults of nn.LocalResponseNorm.
#pragma once

#include <memory>

#include "framework/core/layer.h"
#include "layers/cpu_scratch.h"

namespace qtrain {

struct LrnOptions {
  int64_t size = 5;
  double alpha = 1e-4;
  double beta = 0.75;
  double k = 1.0;
};

class Lrn : public Layer {
 public:
  explicit Lrn(LrnOptions options);

  const char* type() const override { return "lrn"; }

 protected:
  Shape configure(const Shape& input) override;
  void forward_cpu(Context& ctx, const Tensor& x, Tensor& y, bool training) override;
  void backward_cpu(Context& ctx, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) override;
#if QTRAIN_HAS_CUDA  // lrn.cu; without the toolkit the base refuses by layer type
  void forward_cuda(Context& ctx, const Tensor& x, Tensor& y, bool training) override;
  void backward_cuda(Context& ctx, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) override;
#endif

 private:
  LrnOptions opt_;
  CpuScratch scratch_;
};

std::unique_ptr<Layer> make_lrn(ConfigNode& cfg);

// CUDA entry points (lrn.cu, cuDNN). x, y, dy, dx (B, C, H, W), f32.
void lrn_forward_cuda(Context& ctx, const LrnOptions& opt, const Tensor& x, Tensor& y);
void lrn_backward_cuda(Context& ctx, const LrnOptions& opt, const Tensor& x, const Tensor& y, const Tensor& dy,
                       Tensor& dx);

}  // namespace qtrain
