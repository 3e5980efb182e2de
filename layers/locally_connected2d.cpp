// locally_connected2d: configuration, shapes and the CPU path. Layouts (P = OH*OW, K = C*kh*kw):
//   cols (P, B, K)   the window of every sample at every position: cols[p][b] is sample b's K inputs
//                    under the window at p (im2col order), written contiguously from one sample's
//                    image, which stays in L1 while its P windows are gathered
//   outs (P, OC, B)  per-position outputs (forward) or gathered dy (backward)
// Batching the samples of one position into a GEMM dimension makes P products of (OC x K) . (K x B)
// instead of B*P matrix-vector products; the gathers and scatters cost memory traffic only.
//   forward   outs_p = W_p . cols_p^T                y[b][oc][p] = outs[p][oc][b] + bias[oc][p]
//   backward  dW_p = dY_p . cols_p;  dcols_p = dY_p^T . W_p, added back into dx (col2im)
// On the CpuPool's lanes: the gathers, scatters and transposes split the samples, the products the
// positions (each lane's GEMMs serial, SerialBlas). Every output element is written by one lane with
// the sums it had on one thread, so the lane count changes no bit.
#include "layers/locally_connected2d.h"

#include <algorithm>

#include "framework/core/context.h"
#include "framework/core/cpu_pool.h"
#include "layers/blas.h"
#include "layers/dispatch.h"
#include "layers/conv_geometry.h"

