// flatten: shape bookkeeping and the CPU copy. The copy is a memcpy of the whole batch; the CUDA
// twin (flatten.cu) issues the same copy on the context's stream. Backward without a dx (flatten as
// the first layer) has nothing to do: there are no parameters.
#include "layers/flatten.h"

#include <cstring>

#include "layers/dispatch.h"

namespace qtrain {

using layer_detail::batch_of;
using layer_detail::check_batch;
using layer_detail::check_float;

Shape Flatten::setup(const Shape& input) {
  if (input.empty()) throw Error("flatten needs an input with at least one dimension per sample, got []");
  for (int64_t d : input)
    if (d <= 0) throw Error(fmt::format("flatten got an input shape {} with an empty dimension", shape_str(input)));
  input_ = input;
  features_ = shape_numel(input);
  return {features_};
}

namespace {
void copy_rows(Context& ctx, const Tensor& src, Tensor& dst) {
  if (src.device().is_cuda()) return flatten_copy_cuda(ctx, src, dst);
  if (src.nbytes() > 0) std::memcpy(dst.raw(), src.raw(), src.nbytes());
}
}  // namespace

void Flatten::forward(Context& ctx, const Tensor& x, Tensor& y, bool) {
  QT_CHECK(features_ >= 0, "{}: forward() before setup()", layer_detail::describe(*this));
  const int64_t batch = batch_of(*this, x);
  check_float(*this, "x", x, ctx);
  check_batch(*this, "x", x, batch, input_, x.dtype());
  check_float(*this, "y", y, ctx);
  check_batch(*this, "y", y, batch, features_, x.dtype());
  copy_rows(ctx, x, y);
}

void Flatten::backward(Context& ctx, const Tensor&, const Tensor&, const Tensor& dy, Tensor& dx) {
  if (!dx.defined()) return;  // no parameters: nothing to do without an input gradient
  QT_CHECK(features_ >= 0, "{}: backward() before setup()", layer_detail::describe(*this));
  const int64_t batch = batch_of(*this, dy);
  check_float(*this, "dy", dy, ctx);
  check_batch(*this, "dy", dy, batch, features_, dy.dtype());
  check_float(*this, "dx", dx, ctx);
  check_batch(*this, "dx", dx, batch, input_, dy.dtype());
  copy_rows(ctx, dy, dx);
}

std::unique_ptr<Layer> make_flatten(ConfigNode& cfg) {
  cfg.accept("type");
  cfg.accept("name");
  cfg.finish();
  return std::make_unique<Flatten>();
}

}  // namespace qtrain
