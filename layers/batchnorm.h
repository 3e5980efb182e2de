// batchnorm2d / batchnorm1d: batch normalization with PyTorch's semantics (nn.BatchNorm2d/1d), so
// checkpoints map one to one: parameters `weight` (ones) and `bias` (zeros) when affine; buffers
// `running_mean` (zeros) and `running_var` (ones), which are checkpointed but neither exchanged nor
// optimized.
// - Training: normalizes with the batch's mean and biased variance per channel (over the batch and
//   the spatial positions), and updates running = (1 - momentum) running + momentum batch_stat, with
//   the unbiased variance (n / (n - 1)) for running_var, as PyTorch does.
// - Evaluation: normalizes with the running statistics.
// Input per sample: batchnorm2d (C, H, W); batchnorm1d (C) or (C, L). Config keys: eps (1e-5),
// momentum (0.1), affine (true), activation (none or relu). PyTorch's num_batches_tracked (used only
// with momentum None) is not kept.
// - activation: relu fuses the relu that follows batch norm in most convnets: the layer's output is
//   relu(bn(x)), the bits of a batchnorm layer followed by a relu layer, and its backward masks dy by
//   output > 0 first. On the CPU that is one pass over the data instead of two each way (the relu's
//   read and write of a whole activation, forward and backward); the memory-bound CIFAR ResNets spend
//   that time in their relu layers.
// CUDA: cuDNN's spatial batch norm, whose exponentialAverageFactor is the momentum above and whose
// running variance is also the unbiased one; a fused relu runs as a kernel of its own after it, and
// backward masks dy into a scratch tensor for cuDNN.
#pragma once

#include <memory>
#include <vector>

#include "framework/core/layer.h"

namespace qtrain {

class BatchNorm : public Layer {
 public:
  BatchNorm(int spatial_dims, double eps, double momentum, bool affine, bool relu = false);

  const char* type() const override { return spatial_dims_ == 2 ? "batchnorm2d" : "batchnorm1d"; }
  std::vector<ParamSpec> param_specs() const override;
  std::vector<ParamSpec> buffer_specs() const override;

  double eps() const { return eps_; }
  double momentum() const { return momentum_; }
  bool fused_relu() const { return relu_; }

 protected:
  Shape configure(const Shape& input) override;
  void forward_cpu(Context& ctx, const Tensor& x, Tensor& y, bool training) override;
  // Uses the batch statistics saved by the last training-mode forward.
  void backward_cpu(Context& ctx, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) override;
#if QTRAIN_HAS_CUDA  // batchnorm.cu; without the toolkit the base refuses by layer type
  void forward_cuda(Context& ctx, const Tensor& x, Tensor& y, bool training) override;
  void backward_cuda(Context& ctx, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) override;
#endif

 private:
  // Shared by both paths: rejects a training batch with one value per channel, records that backward
  // has statistics. Returns whether there is anything to compute (a non-empty batch).
  bool begin_forward(const Tensor& x, bool training);
  // Shared by both paths: backward needs a training forward's statistics; an empty batch zeroes the
  // gradients. Returns whether there is anything left to compute.
  bool begin_backward(const Tensor& x);

  int spatial_dims_;  // 2: (C, H, W); 1: (C) or (C, L)
  double eps_, momentum_;
  bool affine_;
  bool relu_;                           // activation: relu, fused
  int64_t channels_ = 0, spatial_ = 1;  // per sample: channels x spatial positions
  // Per channel, from the last training forward: mean and 1/sqrt(var + eps). CPU in f64; on CUDA,
  // device f32 tensors (cuDNN's saved mean and inverse variance) and unit scale / zero bias stand-ins
  // when not affine.
  std::vector<double> saved_mean_, saved_invstd_;
  bool has_batch_stats_ = false;  // a training forward ran, so backward has statistics to use
  Tensor cuda_saved_mean_, cuda_saved_invstd_, cuda_ones_, cuda_zeros_, cuda_dscale_, cuda_dbias_;
  Tensor cuda_dx_scratch_;  // cuDNN always writes dx; used when the caller needs none (first layer)
  Tensor cuda_dy_scratch_;  // with the fused relu: dy masked by output > 0, cuDNN's dy
#if QTRAIN_HAS_CUDA
  void ensure_cuda_state(Context& ctx, const Tensor& like, int64_t batch);
#endif
};

// Factories: batchnorm2d and batchnorm1d.
std::unique_ptr<Layer> make_batchnorm2d(ConfigNode& cfg);
std::unique_ptr<Layer> make_batchnorm1d(ConfigNode& cfg);

// CUDA entry points (batchnorm.cu). x, y: (B, C, S) f32 viewed as NCHW (B, C, S, 1); per-channel
// tensors (C). Training saves mean / inverse std into save_mean / save_invstd and updates the running
// statistics; backward writes dscale, dbias and (when non-null) dx.
void batchnorm_forward_training_cuda(Context& ctx, int64_t batch, int64_t channels, int64_t spatial, double eps,
                                     double momentum, const Tensor& x, const Tensor& scale, const Tensor& bias,
                                     Tensor& running_mean, Tensor& running_var, Tensor& save_mean, Tensor& save_invstd,
                                     Tensor& y);
void batchnorm_forward_inference_cuda(Context& ctx, int64_t batch, int64_t channels, int64_t spatial, double eps,
                                      const Tensor& x, const Tensor& scale, const Tensor& bias,
                                      const Tensor& running_mean, const Tensor& running_var, Tensor& y);
// Sets every element of t (f32, on ctx's device) to value, on ctx's stream.
void batchnorm_fill_cuda(Context& ctx, Tensor& t, float value);
void batchnorm_backward_cuda(Context& ctx, int64_t batch, int64_t channels, int64_t spatial, double eps,
                             const Tensor& x, const Tensor& dy, const Tensor& scale, const Tensor& save_mean,
                             const Tensor& save_invstd, Tensor& dscale, Tensor& dbias, Tensor* dx);

}  // namespace qtrain
