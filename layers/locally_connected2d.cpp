// locally_connected2d: configuration, shapes and the CPU path. Layouts (P = OH*OW, K = C*kh*kw):
//   cols (P, K, B)   the window of every sample at every position: cols[p][k][b] = col_b[k][p]
//   outs (P, OC, B)  per-position outputs (forward) or gathered dy (backward)
// Batching the samples of one position into the GEMM's N dimension makes P products of
// (OC x K) . (K x B) instead of B*P matrix-vector products; the two transposes (gather, scatter) cost
// memory traffic only.
//   forward   outs_p = W_p . cols_p                  y[b][oc][p] = outs[p][oc][b] + bias[oc][p]
//   backward  dW_p = dY_p . cols_p^T;  dcols_p = W_p^T . dY_p, scattered back through col2im
#include "layers/locally_connected2d.h"

#include <algorithm>

#include "layers/blas.h"
#include "layers/dispatch.h"
#include "layers/im2col.h"

namespace qtrain {

using layer_detail::batch_of;
using layer_detail::check_batch;
using layer_detail::check_float;
using layer_detail::describe;
using layer_detail::dispatch_float;

namespace {

// cols (P, K, B) from x (B, C, H, W); tmp holds one sample's (K, P) im2col matrix.
template <typename T>
void gather_windows(const T* x, const ImageGeometry& g, const Window2d& win, int64_t batch, T* tmp, T* cols) {
  const int64_t k_total = g.c * win.kh * win.kw, p_total = g.out_plane(), in = g.c * g.in_plane();
  for (int64_t b = 0; b < batch; ++b) {
    im2col(x + b * in, g, win, tmp, p_total);
    for (int64_t k = 0; k < k_total; ++k) {
      const T* __restrict row = tmp + k * p_total;
      T* __restrict dst = cols + k * batch + b;
      for (int64_t p = 0; p < p_total; ++p) dst[p * k_total * batch] = row[p];
    }
  }
}

}  // namespace

LocallyConnected2d::LocallyConnected2d(int64_t out_channels, Window2d window, bool bias)
    : out_channels_(out_channels), win_(window), bias_(bias) {
  QT_CHECK(out_channels > 0, "locally_connected2d: out_channels must be > 0, got {}", out_channels);
  QT_CHECK(win_.kh > 0 && win_.kw > 0 && win_.sh > 0 && win_.sw > 0 && win_.ph >= 0 && win_.pw >= 0,
           "locally_connected2d: invalid window kernel [{}, {}] stride [{}, {}] padding [{}, {}]", win_.kh, win_.kw,
           win_.sh, win_.sw, win_.ph, win_.pw);
}

Shape LocallyConnected2d::setup(const Shape& input) {
  geom_ = image_geometry(describe(*this), input, win_);
  ready_ = true;
  return {out_channels_, geom_.oh, geom_.ow};
}

std::vector<ParamSpec> LocallyConnected2d::param_specs() const {
  QT_CHECK(ready_, "{}: param_specs() before setup()", describe(*this));
  const int64_t k = geom_.c * win_.kh * win_.kw;
  std::vector<ParamSpec> specs;
  specs.push_back({"weight", {geom_.out_plane(), out_channels_, k}, Init::uniform_fan_in, k, out_channels_});
  if (bias_) specs.push_back({"bias", {out_channels_, geom_.oh, geom_.ow}, Init::uniform_fan_in, k, out_channels_});
  return specs;
}

void LocallyConnected2d::check_bound(const Context& ctx, DType dtype) const {
  QT_CHECK(ready_, "{}: called before setup()", describe(*this));
  QT_CHECK(params_.size() == (bias_ ? 2u : 1u) && grads_.size() == params_.size(),
           "{}: parameters not bound (call bind() after setup())", describe(*this));
  const std::vector<ParamSpec> specs = param_specs();
  for (size_t i = 0; i < params_.size(); ++i)
    for (const Tensor* t : {&params_[i], &grads_[i]}) {
      check_float(*this, specs[i].name.c_str(), *t, ctx);
      QT_CHECK(t->shape() == specs[i].shape && t->dtype() == dtype, "{}: {} (or its gradient) is {} {}, expected {} {}",
               describe(*this), specs[i].name, dtype_name(t->dtype()), shape_str(t->shape()), dtype_name(dtype),
               shape_str(specs[i].shape));
    }
}

template <typename T>
void LocallyConnected2d::forward_cpu(const T* x, T* y, int64_t batch) {
  const int64_t oc = out_channels_, k = geom_.c * win_.kh * win_.kw, p_total = geom_.out_plane();
  if (batch == 0) return;
  T* cols = scratch_.get<T>(static_cast<size_t>(p_total * k * batch + p_total * oc * batch + k * p_total));
  T* outs = cols + p_total * k * batch;
  T* tmp = outs + p_total * oc * batch;
  gather_windows(x, geom_, win_, batch, tmp, cols);
  const T* w = params_[0].data<T>();
  for (int64_t p = 0; p < p_total; ++p)
    // outs_p (OC, B) = W_p (OC, K) . cols_p (K, B)
    blas_gemm<T>(false, false, oc, batch, k, w + p * oc * k, k, cols + p * k * batch, batch, T(0),
                 outs + p * oc * batch, batch);
  const T* b = bias_ ? params_[1].data<T>() : nullptr;
  for (int64_t s = 0; s < batch; ++s)
    for (int64_t o = 0; o < oc; ++o) {
      T* __restrict dst = y + (s * oc + o) * p_total;
      const T* __restrict src = outs + o * batch + s;
      for (int64_t p = 0; p < p_total; ++p) dst[p] = src[p * oc * batch] + (b ? b[o * p_total + p] : T(0));
    }
}

template <typename T>
void LocallyConnected2d::backward_cpu(const T* x, const T* dy, T* dx, int64_t batch) {
  const int64_t oc = out_channels_, k = geom_.c * win_.kh * win_.kw, p_total = geom_.out_plane();
  const int64_t in = geom_.c * geom_.in_plane();
  T* dw = grads_[0].data<T>();
  if (bias_) {
    // db[oc][p] = sum over samples of dy[s][oc][p]
    T* db = grads_[1].data<T>();
    std::fill_n(db, oc * p_total, T(0));
    for (int64_t s = 0; s < batch; ++s)
      for (int64_t i = 0; i < oc * p_total; ++i) db[i] += dy[s * oc * p_total + i];
  }
  if (batch == 0) {
    std::fill_n(dw, p_total * oc * k, T(0));
    return;
  }
  T* cols = scratch_.get<T>(static_cast<size_t>(p_total * k * batch + p_total * oc * batch + k * p_total));
  T* dys = cols + p_total * k * batch;
  T* tmp = dys + p_total * oc * batch;
  gather_windows(x, geom_, win_, batch, tmp, cols);
  // dys (P, OC, B) from dy (B, OC, P)
  for (int64_t s = 0; s < batch; ++s)
    for (int64_t o = 0; o < oc; ++o) {
      const T* __restrict src = dy + (s * oc + o) * p_total;
      T* __restrict dst = dys + o * batch + s;
      for (int64_t p = 0; p < p_total; ++p) dst[p * oc * batch] = src[p];
    }
  const T* w = params_[0].data<T>();
  for (int64_t p = 0; p < p_total; ++p) {
    // dW_p (OC, K) = dY_p (OC, B) . cols_p^T (B, K)
    blas_gemm<T>(false, true, oc, k, batch, dys + p * oc * batch, batch, cols + p * k * batch, batch, T(0),
                 dw + p * oc * k, k);
    // dcols_p (K, B) = W_p^T (K, OC) . dY_p (OC, B), over cols (no longer needed)
    if (dx) blas_gemm<T>(true, false, k, batch, oc, w + p * oc * k, k, dys + p * oc * batch, batch, T(0),
                         cols + p * k * batch, batch);
  }
  if (!dx) return;
  std::fill_n(dx, batch * in, T(0));
  for (int64_t s = 0; s < batch; ++s) {
    for (int64_t kk = 0; kk < k; ++kk) {
      const T* __restrict src = cols + kk * batch + s;
      T* __restrict row = tmp + kk * p_total;
      for (int64_t p = 0; p < p_total; ++p) row[p] = src[p * k * batch];
    }
    col2im_add(tmp, p_total, geom_, win_, dx + s * in);
  }
}

void LocallyConnected2d::forward(Context& ctx, const Tensor& x, Tensor& y, bool) {
  const int64_t batch = batch_of(*this, x);
  check_float(*this, "x", x, ctx);
  check_batch(*this, "x", x, batch, Shape{geom_.c, geom_.h, geom_.w}, x.dtype());
  check_float(*this, "y", y, ctx);
  check_batch(*this, "y", y, batch, Shape{out_channels_, geom_.oh, geom_.ow}, x.dtype());
  check_bound(ctx, x.dtype());
  const Tensor* b = bias_ ? &params_[1] : nullptr;
  if (x.device().is_cuda())
    return locally_connected2d_forward_cuda(ctx, geom_, win_, x, params_[0], b, y, device_scratch_);
  dispatch_float(x.dtype(), [&]<typename T>() { forward_cpu<T>(x.data<T>(), y.data<T>(), batch); });
}

void LocallyConnected2d::backward(Context& ctx, const Tensor& x, const Tensor&, const Tensor& dy, Tensor& dx) {
  const int64_t batch = batch_of(*this, x);
  check_float(*this, "x", x, ctx);
  check_batch(*this, "x", x, batch, Shape{geom_.c, geom_.h, geom_.w}, x.dtype());
  check_float(*this, "dy", dy, ctx);
  check_batch(*this, "dy", dy, batch, Shape{out_channels_, geom_.oh, geom_.ow}, x.dtype());
  if (dx.defined()) {
    check_float(*this, "dx", dx, ctx);
    check_batch(*this, "dx", dx, batch, Shape{geom_.c, geom_.h, geom_.w}, x.dtype());
  }
  check_bound(ctx, x.dtype());
  Tensor* db = bias_ ? &grads_[1] : nullptr;
  Tensor* dxp = dx.defined() ? &dx : nullptr;
  if (x.device().is_cuda())
    return locally_connected2d_backward_cuda(ctx, geom_, win_, x, params_[0], dy, grads_[0], db, dxp,
                                             device_scratch_);
  dispatch_float(x.dtype(), [&]<typename T>() {
    backward_cpu<T>(x.data<T>(), dy.data<T>(), dxp ? dxp->data<T>() : nullptr, batch);
  });
}

std::unique_ptr<Layer> make_locally_connected2d(ConfigNode& cfg) {
  if (!cfg.has("out_channels")) cfg.fail("out_channels", "is required (the number of output channels)");
  const int64_t out_channels = cfg.get_int("out_channels", 0, 1, int64_t{1} << 30);
  const Window2d win = read_window(cfg, {1, 1});
  const bool bias = cfg.get<bool>("bias", true);
  cfg.accept("type");
  cfg.accept("name");
  cfg.finish();
  return std::make_unique<LocallyConnected2d>(out_channels, win, bias);
}

}  // namespace qtrain
