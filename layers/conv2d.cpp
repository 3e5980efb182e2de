// conv2d: configuration, shapes and the CPU path. Samples are processed in blocks of n: their im2col
// matrices sit side by side in one (K, n*P) matrix (K = C*kh*kw, P = OH*OW), so each GEMM is
// (OC x K) . (K x n*P): wide enough to keep both cores' OpenBLAS kernels busy even for the small
// 7x7..16x16 feature maps of CIFAR networks, where a per-sample GEMM would be too thin.
//   forward   Y (OC, n*P) = W (OC, K) . col          then scattered into y (n, OC, P) plus the bias
//   backward  dW (OC, K) += dY (OC, n*P) . col^T     dY is dy gathered from (n, OC, P)
//             dcol (K, n*P) = W^T . dY               then col2im into dx
// A 1x1, stride-1, unpadded convolution needs no im2col: each sample's x (C, P) is its column
// matrix, so it runs per sample straight on x and y.
// With stride 1, dx is itself a convolution: of dy with the flipped, transposed kernel
// W'[c][oc][i][j] = W[oc][c][kh-1-i][kw-1-j] and padding k-1-p. Computing it that way (im2col of dy,
// then one GEMM per block whose output is dx) replaces the (K, n*P) dcol product and its col2im
// scatter, which for few channels wrote and re-read far more memory than dx itself.
#include "layers/conv2d.h"

#include <algorithm>
#include <cstring>

#include "layers/blas.h"
#include "layers/dispatch.h"
#include "layers/im2col.h"

