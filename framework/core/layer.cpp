// The checks of the layer contract, shared by every layer: run once per call in the entry points so
// that no implementation repeats them. Messages name the layer, the operand and what was expected.
#include "framework/core/layer.h"

namespace qtrain {

std::string Layer::describe() const {
  return name_.empty() ? std::string(type()) : fmt::format("{} '{}'", type(), name_);
}

Shape Layer::setup_inputs(const std::vector<Shape>& inputs) {
  const int n = static_cast<int>(inputs.size());
  if (num_inputs() == kAnyNumberOfInputs)
    QT_CHECK(n >= 2, "{} takes two or more inputs, got {}", describe(), n);
  else
    QT_CHECK(n == num_inputs(), "{} takes {} input(s), got {}", describe(), num_inputs(), n);
  output_shape_ = configure_inputs(inputs);
  input_shapes_ = inputs;
  // Recorded now so that the per-call checks of what is bound allocate nothing.
  param_specs_ = param_specs();
  buffer_specs_ = buffer_specs();
  is_set_up_ = true;
  return output_shape_;
}

namespace {
// "x" for a single-input layer, "x 2" for the second input of a multi-input one.
std::string operand_name(const char* what, int index) {
  return index < 0 ? std::string(what) : fmt::format("{} {}", what, index + 1);
}
}  // namespace

void Layer::check_operand(const Context& ctx, const char* what, const Tensor& t, int64_t batch, const Shape& per_sample,
                          DType dtype, int index) const {
  QT_CHECK(t.defined(), "{}: {} is undefined", describe(), operand_name(what, index));
  QT_CHECK(t.device() == ctx.device(), "{}: {} is on {} but the context is on {}", describe(),
           operand_name(what, index), t.device().str(), ctx.device().str());
  if (t.device().is_cuda())
    QT_CHECK(t.dtype() == DType::f32, "{}: the CUDA path supports f32 only, {} is {}", describe(),
             operand_name(what, index), dtype_name(t.dtype()));
  else
    QT_CHECK(t.dtype() == DType::f32 || t.dtype() == DType::f64, "{}: {} must be f32 or f64, got {}", describe(),
             operand_name(what, index), dtype_name(t.dtype()));
  if (batch < 0) return;  // the first input, which defines the batch size
  bool ok = t.ndim() == static_cast<int>(per_sample.size()) + 1 && t.shape()[0] == batch;
  for (size_t d = 0; ok && d < per_sample.size(); ++d) ok = t.shape()[d + 1] == per_sample[d];
  QT_CHECK(ok, "{}: {} has shape {}, expected {} rows of {}", describe(), operand_name(what, index),
           shape_str(t.shape()), batch, shape_str(per_sample));
  QT_CHECK(t.dtype() == dtype, "{}: {} is {} but the input is {}", describe(), operand_name(what, index),
           dtype_name(t.dtype()), dtype_name(dtype));
}

int64_t Layer::check_inputs(const Context& ctx, std::span<const Tensor> xs, const char* call) const {
  QT_CHECK(is_set_up_, "{}: {}() before setup()", describe(), call);
  QT_CHECK(xs.size() == input_shapes_.size(), "{}: {}() with {} input(s), set up for {}", describe(), call, xs.size(),
           input_shapes_.size());
  const bool several = xs.size() > 1;
  check_operand(ctx, "x", xs[0], -1, input_shapes_[0], xs[0].dtype(), several ? 0 : -1);
  QT_CHECK(xs[0].ndim() >= 1, "{}: x has shape {}, expected a batch dimension first", describe(),
           shape_str(xs[0].shape()));
  const int64_t batch = xs[0].dim(0);
  for (size_t k = 0; k < xs.size(); ++k)
    check_operand(ctx, "x", xs[k], batch, input_shapes_[k], xs[0].dtype(), several ? static_cast<int>(k) : -1);
  return batch;
}

void Layer::check_bound(const Context& ctx, DType dtype) const {
  QT_CHECK(params_.size() == param_specs_.size() && grads_.size() == params_.size(),
           "{}: parameters not bound (call bind() after setup())", describe());
  QT_CHECK(buffers_.size() == buffer_specs_.size(), "{}: buffers not bound (call bind_buffers() after setup())",
           describe());
  // what: "" for a parameter or its gradient, "buffer " for a buffer.
  auto check = [&](const Tensor& t, const ParamSpec& spec, const char* what, const char* or_gradient) {
    QT_CHECK(t.defined() && t.device() == ctx.device(), "{}: {}{}{} is on {} but the context is on {}", describe(),
             what, spec.name, or_gradient, t.defined() ? t.device().str() : "undefined", ctx.device().str());
    QT_CHECK(t.shape() == spec.shape && t.dtype() == dtype, "{}: {}{}{} is {} {}, expected {} {}", describe(), what,
             spec.name, or_gradient, dtype_name(t.dtype()), shape_str(t.shape()), dtype_name(dtype),
             shape_str(spec.shape));
  };
  for (size_t i = 0; i < params_.size(); ++i)
    for (const Tensor* t : {&params_[i], &grads_[i]}) check(*t, param_specs_[i], "", " (or its gradient)");
  for (size_t i = 0; i < buffers_.size(); ++i) check(buffers_[i], buffer_specs_[i], "buffer ", "");
}

void Layer::forward_inputs(Context& ctx, std::span<const Tensor> xs, Tensor& y, bool training) {
  const int64_t batch = check_inputs(ctx, xs, "forward");
  check_operand(ctx, "y", y, batch, output_shape_, xs[0].dtype(), -1);
  check_bound(ctx, xs[0].dtype());
  if (ctx.device().is_cuda())
    forward_inputs_cuda(ctx, xs, y, training);
  else
    forward_inputs_cpu(ctx, xs, y, training);
}

void Layer::backward_inputs(Context& ctx, std::span<const Tensor> xs, const Tensor& y, const Tensor& dy,
                            std::span<Tensor> dxs) {
  const int64_t batch = check_inputs(ctx, xs, "backward");
  QT_CHECK(dxs.size() == xs.size(), "{}: {} inputs but {} input gradients", describe(), xs.size(), dxs.size());
  const DType dtype = xs[0].dtype();
  check_operand(ctx, "y", y, batch, output_shape_, dtype, -1);
  check_operand(ctx, "dy", dy, batch, output_shape_, dtype, -1);
  bool wants_dx = false;
  for (size_t k = 0; k < dxs.size(); ++k) {
    if (!dxs[k].defined()) continue;
    check_operand(ctx, "dx", dxs[k], batch, input_shapes_[k], dtype, dxs.size() > 1 ? static_cast<int>(k) : -1);
    wants_dx = true;
  }
  check_bound(ctx, dtype);
  if (!wants_dx && param_specs_.empty()) return;  // no input gradient and no parameter gradient to write
  if (ctx.device().is_cuda())
    backward_inputs_cuda(ctx, xs, y, dy, dxs);
  else
    backward_inputs_cpu(ctx, xs, y, dy, dxs);
}

void Layer::forward_cuda(Context&, const Tensor&, Tensor&, bool) {
  QT_FAIL("{}: layer type '{}' has no CUDA implementation; run it with device: cpu", describe(), type());
}
void Layer::backward_cuda(Context&, const Tensor&, const Tensor&, const Tensor&, Tensor&) {
  QT_FAIL("{}: layer type '{}' has no CUDA implementation; run it with device: cpu", describe(), type());
}

// Unreachable: the entry points check the input count before dispatching.
Shape MultiInputLayer::configure(const Shape&) {
  QT_FAIL("{} takes two or more inputs", describe());
  return {};
}
void MultiInputLayer::forward_cpu(Context&, const Tensor&, Tensor&, bool) {
  QT_FAIL("{} takes two or more inputs", describe());
}
void MultiInputLayer::backward_cpu(Context&, const Tensor&, const Tensor&, const Tensor&, Tensor&) {
  QT_FAIL("{} takes two or more inputs", describe());
}

}  // namespace qtrain
