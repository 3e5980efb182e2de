// lstm: a multi-layer, optionally bidirectional LSTM over padded variable-length sequences, with the
// gates and parameters of PyTorch's nn.LSTM (so reference tests and checkpoints map one to one):
//   i = sigma(W_ii x + b_ii + W_hi h + b_hi)   f = sigma(...)   g = tanh(...)   o = sigma(...)
//   c' = f c + i g,   h' = o tanh(c')
// Per layer l and direction (suffix "_reverse"): weight_ih_l{l} (4H, in), weight_hh_l{l} (4H, H),
// bias_ih_l{l} (4H), bias_hh_l{l} (4H), gate rows in the order i, f, g, o. Layer l > 0 reads the
// concatenated [forward, reverse] outputs of layer l-1. Initialization: PyTorch's U(+-1/sqrt(H)) for
// everything, then the forget-gate rows of bias_ih set to forget_bias (default 1.0) and those of
// bias_hh to 0, so the forget gate starts open (Jozefowicz et al. 2015).
//
// Sequences: the layer runs inside Net::forward_sequence, so x is (B*T, in) with sample b's frame t at
// row b*T + t and set_sequence_lengths gives each sample's length n_b. The forward direction runs
// t = 0..n_b-1, the reverse direction t = n_b-1..0 (each sample starts at its own last frame); outputs
// at t >= n_b are zero, and gradients arriving there are ignored, so padding never leaks in.
//
// CPU path (templated on float/double): per layer and direction one GEMM projects every frame's input
// at once, then one (B, H) x (H, 4H) GEMM per time step for the recurrence; backward mirrors it (one
// GEMM per step for dh and dW_hh, one each for dW_ih and dx over all frames). The gates' sigmoid and
// tanh run over whole rows through layers/vector_math.h (SIMD approximations within a few float
// epsilons for float, the library functions for double).
//
// CUDA path (f32, lstm.cu): cuDNN's RNN API (CUDNN_LSTM, double bias, batch-major unpacked data with
// per-sample lengths), whose gates, gate order and two biases are PyTorch's, so qtrain's parameters
// stay the source of truth and are copied into cuDNN's weight space before every forward (and the
// weight gradients out of it after backward). Same semantics as the CPU path, padding included.
#pragma once

#include <memory>
#include <vector>

#include "framework/core/layer.h"
#include "layers/cpu_scratch.h"

namespace qtrain {

// cuDNN descriptors, weight space, work and reserve space of one lstm layer (lstm.cu); built on first
// use, the buffers grown only when a larger (batch, frames) arrives.
struct LstmCudnn;
struct LstmCudnnDeleter {
  void operator()(LstmCudnn* state) const noexcept;
};
using LstmCudnnPtr = std::unique_ptr<LstmCudnn, LstmCudnnDeleter>;

// The sizes the CUDA path needs besides the tensors.
struct LstmCudaShape {
  int64_t input = 0, hidden = 0, layers = 0;
  int dirs = 1;
  int64_t batch = 0, frames = 0;
};

struct LstmOptions {
  int64_t hidden_size = 0;
  int64_t num_layers = 1;
  bool bidirectional = false;
  double forget_bias = 1.0;
};

class Lstm : public Layer {
 public:
  explicit Lstm(LstmOptions options);
  const char* type() const override { return "lstm"; }
  const LstmOptions& options() const { return options_; }

  std::vector<ParamSpec> param_specs() const override;
  void set_sequence_lengths(const Tensor& lengths) override;
  bool needs_sequence_batches() const override { return true; }

  // Work space of the CPU path, grown to the largest batch seen and then reused (no allocation or
  // clearing per call; every value is written before it is read). One set serves both dtypes, as
  // the layer runs in one at a time; the forward's outputs, gates and cells are read by the backward.
  struct Workspace {
    std::vector<CpuScratch> outputs;  // per layer but the last: (B*T, dirs*H)
    std::vector<CpuScratch> gates;    // per layer and direction: activated i, f, g, o (B*T, 4H)
    std::vector<CpuScratch> cells;    // per layer and direction: c (B*T, H)
    // Per direction (the directions run side by side): h, c, step, hprev, dh, dc, dgates, tanh_c.
    CpuScratch h, c, step, hprev, dh, dc, dgates, tanh_c, dlayer_out, dlayer_in;
    CpuScratch zeros;  // one row of H zeros, read by both directions
  };

 protected:
  // x and y are (B*T, features) rows (see Layer::set_sequence_lengths); the entry points check them
  // as a batch of B*T rows, frames_of() checks that the rows split into the lengths' B sequences.
  Shape configure(const Shape& input) override;
  void forward_cpu(Context& ctx, const Tensor& x, Tensor& y, bool training) override;
  void backward_cpu(Context& ctx, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) override;
#if QTRAIN_HAS_CUDA  // lstm.cu; without the toolkit the base refuses by layer type
  void forward_cuda(Context& ctx, const Tensor& x, Tensor& y, bool training) override;
  void backward_cuda(Context& ctx, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) override;
#endif

 private:
  template <typename T>
  void forward_reference(Context& ctx, const T* x, T* y, int64_t batch, int64_t frames, Workspace& ws);
  template <typename T>
  void backward_reference(Context& ctx, const T* x, const T* y, const T* dy, T* dx, int64_t batch, int64_t frames,
                          Workspace& ws);
  template <typename F>
  void for_each_direction(Context& ctx, F&& fn);
  int64_t layer_input(int64_t layer) const { return layer == 0 ? input_ : dirs_ * options_.hidden_size; }
  const Tensor& param(int64_t layer, int dir, int which) const {
    return params_[static_cast<size_t>((layer * dirs_ + dir) * 4 + which)];
  }
  Tensor& grad(int64_t layer, int dir, int which) {
    return grads_[static_cast<size_t>((layer * dirs_ + dir) * 4 + which)];
  }
  int64_t frames_of(const Tensor& x) const;
  LstmCudaShape cuda_shape(int64_t batch, int64_t frames) const;

  LstmOptions options_;
  int dirs_ = 1;
  int64_t input_ = -1;
  std::vector<int32_t> lengths_;
  Workspace ws_;
  LstmCudnnPtr cudnn_;
};

std::unique_ptr<Layer> make_lstm(ConfigNode& cfg);

// CUDA entry points (lstm.cu; built with the CUDA toolkit only). x (B*T, input) and y/dy
// (B*T, dirs*H) f32 on ctx's device, sample b's frame t at row b*T + t; lengths (B) on the host, each
// in [0, T]; params/grads in Lstm::param_specs() order. Backward needs the training-mode forward of
// the same x just before it (its reserve space); dx is null when the input needs no gradient.
void lstm_forward_cuda(Context& ctx, LstmCudnnPtr& state, const LstmCudaShape& shape,
                       const std::vector<int32_t>& lengths, const std::vector<Tensor>& params, const Tensor& x,
                       Tensor& y, bool training);
void lstm_backward_cuda(Context& ctx, LstmCudnnPtr& state, const LstmCudaShape& shape,
                        const std::vector<Tensor>& params, std::vector<Tensor>& grads, const Tensor& x, const Tensor& y,
                        const Tensor& dy, Tensor* dx);

}  // namespace qtrain
