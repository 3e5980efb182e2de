// flatten: shape bookkeeping and the CPU copy. The copy is a memcpy of the whole batch; the CUDA
// twin (flatten.cu) issues the same copy on the context's stream. Backward without a dx (flatten as
// the first layer) has nothing to do: there are no parameters.
#include "layers/flatten.h"

#include <cstring>

#include "framework/core/check.h"

namespace qtrain {

Shape Flatten::configure(const Shape& input) {
  if (input.empty()) input_error("flatten needs an input with at least one dimension per sample, got []");
  for (int64_t d : input)
    if (d <= 0) input_error("flatten got an input shape {} with an empty dimension", shape_str(input));
  return {shape_numel(input)};
}

void Flatten::forward_cpu(Context&, const Tensor& x, Tensor& y, bool) {
  if (x.nbytes() > 0) std::memcpy(y.raw(), x.raw(), x.nbytes());
}

#if QTRAIN_HAS_CUDA
void Flatten::forward_cuda(Context& ctx, const Tensor& x, Tensor& y, bool) { flatten_copy_cuda(ctx, x, y); }
#endif

void Flatten::backward_cpu(Context&, const Tensor&, const Tensor&, const Tensor& dy, Tensor& dx) {
  if (dy.nbytes() > 0) std::memcpy(dx.raw(), dy.raw(), dy.nbytes());
}

#if QTRAIN_HAS_CUDA
void Flatten::backward_cuda(Context& ctx, const Tensor&, const Tensor&, const Tensor& dy, Tensor& dx) {
  flatten_copy_cuda(ctx, dy, dx);
}
#endif

std::unique_ptr<Layer> make_flatten(ConfigNode& cfg) {
  cfg.finish();
  return std::make_unique<Flatten>();
}

}  // namespace qtrain
