// The optimizer contract: one update over the flat parameter arena, given the (already averaged)
// flat gradient arena. State is named, so checkpoints store "rmsprop.square_avg" rather than
// positions in a list.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "framework/core/config_node.h"
#include "framework/core/context.h"
#include "framework/core/tensor.h"

namespace qtrain {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual const char* type() const = 0;
  // Allocates the state for an arena of `numel` values of `dtype` on `device` (zero-initialized).
  virtual void init(int64_t numel, DType dtype, Device device) = 0;
  // How many arena-sized state tensors init() allocates (the start-up memory check counts them).
  virtual int state_arrays() const = 0;
  // params <- update(params, grads) with learning rate `lr` (the schedule's value for this step).
  virtual void step(Context& ctx, Tensor& params, const Tensor& grads, double lr) = 0;
  // Named state tensors (views of the live buffers: copying into them restores the state). Scalar
  // state such as Adam's step count is a one-element f64 tensor on the CPU, whatever the arena's
  // device. A CUDA step runs asynchronously on ctx's stream: synchronize ctx before reading state.
  virtual std::vector<std::pair<std::string, Tensor>> state() = 0;
  // The base learning rate from the config (the schedule scales it).
  virtual double base_lr() const = 0;
  // optimizer.clip_norm: the trainer clips the averaged gradients to this global L2 norm before
  // step() (optim/clip.h); 0 = no clipping.
  double clip_norm() const { return clip_norm_; }
  void set_clip_norm(double max_norm) { clip_norm_ = max_norm; }

 private:
  double clip_norm_ = 0;
};

// Parses the `optimizer` section (type: sgd | rmsprop | adam | adagrad and their options). The `schedule`
// sub-key is left for make_schedule().
std::unique_ptr<Optimizer> make_optimizer(ConfigNode& section);

}  // namespace qtrain