namespace qtrain {

using layer_detail::dispatch_float;

namespace {

// Calls f(k, index) for every kernel offset k of the window at (oh, ow) whose input element lies
// inside the image, with that element's index in one sample's (C, H, W); offsets in the padding are
// skipped (their value is 0).
template <typename F>
void for_window(const ImageGeometry& g, const Window2d& win, int64_t oh, int64_t ow, F f) {
  const int64_t y0 = oh * win.sh - win.ph, x0 = ow * win.sw - win.pw;
  int64_t k = 0;
  for (int64_t c = 0; c < g.c; ++c)
    for (int64_t i = 0; i < win.kh; ++i) {
      const int64_t iy = y0 + i;
      for (int64_t j = 0; j < win.kw; ++j, ++k) {
        const int64_t ix = x0 + j;
        if (iy >= 0 && iy < g.h && ix >= 0 && ix < g.w) f(k, (c * g.h + iy) * g.w + ix);
      }
    }
}

// cols (P, B, K) from x (B, C, H, W), for samples [first, last).
template <typename T>
void gather_windows(const T* x, const ImageGeometry& g, const Window2d& win, int64_t batch, int64_t first, int64_t last,
                    T* cols) {
  const int64_t k_total = g.c * win.kh * win.kw, in = g.c * g.in_plane();
  for (int64_t b = first; b < last; ++b) {
    const T* __restrict xb = x + b * in;
    for (int64_t oh = 0; oh < g.oh; ++oh)
      for (int64_t ow = 0; ow < g.ow; ++ow) {
        T* __restrict row = cols + ((oh * g.ow + ow) * batch + b) * k_total;
        std::fill_n(row, k_total, T(0));
        for_window(g, win, oh, ow, [&](int64_t k, int64_t idx) { row[k] = xb[idx]; });
      }
  }
}

// dx (B, C, H, W) = the sum of dcols (P, B, K) over the windows that copied each element, for
// samples [first, last).
template <typename T>
void scatter_windows(const T* dcols, const ImageGeometry& g, const Window2d& win, int64_t batch, int64_t first,
                     int64_t last, T* dx) {
  const int64_t k_total = g.c * win.kh * win.kw, in = g.c * g.in_plane();
  std::fill(dx + first * in, dx + last * in, T(0));
  for (int64_t b = first; b < last; ++b) {
    T* __restrict db = dx + b * in;
    for (int64_t oh = 0; oh < g.oh; ++oh)
      for (int64_t ow = 0; ow < g.ow; ++ow) {
        const T* __restrict row = dcols + ((oh * g.ow + ow) * batch + b) * k_total;
        for_window(g, win, oh, ow, [&](int64_t k, int64_t idx) { db[idx] += row[k]; });
      }
  }
}

// fn(first, last) for the positions [0, p_total) split among the pool's lanes, OpenBLAS serial on each.
template <typename F>
void for_positions(Context& ctx, int64_t p_total, F&& fn) {
  const SerialBlas serial(ctx.cpu_pool().lanes() > 1 ? ctx.cpu_threads() : 1);
  ctx.cpu_pool().parallel_for(p_total, 1, fn);
}

}  // namespace

LocallyConnected2d::LocallyConnected2d(int64_t out_channels, Window2d window, bool bias)
    : out_channels_(out_channels), win_(window), bias_(bias) {
  QT_CHECK(out_channels > 0, "locally_connected2d: out_channels must be > 0, got {}", out_channels);
  QT_CHECK(win_.kh > 0 && win_.kw > 0 && win_.sh > 0 && win_.sw > 0 && win_.ph >= 0 && win_.pw >= 0,
           "locally_connected2d: invalid window kernel [{}, {}] stride [{}, {}] padding [{}, {}]", win_.kh, win_.kw,
           win_.sh, win_.sw, win_.ph, win_.pw);
}

Shape LocallyConnected2d::configure(const Shape& input) {
  geom_ = image_geometry(describe(), input, win_);
  return {out_channels_, geom_.oh, geom_.ow};
}

std::vector<ParamSpec> LocallyConnected2d::param_specs() const {
  QT_CHECK(geom_.c > 0, "{}: param_specs() before setup()", describe());
  const int64_t k = geom_.c * win_.kh * win_.kw;
  std::vector<ParamSpec> specs;
  specs.push_back({"weight", {geom_.out_plane(), out_channels_, k}, Init::uniform_fan_in, k, out_channels_});
  if (bias_) specs.push_back({"bias", {out_channels_, geom_.oh, geom_.ow}, Init::uniform_fan_in, k, out_channels_});
  return specs;
}

template <typename T>
void LocallyConnected2d::forward_reference(Context& ctx, const T* x, T* y, int64_t batch) {
  const int64_t oc = out_channels_, k = geom_.c * win_.kh * win_.kw, p_total = geom_.out_plane();
  if (batch == 0) return;
  T* cols = scratch_.get<T>(static_cast<size_t>(p_total * k * batch + p_total * oc * batch));
  T* outs = cols + p_total * k * batch;
  CpuPool& pool = ctx.cpu_pool();
  pool.parallel_for(batch, 1,
                    [&](int64_t first, int64_t last) { gather_windows(x, geom_, win_, batch, first, last, cols); });
  const T* w = params_[0].data<T>();
  for_positions(ctx, p_total, [&](int64_t first, int64_t last) {
    for (int64_t p = first; p < last; ++p)
      // outs_p (OC, B) = W_p (OC, K) . cols_p^T (K, B)
      blas_gemm<T>(false, true, oc, batch, k, w + p * oc * k, k, cols + p * batch * k, k, T(0), outs + p * oc * batch,
                   batch);
  });
  const T* b = bias_ ? params_[1].data<T>() : nullptr;
  pool.parallel_for(batch, 1, [&](int64_t first, int64_t last) {
    for (int64_t s = first; s < last; ++s)
      for (int64_t o = 0; o < oc; ++o) {
        T* __restrict dst = y + (s * oc + o) * p_total;
        const T* __restrict src = outs + o * batch + s;
        for (int64_t p = 0; p < p_total; ++p) dst[p] = src[p * oc * batch] + (b ? b[o * p_total + p] : T(0));
      }
  });
}

template <typename T>
void LocallyConnected2d::backward_reference(Context& ctx, const T* x, const T* dy, T* dx, int64_t batch) {
  const int64_t oc = out_channels_, k = geom_.c * win_.kh * win_.kw, p_total = geom_.out_plane();
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
  T* cols = scratch_.get<T>(static_cast<size_t>(p_total * k * batch + p_total * oc * batch));
  T* dys = cols + p_total * k * batch;
  CpuPool& pool = ctx.cpu_pool();
  pool.parallel_for(batch, 1, [&](int64_t first, int64_t last) {
    gather_windows(x, geom_, win_, batch, first, last, cols);
    // dys (P, OC, B) from dy (B, OC, P)
    for (int64_t s = first; s < last; ++s)
      for (int64_t o = 0; o < oc; ++o) {
        const T* __restrict src = dy + (s * oc + o) * p_total;
        T* __restrict dst = dys + o * batch + s;
        for (int64_t p = 0; p < p_total; ++p) dst[p * oc * batch] = src[p];
      }
  });
  const T* w = params_[0].data<T>();
  for_positions(ctx, p_total, [&](int64_t first, int64_t last) {
    for (int64_t p = first; p < last; ++p) {
      // dW_p (OC, K) = dY_p (OC, B) . cols_p (B, K)
      blas_gemm<T>(false, false, oc, k, batch, dys + p * oc * batch, batch, cols + p * batch * k, k, T(0),
                   dw + p * oc * k, k);
      // dcols_p (B, K) = dY_p^T (B, OC) . W_p (OC, K), over cols (no longer needed)
      if (dx)
        blas_gemm<T>(true, false, batch, k, oc, dys + p * oc * batch, batch, w + p * oc * k, k, T(0),
                     cols + p * batch * k, k);
    }
  });
  if (dx)
    pool.parallel_for(batch, 1,
                      [&](int64_t first, int64_t last) { scatter_windows(cols, geom_, win_, batch, first, last, dx); });
}

void LocallyConnected2d::forward_cpu(Context& ctx, const Tensor& x, Tensor& y, bool) {
  dispatch_float(x.dtype(), [&]<typename T>() { forward_reference<T>(ctx, x.data<T>(), y.data<T>(), x.dim(0)); });
}

#if QTRAIN_HAS_CUDA
void LocallyConnected2d::forward_cuda(Context& ctx, const Tensor& x, Tensor& y, bool) {
  locally_connected2d_forward_cuda(ctx, geom_, win_, x, params_[0], bias_ ? &params_[1] : nullptr, y, device_scratch_);
}
#endif

void LocallyConnected2d::backward_cpu(Context& ctx, const Tensor& x, const Tensor&, const Tensor& dy, Tensor& dx) {
  dispatch_float(x.dtype(), [&]<typename T>() {
    backward_reference<T>(ctx, x.data<T>(), dy.data<T>(), dx.defined() ? dx.data<T>() : nullptr, x.dim(0));
  });
}

#if QTRAIN_HAS_CUDA
void LocallyConnected2d::backward_cuda(Context& ctx, const Tensor& x, const Tensor&, const Tensor& dy, Tensor& dx) {
  locally_connected2d_backward_cuda(ctx, geom_, win_, x, params_[0], dy, grads_[0], bias_ ? &grads_[1] : nullptr,
                                    dx.defined() ? &dx : nullptr, device_scratch_);
}
#endif

std::unique_ptr<Layer> make_locally_connected2d(ConfigNode& cfg) {
  const WeightedWindowConfig c = read_weighted_window(cfg);
  return std::make_unique<LocallyConnected2d>(c.out_channels, c.win, c.bias);
}

}  // namespace qtrain
