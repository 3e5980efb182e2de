// The layer contract. A layer owns its configuration and its shapes; its parameters and their
// gradients are views into Net's flat arenas (bound once after setup), so the optimizer and the
// gradient exchange see one contiguous buffer each.
//
// Shapes passed to setup() exclude the batch dimension; tensors passed to forward/backward include it
// as dimension 0. forward() and backward() dispatch on the tensor's device: the CPU path is the
// reference (plain loops or BLAS, templated on float/double so gradient checks run in float64), the
// CUDA path lives in the layer's .cu file. A CUDA tensor reaching a layer without a CUDA path is an
// error, never a silent CPU fallback.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "framework/config_node.h"
#include "framework/context.h"
#include "framework/registry.h"
#include "framework/tensor.h"

namespace qtrain {

// How a parameter is initialized (PyTorch's defaults are the reference).
enum class Init {
  zeros,
  ones,
  uniform_fan_in,  // U(-1/sqrt(fan_in), 1/sqrt(fan_in)): PyTorch's nn.Linear weight and bias
  he_normal,       // N(0, 2/fan_in)
  glorot_uniform,  // U(-a, a), a = sqrt(6/(fan_in+fan_out))
};

struct ParamSpec {
  std::string name;  // "weight", "bias"; Net prefixes the layer name: "dense1.weight"
  Shape shape;
  Init init = Init::zeros;
  int64_t fan_in = 1;
  int64_t fan_out = 1;
  // Optional: after `init`, elements [fill_begin, fill_end) are set to fill_value (the LSTM's
  // forget-gate bias). Empty by default.
  int64_t fill_begin = 0, fill_end = 0;
  double fill_value = 0.0;
};

class Layer {
 public:
  virtual ~Layer() = default;

  virtual const char* type() const = 0;
  const std::string& name() const { return name_; }
  // Position in the net; part of the random key of stochastic layers (dropout).
  int index() const { return index_; }
  void set_identity(std::string name, int index) {
    name_ = std::move(name);
    index_ = index;
  }

  // Validates the input shape (per sample) and returns the output shape (per sample).
  virtual Shape setup(const Shape& input) = 0;
  virtual std::vector<ParamSpec> param_specs() const { return {}; }
  // Non-trainable state saved in checkpoints but neither exchanged nor optimized (batch norm's
  // running statistics). Initialized by Net per spec.init like parameters; `fan_in` is unused.
  virtual std::vector<ParamSpec> buffer_specs() const { return {}; }
  // Views into the arenas, in param_specs() order, on the net's device and dtype.
  void bind(std::vector<Tensor> params, std::vector<Tensor> grads) {
    params_ = std::move(params);
    grads_ = std::move(grads);
  }
  // Views into Net's buffer arena, in buffer_specs() order.
  void bind_buffers(std::vector<Tensor> buffers) { buffers_ = std::move(buffers); }
  std::vector<Tensor>& params() { return params_; }
  std::vector<Tensor>& grads() { return grads_; }
  std::vector<Tensor>& buffers() { return buffers_; }

  // Multi-input layers (add). Net calls only the *_inputs entry points below; their defaults forward
  // to the single-input functions, so a single-input layer implements just those.
  static constexpr int kAnyNumberOfInputs = -1;  // two or more
  // How many inputs the layer takes: 1, or kAnyNumberOfInputs.
  virtual int num_inputs() const { return 1; }
  virtual Shape setup_inputs(const std::vector<Shape>& inputs) {
    QT_CHECK(inputs.size() == 1, "{} takes one input, got {}", type(), inputs.size());
    return setup(inputs[0]);
  }
  virtual void forward_inputs(Context& ctx, std::span<const Tensor> xs, Tensor& y, bool training) {
    forward(ctx, xs[0], y, training);
  }
  // dxs[k] undefined: input k needs no gradient (the net input).
  virtual void backward_inputs(Context& ctx, std::span<const Tensor> xs, const Tensor& y, const Tensor& dy,
                               std::span<Tensor> dxs) {
    backward(ctx, xs[0], y, dy, dxs[0]);
  }

  // x: (B, input...), y: (B, output...) allocated by the caller; y is overwritten.
  virtual void forward(Context& ctx, const Tensor& x, Tensor& y, bool training) = 0;
  // Given dy, overwrites this layer's parameter gradients and, when dx is defined, writes dx.
  // x and y are the tensors of the matching forward call (training mode).
  virtual void backward(Context& ctx, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) = 0;

  // Sequence batches (Net::forward_sequence): the B samples' T frames arrive as B*T rows (sample-
  // major, sample b's frame t at row b*T + t) and `lengths` ((B) i32, CPU) holds each sample's valid
  // frames. Per-frame layers (dense, activations) ignore it; recurrent layers (lstm) need it. Called
  // before every forward of a sequence batch.
  virtual void set_sequence_lengths(const Tensor& /*lengths*/) {}
  // Whether the layer runs only on sequence batches (it needs set_sequence_lengths: lstm), so that a
  // model holding it on an image or vector dataset is refused at start-up, not at the first forward.
  virtual bool needs_sequence_batches() const { return false; }

 protected:
  std::vector<Tensor> params_;
  std::vector<Tensor> grads_;
  std::vector<Tensor> buffers_;

 private:
  std::string name_;
  int index_ = 0;
};

// The base of layers with several inputs: they implement the *_inputs entry points; the single-input
// ones are never called by Net and say so if a caller tries.
class MultiInputLayer : public Layer {
 public:
  int num_inputs() const override { return kAnyNumberOfInputs; }
  Shape setup(const Shape&) final { throw Error(fmt::format("{} takes two or more inputs", type())); }
  void forward(Context&, const Tensor&, Tensor&, bool) final {
    throw Error(fmt::format("{} takes two or more inputs", type()));
  }
  void backward(Context&, const Tensor&, const Tensor&, const Tensor&, Tensor&) final {
    throw Error(fmt::format("{} takes two or more inputs", type()));
  }
};

// A layer factory reads the layer's own keys from its config block ("type" and "name" are read by
// Net) and leaves unknown keys to ConfigNode::finish().
using LayerRegistry = Registry<Layer, ConfigNode&>;

}  // namespace qtrain