namespace qtrain {

using layer_detail::batch_of;
using layer_detail::check_float;
using layer_detail::check_operand;
using layer_detail::describe;
using layer_detail::dispatch_float;

namespace {

// Elements of one im2col block. About 4 MiB of floats: large enough for wide GEMMs, small enough that
// the block stays in the last-level cache between im2col and the GEMM that reads it.
constexpr int64_t kColumnBudget = int64_t{1} << 20;

bool is_pointwise(const Window2d& w) {
  return w.kh == 1 && w.kw == 1 && w.sh == 1 && w.sw == 1 && w.ph == 0 && w.pw == 0;
}

}  // namespace

Conv2d::Conv2d(int64_t out_channels, Window2d window, bool bias) : out_channels_(out_channels), win_(window), bias_(bias) {
  QT_CHECK(out_channels > 0, "conv2d: out_channels must be > 0, got {}", out_channels);
  QT_CHECK(win_.kh > 0 && win_.kw > 0 && win_.sh > 0 && win_.sw > 0 && win_.ph >= 0 && win_.pw >= 0,
           "conv2d: invalid window kernel [{}, {}] stride [{}, {}] padding [{}, {}]", win_.kh, win_.kw, win_.sh,
           win_.sw, win_.ph, win_.pw);
}

Shape Conv2d::setup(const Shape& input) {
  geom_ = image_geometry(describe(*this), input, win_);
  ready_ = true;
  return {out_channels_, geom_.oh, geom_.ow};
}

std::vector<ParamSpec> Conv2d::param_specs() const {
  QT_CHECK(ready_, "{}: param_specs() before setup()", describe(*this));
  const int64_t fan_in = geom_.c * win_.kh * win_.kw;
  const int64_t fan_out = out_channels_ * win_.kh * win_.kw;
  std::vector<ParamSpec> specs;
  specs.push_back({"weight", {out_channels_, geom_.c, win_.kh, win_.kw}, Init::uniform_fan_in, fan_in, fan_out});
  if (bias_) specs.push_back({"bias", {out_channels_}, Init::uniform_fan_in, fan_in, fan_out});
  return specs;
}

void Conv2d::check_bound(const Context& ctx, DType dtype) const {
  QT_CHECK(ready_, "{}: called before setup()", describe(*this));
  QT_CHECK(params_.size() == (bias_ ? 2u : 1u) && grads_.size() == params_.size(),
           "{}: parameters not bound (call bind() after setup())", describe(*this));
  // Expected shapes as arrays, so that a passing check allocates nothing.
  const int64_t wshape[4] = {out_channels_, geom_.c, win_.kh, win_.kw}, bshape[1] = {out_channels_};
  for (size_t i = 0; i < params_.size(); ++i) {
    const char* what = i == 0 ? "weight" : "bias";
    const int64_t* expected = i == 0 ? wshape : bshape;
    const size_t n = i == 0 ? 4 : 1;
    for (const Tensor* t : {&params_[i], &grads_[i]}) {
      check_float(*this, what, *t, ctx);
      const bool ok = t->shape().size() == n && std::equal(expected, expected + n, t->shape().begin());
      QT_CHECK(ok && t->dtype() == dtype, "{}: {} (or its gradient) is {} {}, expected {} {}", describe(*this), what,
               dtype_name(t->dtype()), shape_str(t->shape()), dtype_name(dtype), shape_str(Shape(expected, expected + n)));
    }
  }
}

int64_t Conv2d::block_samples(int64_t batch) const {
  const int64_t per_sample = geom_.c * win_.kh * win_.kw * geom_.out_plane();
  return std::clamp<int64_t>(kColumnBudget / std::max<int64_t>(per_sample, 1), 1, std::max<int64_t>(batch, 1));
}

template <typename T>
void Conv2d::forward_cpu(const T* x, T* y, int64_t batch) {
  const int64_t oc = out_channels_, k = geom_.c * win_.kh * win_.kw, p = geom_.out_plane(), in = geom_.c * geom_.in_plane();
  const T* w = params_[0].data<T>();
  const T* b = bias_ ? params_[1].data<T>() : nullptr;
  if (is_pointwise(win_)) {
    for (int64_t s = 0; s < batch; ++s) {
      T* ys = y + s * oc * p;
      if (b) {
        for (int64_t o = 0; o < oc; ++o) std::fill_n(ys + o * p, p, b[o]);
      }
      // y_s (OC, P) = W (OC, C) . x_s (C, P) [+ bias rows]
      blas_gemm<T>(false, false, oc, p, k, w, k, x + s * in, p, b ? T(1) : T(0), ys, p);
    }
    return;
  }
  const int64_t block = block_samples(batch);
  T* col = scratch_.get<T>(static_cast<size_t>(k * block * p + oc * block * p));
  T* out = col + k * block * p;
  for (int64_t s0 = 0; s0 < batch; s0 += block) {
    const int64_t n = std::min(block, batch - s0);
    for (int64_t s = 0; s < n; ++s) im2col(x + (s0 + s) * in, geom_, win_, col + s * p, n * p);
    // out (OC, n*P) = W (OC, K) . col (K, n*P)
    blas_gemm<T>(false, false, oc, n * p, k, w, k, col, n * p, T(0), out, n * p);
    for (int64_t s = 0; s < n; ++s) {
      for (int64_t o = 0; o < oc; ++o) {
        const T* __restrict src = out + o * n * p + s * p;
        T* __restrict dst = y + ((s0 + s) * oc + o) * p;
        const T bias = b ? b[o] : T(0);
        for (int64_t i = 0; i < p; ++i) dst[i] = src[i] + bias;
      }
    }
  }
}

template <typename T>
void Conv2d::backward_cpu(const T* x, const T* dy, T* dx, int64_t batch) {
  const int64_t oc = out_channels_, k = geom_.c * win_.kh * win_.kw, p = geom_.out_plane(), in = geom_.c * geom_.in_plane();
  const T* w = params_[0].data<T>();
  T* dw = grads_[0].data<T>();
  if (bias_) {
    // db[o] = sum over samples and positions of dy[s][o][:]
    T* db = grads_[1].data<T>();
    std::fill_n(db, oc, T(0));
    for (int64_t s = 0; s < batch; ++s)
      for (int64_t o = 0; o < oc; ++o) {
        const T* __restrict row = dy + (s * oc + o) * p;
        T sum = 0;
        for (int64_t i = 0; i < p; ++i) sum += row[i];
        db[o] += sum;
      }
  }
  if (batch == 0) {
    std::fill_n(dw, oc * k, T(0));
    return;
  }
  if (is_pointwise(win_)) {
    for (int64_t s = 0; s < batch; ++s) {
      // dW (OC, C) += dy_s (OC, P) . x_s^T (P, C);  dx_s (C, P) = W^T (C, OC) . dy_s (OC, P)
      blas_gemm<T>(false, true, oc, k, p, dy + s * oc * p, p, x + s * in, p, s == 0 ? T(0) : T(1), dw, k);
      if (dx) blas_gemm<T>(true, false, k, p, oc, w, k, dy + s * oc * p, p, T(0), dx + s * in, p);
    }
    return;
  }
  // dx as a convolution of dy (stride 1, and padding small enough that the flipped padding is >= 0).
  const bool dx_by_conv = dx && win_.sh == 1 && win_.sw == 1 && win_.ph < win_.kh && win_.pw < win_.kw;
  const int64_t block = block_samples(batch);
  T* col = scratch_.get<T>(static_cast<size_t>(k * block * p + oc * block * p));
  T* dyc = col + k * block * p;
  if (dx && !dx_by_conv) std::fill_n(dx, batch * in, T(0));
  for (int64_t s0 = 0; s0 < batch; s0 += block) {
    const int64_t n = std::min(block, batch - s0);
    for (int64_t s = 0; s < n; ++s) {
      im2col(x + (s0 + s) * in, geom_, win_, col + s * p, n * p);
      for (int64_t o = 0; o < oc; ++o) std::memcpy(dyc + o * n * p + s * p, dy + ((s0 + s) * oc + o) * p, p * sizeof(T));
    }
    // dW (OC, K) (+)= dY (OC, n*P) . col^T (n*P, K)
    blas_gemm<T>(false, true, oc, k, n * p, dyc, n * p, col, n * p, s0 == 0 ? T(0) : T(1), dw, k);
    if (dx && !dx_by_conv) {
      // dcol (K, n*P) = W^T (K, OC) . dY (OC, n*P), written over col (no longer needed).
      blas_gemm<T>(true, false, k, n * p, oc, w, k, dyc, n * p, T(0), col, n * p);
      for (int64_t s = 0; s < n; ++s) col2im_add(col + s * p, n * p, geom_, win_, dx + (s0 + s) * in);
    }
  }
  if (dx_by_conv) backward_data_by_conv<T>(dy, dx, batch);
}

template <typename T>
void Conv2d::backward_data_by_conv(const T* dy, T* dx, int64_t batch) {
  const int64_t oc = out_channels_, c = geom_.c, kk = win_.kh * win_.kw, hw = geom_.in_plane();
  // dy's geometry as the input of the flipped convolution; its output is (C, H, W).
  const Window2d flipped{win_.kh, win_.kw, 1, 1, win_.kh - 1 - win_.ph, win_.kw - 1 - win_.pw};
  ImageGeometry g;
  g.c = oc;
  g.h = geom_.oh;
  g.w = geom_.ow;
  g.oh = geom_.h;
  g.ow = geom_.w;
  const int64_t k2 = oc * kk;  // rows of dy's im2col matrix
  const int64_t block = std::clamp<int64_t>(kColumnBudget / std::max<int64_t>(k2 * hw, 1), 1, std::max<int64_t>(batch, 1));
  T* wt = scratch_.get<T>(static_cast<size_t>(c * k2 + k2 * block * hw + c * block * hw));
  T* col = wt + c * k2;
  T* out = col + k2 * block * hw;
  // W' (C, OC*kh*kw): W'[ci][(o*kh + i)*kw + j] = W[o][ci][kh-1-i][kw-1-j]
  const T* w = params_[0].data<T>();
  for (int64_t o = 0; o < oc; ++o)
    for (int64_t ci = 0; ci < c; ++ci)
      for (int64_t t = 0; t < kk; ++t) wt[ci * k2 + o * kk + t] = w[(o * c + ci) * kk + (kk - 1 - t)];
  const int64_t dyn = oc * g.h * g.w, in = c * hw;
  for (int64_t s0 = 0; s0 < batch; s0 += block) {
    const int64_t n = std::min(block, batch - s0);
    for (int64_t s = 0; s < n; ++s) im2col(dy + (s0 + s) * dyn, g, flipped, col + s * hw, n * hw);
    // out (C, n*HW) = W' (C, OC*kh*kw) . col (OC*kh*kw, n*HW)
    blas_gemm<T>(false, false, c, n * hw, k2, wt, k2, col, n * hw, T(0), out, n * hw);
    for (int64_t s = 0; s < n; ++s)
      for (int64_t ci = 0; ci < c; ++ci)
        std::memcpy(dx + (s0 + s) * in + ci * hw, out + ci * n * hw + s * hw, static_cast<size_t>(hw) * sizeof(T));
  }
}

void Conv2d::forward(Context& ctx, const Tensor& x, Tensor& y, bool) {
  const int64_t batch = batch_of(*this, x);
  const ImageGeometry::Dims d = geom_.dims(out_channels_);
  check_operand(*this, "x", x, ctx, batch, d.in, 3, x.dtype());
  check_operand(*this, "y", y, ctx, batch, d.out, 3, x.dtype());
  check_bound(ctx, x.dtype());
  const Tensor* b = bias_ ? &params_[1] : nullptr;
  if (x.device().is_cuda()) return conv2d_forward_cuda(ctx, cudnn_, geom_, win_, x, params_[0], b, y);
  dispatch_float(x.dtype(), [&]<typename T>() { forward_cpu<T>(x.data<T>(), y.data<T>(), batch); });
}

void Conv2d::backward(Context& ctx, const Tensor& x, const Tensor&, const Tensor& dy, Tensor& dx) {
  const int64_t batch = batch_of(*this, x);
  const ImageGeometry::Dims d = geom_.dims(out_channels_);
  check_operand(*this, "x", x, ctx, batch, d.in, 3, x.dtype());
  check_operand(*this, "dy", dy, ctx, batch, d.out, 3, x.dtype());
  if (dx.defined()) {
    check_operand(*this, "dx", dx, ctx, batch, d.in, 3, x.dtype());
  }
  check_bound(ctx, x.dtype());
  Tensor* db = bias_ ? &grads_[1] : nullptr;
  Tensor* dxp = dx.defined() ? &dx : nullptr;
  if (x.device().is_cuda())
    return conv2d_backward_cuda(ctx, cudnn_, geom_, win_, x, params_[0], dy, grads_[0], db, dxp);
  dispatch_float(x.dtype(), [&]<typename T>() {
    backward_cpu<T>(x.data<T>(), dy.data<T>(), dxp ? dxp->data<T>() : nullptr, batch);
  });
}

std::unique_ptr<Layer> make_conv2d(ConfigNode& cfg) {
  if (!cfg.has("out_channels")) cfg.fail("out_channels", "is required (the number of output channels)");
  const int64_t out_channels = cfg.get_int("out_channels", 0, 1, int64_t{1} << 30);
  const Window2d win = read_window(cfg, {1, 1});
  const bool bias = cfg.get<bool>("bias", true);
  cfg.accept("type");
  cfg.accept("name");
  cfg.finish();
  return std::make_unique<Conv2d>(out_channels, win, bias);
}

}  // namespace qtrain
