// dense: configuration, shapes and the CPU reference through OpenBLAS (on the context's lanes, lane_gemm.h). Row-major
// throughout: x (B, in), W (out, in), y (B, out). Forward pre-fills y with the bias rows and lets the GEMM accumulate
// into it (beta = 1), as PyTorch's addmm does; backward is dW = dy^T x, dx = dy W and db = column sums of dy, with no
// scratch memory and no allocation per call.
#include "layers/dense.h"

#include <algorithm>

#include "layers/dispatch.h"
#include "layers/lane_gemm.h"

namespace qtrain {

using layer_detail::dispatch_float;

namespace {

template <typename T>
void forward_reference(Context& ctx, const T* __restrict x, const T* __restrict w, const T* __restrict b,
                       T* __restrict y, int64_t batch, int64_t in, int64_t out) {
  if (batch == 0) return;
  if (b) {
    for (int64_t r = 0; r < batch; ++r) std::copy_n(b, out, y + r * out);
  }
  // y (B, out) = x (B, in) . W^T (in, out) [+ y]
  lane_gemm<T>(ctx, false, true, batch, out, in, x, in, w, in, b ? T(1) : T(0), y, out);
}

template <typename T>
void backward_reference(Context& ctx, const T* __restrict x, const T* __restrict w, const T* __restrict dy,
                        T* __restrict dw, T* __restrict db, T* __restrict dx, int64_t batch, int64_t in, int64_t out) {
  if (batch == 0) {
    // An empty batch contributes nothing; the gradients are still overwritten.
    std::fill_n(dw, out * in, T(0));
    if (db) std::fill_n(db, out, T(0));
    return;
  }
  // dW (out, in) = dy^T (out, B) . x (B, in)
  lane_gemm<T>(ctx, true, false, out, in, batch, dy, out, x, in, T(0), dw, in);
  if (db) {
    // Row by row so the inner loop runs over contiguous memory and vectorizes.
    std::copy_n(dy, out, db);
    for (int64_t r = 1; r < batch; ++r) {
      const T* __restrict row = dy + r * out;
      for (int64_t o = 0; o < out; ++o) db[o] += row[o];
    }
  }
  // dx (B, in) = dy (B, out) . W (out, in); skipped for the first layer, whose input needs no gradient.
  if (dx) lane_gemm<T>(ctx, false, false, batch, in, out, dy, out, w, in, T(0), dx, in);
}

}  // namespace

Dense::Dense(int64_t units, bool bias) : units_(units), bias_(bias) {
  QT_CHECK(units > 0, "dense: units must be > 0, got {}", units);
}

Shape Dense::configure(const Shape& input) {
  if (input.size() != 1)
    input_error(
        "dense expects one feature dimension per sample, got input shape {}; add a {{type: flatten}} layer "
        "before it",
        shape_str(input));
  if (input[0] <= 0) input_error("dense got an input with {} features", input[0]);
  in_ = input[0];
  return {units_};
}

std::vector<ParamSpec> Dense::param_specs() const {
  QT_CHECK(in_ > 0, "{}: param_specs() before setup()", describe());
  std::vector<ParamSpec> specs;
  specs.push_back({"weight", {units_, in_}, Init::uniform_fan_in, in_, units_});
  // PyTorch bounds the bias by 1/sqrt(fan_in) of the weight, so fan_in is the layer's input size.
  if (bias_) specs.push_back({"bias", {units_}, Init::uniform_fan_in, in_, units_});
  return specs;
}

void Dense::forward_cpu(Context& ctx, const Tensor& x, Tensor& y, bool) {
  const Tensor* b = bias_ ? &params_[1] : nullptr;
  dispatch_float(x.dtype(), [&]<typename T>() {
    forward_reference<T>(ctx, x.data<T>(), params_[0].data<T>(), b ? b->data<T>() : nullptr, y.data<T>(), x.dim(0), in_,
                         units_);
  });
}

#if QTRAIN_HAS_CUDA
void Dense::forward_cuda(Context& ctx, const Tensor& x, Tensor& y, bool) {
  dense_forward_cuda(ctx, x, params_[0], bias_ ? &params_[1] : nullptr, y);
}
#endif

void Dense::backward_cpu(Context& ctx, const Tensor& x, const Tensor&, const Tensor& dy, Tensor& dx) {
  Tensor* db = bias_ ? &grads_[1] : nullptr;
  Tensor* dxp = dx.defined() ? &dx : nullptr;
  dispatch_float(x.dtype(), [&]<typename T>() {
    backward_reference<T>(ctx, x.data<T>(), params_[0].data<T>(), dy.data<T>(), grads_[0].data<T>(),
                          db ? db->data<T>() : nullptr, dxp ? dxp->data<T>() : nullptr, x.dim(0), in_, units_);
  });
}

#if QTRAIN_HAS_CUDA
void Dense::backward_cuda(Context& ctx, const Tensor& x, const Tensor&, const Tensor& dy, Tensor& dx) {
  dense_backward_cuda(ctx, x, params_[0], dy, grads_[0], bias_ ? &grads_[1] : nullptr, dx.defined() ? &dx : nullptr);
}
#endif

std::unique_ptr<Layer> make_dense(ConfigNode& cfg) {
  const int64_t units = cfg.require<int64_t>("units");
  if (units <= 0) cfg.fail("units", fmt::format("must be > 0, got {}", units));
  const bool bias = cfg.get<bool>("bias", true);
  cfg.finish();
  return std::make_unique<Dense>(units, bias);
}

}  // namespace qtrain
