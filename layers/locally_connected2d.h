// locally_connected2d: a convolution without weight sharing (the "locally connected" layers of
// Dettmers' CIFAR-10 network and of cuda-convnet's "local" layer): every output position p = (oh, ow)
// has its own filter bank. With K = C*kh*kw and col_p the K input values under the window at p
// (im2col order: (c, i, j) with c slowest):
//   y[oc][oh][ow] = b[oc][oh][ow] + sum_k W[p][oc][k] col_p[k]
// Weight shape (OH*OW, out_channels, C*kh*kw): one (OC, K) matrix per position, contiguous, so the
// products are a strided batch of GEMMs over positions. Bias shape (out_channels, OH, OW).
// Initialization: U(+-1/sqrt(fan_in)) for both, fan_in = C*kh*kw (as conv2d).
// Config keys: out_channels (required), kernel (int or [kh, kw], required), stride (default 1),
// padding (default 0), bias (default true).
// CPU: the batch's windows are gathered per position, (P, B, K), then one GEMM per position over the
// whole batch. CUDA: the same gather as a kernel, then cublasSgemmStridedBatched over positions.
#pragma once

#include <memory>

#include "framework/core/layer.h"
#include "layers/conv_geometry.h"
#include "layers/cpu_scratch.h"

namespace qtrain {

class LocallyConnected2d : public Layer {
 public:
  LocallyConnected2d(int64_t out_channels, Window2d window, bool bias);

  const char* type() const override { return "locally_connected2d"; }
  const ImageGeometry& geometry() const { return geom_; }

  std::vector<ParamSpec> param_specs() const override;

 protected:
  Shape configure(const Shape& input) override;
  void forward_cpu(Context& ctx, const Tensor& x, Tensor& y, bool training) override;
  void backward_cpu(Context& ctx, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) override;
#if QTRAIN_HAS_CUDA  // locally_connected2d.cu; without the toolkit the base refuses by layer type
  void forward_cuda(Context& ctx, const Tensor& x, Tensor& y, bool training) override;
  void backward_cuda(Context& ctx, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) override;
#endif

 private:
  template <typename T>
  void forward_reference(Context& ctx, const T* x, T* y, int64_t batch);
  template <typename T>
  void backward_reference(Context& ctx, const T* x, const T* dy, T* dx, int64_t batch);

  int64_t out_channels_;
  Window2d win_;
  bool bias_;
  ImageGeometry geom_;
  CpuScratch scratch_;
  Tensor device_scratch_;  // CUDA path: gathered windows and transposed outputs
};

std::unique_ptr<Layer> make_locally_connected2d(ConfigNode& cfg);

// CUDA entry points (locally_connected2d.cu). x/dx (B, C, H, W), w (P, OC, K), b (OC, OH, OW) or null,
// y/dy (B, OC, OH, OW); f32. scratch grows as needed.
void locally_connected2d_forward_cuda(Context& ctx, const ImageGeometry& g, const Window2d& win, const Tensor& x,
                                      const Tensor& w, const Tensor* b, Tensor& y, Tensor& scratch);
void locally_connected2d_backward_cuda(Context& ctx, const ImageGeometry& g, const Window2d& win, const Tensor& x,
                                       const Tensor& w, const Tensor& dy, Tensor& dw, Tensor* db, Tensor* dx,
                                       Tensor& scratch);

}  // namespace qtrain
