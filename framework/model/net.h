// Net: a graph of layers built from the `model` section (framework/model/layer_graph.h: config order is the
// execution order; a layer reads the previous one or the layers its `inputs:` names), with every
// parameter and every gradient living in one flat arena each (params(), grads()). Layers see named
// views into the arenas; the optimizer and the gradient exchange see the whole arenas; buckets are
// contiguous ranges of them. Non-trainable buffers (batch norm's running statistics) live in a third
// arena (buffers()) that checkpoints save but the exchange and the optimizer never see.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "framework/core/layer.h"
#include "framework/model/layer_graph.h"
#include "framework/core/loss.h"
#include "framework/model/model_config.h"

namespace qtrain {

// One parameter (or buffer) tensor's place in its arena.
struct ParamEntry {
  std::string name;        // "dense1.weight"
  std::string layer_name;  // "dense1"
  std::string layer_type;  // "dense"
  int layer_index = 0;
  int64_t offset = 0;  // in elements, 64-byte aligned
  int64_t numel = 0;
  Shape shape;
};

// The sizes of a net, known once its graph is planned and before its arenas are allocated.
struct NetSizes {
  int64_t parameters = 0;  // values of the parameter arena (the gradient arena has as many)
  int64_t buffers = 0;     // values of the buffer arena
  // Values of every layer's output and of its gradient, per sample (per frame for sequences): the
  // activation buffers hold this many times the batch.
  int64_t activations_per_sample = 0;
};

class Net {
 public:
  // `before_allocation`, if given, sees the sizes before the arenas are allocated, and may throw
  // (the trainer's start-up memory check, framework/core/memory_budget.h).
  Net(const ModelConfig& config, DType dtype, Device device, const LayerRegistry& layers, const LossRegistry& losses,
      const std::function<void(const NetSizes&)>& before_allocation = {});

  // Deterministic initialization from `seed` (identical on every rank and device).
  void init_parameters(uint64_t seed);

  // x: (B, input...) on the net's device. Returns the logits (B, classes), valid until the next call.
  // `on_layer_done(i)`, if given, runs after layer i's forward (profiling: qtrain bench-model).
  const Tensor& forward(Context& ctx, const Tensor& x, bool training,
                        const std::function<void(int layer_index)>& on_layer_done = {});
  // Loss of the last forward; with `with_gradient`, also prepares backward().
  LossStats loss(Context& ctx, const Tensor& labels, bool with_gradient);
  // Sequence batches: x is (B, T, input...) zero-padded and lengths (B) i32 on the CPU. The layers run
  // on the B*T frames as rows (so dense is time-distributed), after set_sequence_lengths(lengths);
  // returns the logits as (B*T, classes).
  const Tensor& forward_sequence(Context& ctx, const Tensor& x, const Tensor& lengths, bool training);
  // Loss of the last forward_sequence (a sequence loss such as ctc), with the logits seen as (B, T, C).
  LossStats loss_sequence(Context& ctx, const SequenceTargets& targets, bool with_gradient);
  bool has_sequence_loss() const { return loss_->is_sequence_loss(); }
  Loss& loss_function() { return *loss_; }
  // Backpropagates the last loss into grads(); `on_layer_done(i)` runs after layer i's gradients are
  // final (layers complete in reverse config order), so communication can start while backward
  // continues. Where an activation feeds several layers, their gradients for it are summed.
  void backward(Context& ctx, const std::function<void(int layer_index)>& on_layer_done = {});
  // With `enabled`, backward() also computes the gradient of the loss w.r.t. the net input
  // (input_gradient(), (B, input...)); off by default, as training never needs it.
  void set_input_gradient(bool enabled) { input_gradient_enabled_ = enabled; }
  const Tensor& input_gradient() const { return input_gradient_; }

  Tensor& params() { return params_; }
  Tensor& grads() { return grads_; }
  const std::vector<ParamEntry>& param_entries() const { return entries_; }
  // Buffers: one arena (possibly of size 1 and unused when no layer has buffers).
  Tensor& buffers() { return buffers_; }
  const std::vector<ParamEntry>& buffer_entries() const { return buffer_entries_; }
  // Indices of layer i's inputs (kNetInput for the net input).
  const std::vector<int>& layer_inputs(int i) const { return inputs_[static_cast<size_t>(i)]; }
  int64_t num_parameters() const;  // without alignment padding
  const Shape& input_shape() const { return input_shape_; }
  const Shape& output_shape() const { return shapes_.back(); }
  int num_layers() const { return static_cast<int>(layers_.size()); }
  Layer& layer(int i) { return *layers_[static_cast<size_t>(i)]; }
  const Shape& layer_output_shape(int i) const { return shapes_[static_cast<size_t>(i)]; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  // A table of layers, output shapes and parameter counts.
  std::string summary() const;

 private:
  void ensure_batch_capacity(int64_t batch);
  void plan_gradient_sums(const LayerRegistry& layers);

  DType dtype_;
  Device device_;
  Shape input_shape_;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<Shape> shapes_;  // shapes_[i] is layer i's output (per sample)
  std::unique_ptr<Loss> loss_;
  std::vector<ParamEntry> entries_;
  std::vector<ParamSpec> specs_;  // parallel to entries_
  Tensor params_, grads_;
  int64_t capacity_ = 0;                  // batch size the activation buffers hold
  std::vector<Tensor> acts_;              // acts_[i]: output of layer i, (capacity, shape_i)
  std::vector<Tensor> dacts_;             // gradient w.r.t. acts_[i]
  std::vector<std::vector<int>> inputs_;  // inputs_[i]: the nodes layer i reads
  // accumulate_[i][s]: in backward, layer i's gradient for input s is added to what a later layer
  // already wrote there (through scratch_[s]) instead of being written directly.
  std::vector<std::vector<bool>> accumulate_;
  // needs_gradient_[i]: layer i has parameters or reads, directly or through other layers, the output
  // of one that has. Backward computes the gradient of an activation only where its layer needs one
  // (or the input gradient is enabled), and skips layers that need none: the layers in front of the
  // first parametrized one (an input dropout, a flatten) and that layer's own input gradient, which
  // for the MNIST MLP is a 128x784x1024 GEMM per step.
  std::vector<bool> needs_gradient_;
  std::vector<Tensor> scratch_;  // one per input slot, each as large as the largest activation
  // gradient_sums_[k + 1]: the `add` layer that sums node k's gradients (null where none are summed).
  std::vector<std::unique_ptr<Layer>> gradient_sums_;
  std::vector<Tensor> xs_, dxs_;  // per-call input lists, reused across calls
  std::vector<ParamEntry> buffer_entries_;
  std::vector<ParamSpec> buffer_specs_;  // parallel to buffer_entries_
  Tensor buffers_;
  bool input_gradient_enabled_ = false;
  Tensor dinput_;          // (capacity, input...) when enabled
  Tensor input_gradient_;  // the last backward's rows of dinput_
  Tensor input_;           // the last forward's input (a reference, not a copy)
  Tensor logits_;          // view of the last forward's logits
  int64_t batch_ = 0;
  int64_t sequence_batch_ = 0, sequence_frames_ = 0;  // B and T of the last forward_sequence
};

// Fills `values` (CPU, f64) per `init` from a Philox stream keyed by `key_seed`.
void initialize_values(std::vector<double>& values, const ParamSpec& spec, uint64_t key_seed);

}  // namespace qtrain
