// conv2d: a 2-D convolution (cross-correlation, as PyTorch's nn.Conv2d) over one image (C, H, W) per
// sample: y[oc][oh][ow] = b[oc] + sum_{c,i,j} W[oc][c][i][j] x[c][oh*sh - ph + i][ow*sw - pw + j].
// Weight (out_channels, C, kh, kw) and bias (out_channels), PyTorch's layout and default
// initialization (both U(+-1/sqrt(fan_in)), fan_in = C*kh*kw), so checkpoints map one to one.
// Config keys: out_channels (required), kernel (int or [kh, kw], required), stride (default 1),
// padding (default 0), bias (default true).
// CPU: im2col + one OpenBLAS GEMM per group of samples, the batch split over the context's CPU
// threads (conv2d.cpp); a 1x1 stride-1 unpadded convolution is a plain GEMM on the input; a 3x3
// stride-1 convolution with padding <= 2 runs as Winograd F(2x2, 3x3) (winograd.h) or, for its
// forward and dx on maps of at least 8x8, F(4x4, 3x3) (winograd4.h). CUDA: cuDNN (conv2d.cu).
#pragma once

#include <memory>

#include "framework/core/layer.h"
#include "layers/conv_geometry.h"
#include "layers/cpu_scratch.h"
#include "layers/winograd.h"

namespace qtrain {

// cuDNN descriptors, chosen algorithms and workspace of one layer (conv2d.cu); built on first use and
// rebuilt only when the batch size changes.
struct Conv2dCudnn;
struct Conv2dCudnnDeleter {
  void operator()(Conv2dCudnn* state) const noexcept;
};
using Conv2dCudnnPtr = std::unique_ptr<Conv2dCudnn, Conv2dCudnnDeleter>;

// How the CPU path computes a convolution: `automatic` picks Winograd where it fits (winograd_fits),
// for the forward and dx passes F(4x4, 3x3) where conv2d.cpp's winograd4_preferred says so and
// F(2x2, 3x3) otherwise, and im2col elsewhere; `im2col` forces the im2col path for every geometry (the
// reference the tests compare Winograd against); `winograd2` and `winograd4` force one Winograd tile
// for forward and dx where Winograd fits. The weight gradient is F(3x3, 2x2) in every Winograd case.
enum class Conv2dCpuAlgorithm { automatic, im2col, winograd2, winograd4 };

class Conv2d : public Layer {
 public:
  Conv2d(int64_t out_channels, Window2d window, bool bias);

  void set_cpu_algorithm(Conv2dCpuAlgorithm algorithm) { cpu_algorithm_ = algorithm; }

  const char* type() const override { return "conv2d"; }
  const Window2d& window() const { return win_; }
  const ImageGeometry& geometry() const { return geom_; }

  std::vector<ParamSpec> param_specs() const override;

 protected:
  Shape configure(const Shape& input) override;
  void forward_cpu(Context& ctx, const Tensor& x, Tensor& y, bool training) override;
  void backward_cpu(Context& ctx, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) override;
#if QTRAIN_HAS_CUDA  // conv2d.cu; without the toolkit the base refuses by layer type
  void forward_cuda(Context& ctx, const Tensor& x, Tensor& y, bool training) override;
  void backward_cuda(Context& ctx, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) override;
#endif

 private:
  template <typename T>
  void forward_reference(Context& ctx, const T* x, T* y, int64_t batch);
  template <typename T>
  void backward_reference(Context& ctx, const T* x, const T* dy, T* dx, int64_t batch);
  bool use_winograd() const { return cpu_algorithm_ != Conv2dCpuAlgorithm::im2col && winograd_fits(win_); }
  // Whether a Winograd pass with an oh x ow output map runs as F(4x4, 3x3).
  bool use_winograd4(int64_t oh, int64_t ow) const;
  template <typename T>
  void forward_winograd(Context& ctx, const T* x, T* y, int64_t batch);
  template <typename T>
  void backward_winograd(Context& ctx, const T* x, const T* dy, T* dx, int64_t batch);
  // Samples per im2col block of one lane: as many as keep its column matrix near kLaneColumnBudget
  // elements (per_sample each), at most `samples`.
  static int64_t block_samples(int64_t per_sample, int64_t samples);

  int64_t out_channels_;
  Window2d win_;
  bool bias_;
  ImageGeometry geom_;
  Conv2dCpuAlgorithm cpu_algorithm_ = Conv2dCpuAlgorithm::automatic;
  CpuScratch scratch_;
  Conv2dCudnnPtr cudnn_;
};

// Factory for the layer registry.
std::unique_ptr<Layer> make_conv2d(ConfigNode& cfg);

// CUDA entry points (conv2d.cu; built with the CUDA toolkit only). x (B, C, H, W), w (OC, C, kh, kw),
// b (OC) or null, y/dy (B, OC, OH, OW), dx null for a first layer; f32 on ctx's device.
void conv2d_forward_cuda(Context& ctx, Conv2dCudnnPtr& state, const ImageGeometry& g, const Window2d& win,
                         const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y);
void conv2d_backward_cuda(Context& ctx, Conv2dCudnnPtr& state, const ImageGeometry& g, const Window2d& win,
                          const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dw, Tensor* db, Tensor* dx);

}  // namespace qtrain
