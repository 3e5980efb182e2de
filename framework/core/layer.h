// The layer contract. A layer owns its configuration and its shapes; its parameters and their
// gradients are views into Net's flat arenas (bound once after setup), so the optimizer and the
// gradient exchange see one contiguous buffer each.
//
// Shapes passed to setup() exclude the batch dimension; tensors passed to forward/backward include it
// as dimension 0. The base class owns the contract (Caffe's split): its non-virtual forward() and
// backward() check the operands once, for every layer, and dispatch to the layer's protected
// forward_cpu/forward_cuda and backward_cpu/backward_cuda, which only compute.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "framework/core/config_node.h"
#include "framework/core/context.h"
#include "framework/core/registry.h"
#include "framework/core/tensor.h"

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
  // "dense 'dense1'" for messages; just the type when the layer has no name (tests, tools).
  std::string describe() const;

  // Fixes the layer's shapes: validates the input shape(s) (per sample) and returns the output shape
  // (per sample). Every later forward and backward is checked against these shapes.
  Shape setup(const Shape& input) { return setup_inputs({input}); }
  Shape setup_inputs(const std::vector<Shape>& inputs);
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

  static constexpr int kAnyNumberOfInputs = -1;  // two or more
  // How many inputs the layer takes: 1, or kAnyNumberOfInputs (add).
  virtual int num_inputs() const { return 1; }

  // The checked entry points. Each checks every operand against the shapes fixed by setup (x: (B,
  // input...), y and dy: (B, output...), dx: like x; one batch size B, one float dtype, all on the
  // context's device, the parameters bound and of that dtype), then runs the CPU or the CUDA
  // implementation per the context's device.
  // y is allocated by the caller and overwritten.
  void forward(Context& ctx, const Tensor& x, Tensor& y, bool training) {
    forward_inputs(ctx, std::span<const Tensor>(&x, 1), y, training);
  }
  // Given dy, overwrites this layer's parameter gradients and, when dx is defined, writes dx (dx
  // undefined: the input needs no gradient). x and y are the tensors of the matching forward call
  // (training mode).
  void backward(Context& ctx, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) {
    backward_inputs(ctx, std::span<const Tensor>(&x, 1), y, dy, std::span<Tensor>(&dx, 1));
  }
  // The same for any number of inputs; Net calls only these.
  void forward_inputs(Context& ctx, std::span<const Tensor> xs, Tensor& y, bool training);
  void backward_inputs(Context& ctx, std::span<const Tensor> xs, const Tensor& y, const Tensor& dy,
                       std::span<Tensor> dxs);

  // Sequence batches (Net::forward_sequence): the B samples' T frames arrive as B*T rows (sample-
  // major, sample b's frame t at row b*T + t) and `lengths` ((B) i32, CPU) holds each sample's valid
  // frames. Per-frame layers (dense, activations) ignore it; recurrent layers (lstm) need it. Called
  // before every forward of a sequence batch. The rows are the batch dimension of the checks.
  virtual void set_sequence_lengths(const Tensor& /*lengths*/) {}
  // Whether the layer runs only on sequence batches (it needs set_sequence_lengths: lstm), so that a
  // model holding it on an image or vector dataset is refused at start-up, not at the first forward.
  virtual bool needs_sequence_batches() const { return false; }

 protected:
  // What a layer implements. configure validates the input shape (per sample; an unusable one is an
  // input_error, the model's fault) and returns the output shape. The *_cpu and *_cuda functions are
  // called only with operands the entry points checked: the CPU path is the reference (plain loops
  // or BLAS, templated on float/double so gradient checks run in float64), the CUDA path (f32 only)
  // lives in the layer's .cu file. A layer without a CUDA path keeps the defaults, which refuse a
  // CUDA context by name (never a silent CPU fallback). A layer without parameters is not called for
  // a backward that wants no input gradient.
  virtual Shape configure(const Shape& input) = 0;
  virtual void forward_cpu(Context& ctx, const Tensor& x, Tensor& y, bool training) = 0;
  virtual void backward_cpu(Context& ctx, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) = 0;
  virtual void forward_cuda(Context& ctx, const Tensor& x, Tensor& y, bool training);
  virtual void backward_cuda(Context& ctx, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx);
  // Multi-input layers (MultiInputLayer) implement these instead; for one input they forward to the above.
  virtual Shape configure_inputs(const std::vector<Shape>& inputs) { return configure(inputs[0]); }
  virtual void forward_inputs_cpu(Context& ctx, std::span<const Tensor> xs, Tensor& y, bool training) {
    forward_cpu(ctx, xs[0], y, training);
  }
  virtual void forward_inputs_cuda(Context& ctx, std::span<const Tensor> xs, Tensor& y, bool training) {
    forward_cuda(ctx, xs[0], y, training);
  }
  virtual void backward_inputs_cpu(Context& ctx, std::span<const Tensor> xs, const Tensor& y, const Tensor& dy,
                                   std::span<Tensor> dxs) {
    backward_cpu(ctx, xs[0], y, dy, dxs[0]);
  }
  virtual void backward_inputs_cuda(Context& ctx, std::span<const Tensor> xs, const Tensor& y, const Tensor& dy,
                                    std::span<Tensor> dxs) {
    backward_cuda(ctx, xs[0], y, dy, dxs[0]);
  }

  const Shape& input_shape() const { return input_shapes_[0]; }
  const Shape& output_shape() const { return output_shape_; }

  std::vector<Tensor> params_;
  std::vector<Tensor> grads_;
  std::vector<Tensor> buffers_;

 private:
  // The checks of the entry points (layer.cpp). They allocate nothing unless they fail.
  int64_t check_inputs(const Context& ctx, std::span<const Tensor> xs, const char* what) const;
  // batch < 0: the device and float type only. index >= 0: operand `what` of input index (multi-input).
  void check_operand(const Context& ctx, const char* what, const Tensor& t, int64_t batch, const Shape& per_sample,
                     DType dtype, int index) const;
  void check_bound(const Context& ctx, DType dtype) const;

  std::string name_;
  int index_ = 0;
  bool is_set_up_ = false;
  std::vector<Shape> input_shapes_;
  Shape output_shape_;
  std::vector<ParamSpec> param_specs_, buffer_specs_;  // as of setup, for checking what is bound
};

// The base of layers with several inputs: they implement configure_inputs and the *_inputs_cpu/cuda
// functions; the single-input ones are never called (the entry points check the input count).
class MultiInputLayer : public Layer {
 public:
  int num_inputs() const override { return kAnyNumberOfInputs; }

 protected:
  Shape configure(const Shape&) final;
  void forward_cpu(Context&, const Tensor&, Tensor&, bool) final;
  void backward_cpu(Context&, const Tensor&, const Tensor&, const Tensor&, Tensor&) final;
};

// A layer factory reads the layer's own keys from its config block and calls ConfigNode::finish(),
// which rejects unknown keys; "type", "name" and "inputs" are Net's (read and accepted before).
using LayerRegistry = Registry<Layer, ConfigNode&>;

}  // namespace qtrain
