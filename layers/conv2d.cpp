// conv2d: configuration, shapes and the CPU path. Samples are processed in blocks of n: their im2col
// matrices sit side by side in one (K, n*P) matrix (K = C*kh*kw, P = OH*OW), so each GEMM is
// (OC x K) . (K x n*P): wide enough for an efficient GEMM even on the small 8x8..16x16 feature maps
// of CIFAR networks, where a per-sample GEMM would be too thin.
//   forward   Y (OC, n*P) = W (OC, K) . col          then scattered into y (n, OC, P) plus the bias
//   backward  dW (OC, K) += dY (OC, n*P) . col^T     dY is dy gathered from (n, OC, P)
//             dcol (K, n*P) = W^T . dY               then col2im into dx
// The batch is split into one contiguous range of samples per CPU thread (the context's CpuPool
// lanes); each lane runs im2col, single-threaded GEMMs and the scatters on its own samples and its own
// block of the scratch buffer. This keeps both cores busy through im2col and the scatters (which
// beside a 2-thread OpenBLAS GEMM ran on one core while OpenBLAS's second thread spin-yielded) and
// keeps each block in its core's cache. The weight gradient is a per-lane partial, summed in lane
// order at the end: deterministic for a given thread count (another count groups the sum differently).
// A 1x1, stride-1, unpadded convolution needs no im2col: each sample's x (C, P) is its column
// matrix, so it runs per sample straight on x and y.
// With stride 1, dx is itself a convolution: of dy with the flipped, transposed kernel
// W'[c][oc][i][j] = W[oc][c][kh-1-i][kw-1-j] and padding k-1-p. Computing it that way (im2col of dy,
// then one GEMM per block whose output is dx) replaces the (K, n*P) dcol product and its col2im
// scatter, which for few channels wrote and re-read far more memory than dx itself.
// A 3x3 stride-1 convolution with padding <= 2 (ResNet's) runs as Winograd F(2x2, 3x3) instead
// (winograd.h): forward and dx (the same flipped convolution) with 2.25x fewer multiplies and no 9x
// column matrix, the weight gradient as F(3x3, 2x2); the lanes split the batch the same way. Forward
// and dx on larger maps run as F(4x4, 3x3) (winograd4.h, 4x fewer multiplies than im2col; see
// winograd4_preferred).
#include "layers/conv2d.h"

#include <algorithm>
#include <cstring>

#include "layers/blas.h"
#include "layers/dispatch.h"
#include "layers/im2col.h"
#include "layers/winograd4.h"

namespace qtrain {

using layer_detail::dispatch_float;

namespace {

// Elements of one lane's im2col block: about 1 MiB of floats, one core's L2 cache, so the block is
// still cached when the GEMM packs it. Wide enough (n*P >= 256 columns on CIFAR's 8x8 maps) for an
// efficient GEMM.
constexpr int64_t kLaneColumnBudget = int64_t{1} << 18;

bool is_pointwise(const Window2d& w) {
  return w.kh == 1 && w.kw == 1 && w.sh == 1 && w.sw == 1 && w.ph == 0 && w.pw == 0;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Rounds a region of the scratch buffer up to 16 elements, so lanes' regions start 64 bytes apart.
int64_t padded(int64_t n) { return (n + 15) / 16 * 16; }

// Lanes that get samples: the context's threads, at most one per sample.
int lanes_for(Context& ctx, int64_t batch) {
  return static_cast<int>(std::clamp<int64_t>(batch, 1, ctx.cpu_pool().lanes()));
}

// Whether a Winograd forward or dx pass with an oh x ow output map runs as F(4x4, 3x3) rather than
// F(2x2, 3x3): where both axes have at least 8 outputs. Below that the partial 4x4 tiles waste what
// the larger tile saves (a 5x5 or 6x6 map: 4 tiles x 36 products against 9 x 16, the same count),
// and F(4x4, 3x3)'s larger rounding error buys nothing. ResNet-110's 32x32, 16x16 and 8x8 stages all
// take F(4x4, 3x3); docs/performance.md ("Seventh pass") has the per-stage times. The rule is by shape
// only: the same on AMD and Intel, AVX-512 and AVX2.
bool winograd4_preferred(int64_t oh, int64_t ow) { return oh >= 8 && ow >= 8; }

// One Winograd pass of conv2d (forward, or dx as a convolution): F(2x2, 3x3) (winograd.h) or
// F(4x4, 3x3) (winograd4.h) on the geometry g, whose m says which.
struct WinogradPass {
  WinogradConv g;

  bool f4() const { return g.m == 4; }
  int64_t block_samples(int64_t samples) const {
    return f4() ? winograd4_block_samples(g, samples) : winograd_block_samples(g, samples);
  }
  int64_t work_size(int64_t block) const { return f4() ? winograd4_work_size(g, block) : winograd_work_size(g, block); }
  int64_t weights_size() const { return (g.m + 2) * (g.m + 2) * g.oc * g.c; }  // (m + 2)^2 positions
  template <typename T>
  void weights(const T* w, int64_t oc, int64_t c, bool flipped, T* u) const {
    if (f4()) return winograd4_weights(w, oc, c, flipped, u);
    winograd_weights(w, oc, c, flipped, u);
  }
  template <typename T>
  void conv(const T* u, const T* bias, const T* x, T* y, int64_t n, int64_t block, T* work) const {
    if (f4()) return winograd4_conv(g, u, bias, x, y, n, block, work);
    winograd_conv(g, u, bias, x, y, n, block, work);
  }
};

// fn(lane) for lane in [0, lanes) on the context's pool (directly for one lane).
template <typename F>
void run_lanes(Context& ctx, int lanes, F&& fn) {
  if (lanes == 1) return fn(0);
  ctx.cpu_pool().run([&](int lane) {
    if (lane < lanes) fn(lane);
  });
}

}  // namespace

Conv2d::Conv2d(int64_t out_channels, Window2d window, bool bias)
    : out_channels_(out_channels), win_(window), bias_(bias) {
  QT_CHECK(out_channels > 0, "conv2d: out_channels must be > 0, got {}", out_channels);
  QT_CHECK(win_.kh > 0 && win_.kw > 0 && win_.sh > 0 && win_.sw > 0 && win_.ph >= 0 && win_.pw >= 0,
           "conv2d: invalid window kernel [{}, {}] stride [{}, {}] padding [{}, {}]", win_.kh, win_.kw, win_.sh,
           win_.sw, win_.ph, win_.pw);
}

Shape Conv2d::configure(const Shape& input) {
  geom_ = image_geometry(describe(), input, win_);
  return {out_channels_, geom_.oh, geom_.ow};
}

std::vector<ParamSpec> Conv2d::param_specs() const {
  QT_CHECK(geom_.c > 0, "{}: param_specs() before setup()", describe());
  const int64_t fan_in = geom_.c * win_.kh * win_.kw;
  const int64_t fan_out = out_channels_ * win_.kh * win_.kw;
  std::vector<ParamSpec> specs;
  specs.push_back({"weight", {out_channels_, geom_.c, win_.kh, win_.kw}, Init::uniform_fan_in, fan_in, fan_out});
  if (bias_) specs.push_back({"bias", {out_channels_}, Init::uniform_fan_in, fan_in, fan_out});
  return specs;
}

bool Conv2d::use_winograd4(int64_t oh, int64_t ow) const {
  return cpu_algorithm_ == Conv2dCpuAlgorithm::winograd4 ||
         (cpu_algorithm_ == Conv2dCpuAlgorithm::automatic && winograd4_preferred(oh, ow));
}

int64_t Conv2d::block_samples(int64_t per_sample, int64_t samples) {
  return std::clamp<int64_t>(kLaneColumnBudget / std::max<int64_t>(per_sample, 1), 1, std::max<int64_t>(samples, 1));
}

template <typename T>
void Conv2d::forward_reference(Context& ctx, const T* x, T* y, int64_t batch) {
  if (use_winograd()) return forward_winograd<T>(ctx, x, y, batch);
  const int64_t oc = out_channels_, k = geom_.c * win_.kh * win_.kw, p = geom_.out_plane(),
                in = geom_.c * geom_.in_plane();
  const T* w = params_[0].data<T>();
  const T* b = bias_ ? params_[1].data<T>() : nullptr;
  const int lanes = lanes_for(ctx, batch);
  const bool pointwise = is_pointwise(win_);
  const int64_t block = block_samples(k * p, ceil_div(batch, lanes));
  const int64_t lane_size = pointwise ? 0 : padded(k * block * p + oc * block * p);
  T* scratch = scratch_.get<T>(static_cast<size_t>(std::max<int64_t>(lanes * lane_size, 1)));
  const SerialBlas serial(lanes > 1 ? ctx.cpu_threads() : 1);
  run_lanes(ctx, lanes, [&](int lane) {
    const int64_t first = batch * lane / lanes, last = batch * (lane + 1) / lanes;
    if (pointwise) {
      for (int64_t s = first; s < last; ++s) {
        T* ys = y + s * oc * p;
        if (b) {
          for (int64_t o = 0; o < oc; ++o) std::fill_n(ys + o * p, p, b[o]);
        }
        // y_s (OC, P) = W (OC, C) . x_s (C, P) [+ bias rows]
        blas_gemm<T>(false, false, oc, p, k, w, k, x + s * in, p, b ? T(1) : T(0), ys, p);
      }
      return;
    }
    T* col = scratch + lane * lane_size;
    T* out = col + k * block * p;
    for (int64_t s0 = first; s0 < last; s0 += block) {
      const int64_t n = std::min(block, last - s0);
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
  });
}

template <typename T>
void Conv2d::backward_reference(Context& ctx, const T* x, const T* dy, T* dx, int64_t batch) {
  const int64_t oc = out_channels_, c = geom_.c, kk = win_.kh * win_.kw, k = c * kk, p = geom_.out_plane(),
                hw = geom_.in_plane(), in = c * hw;
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
  if (use_winograd()) return backward_winograd<T>(ctx, x, dy, dx, batch);
  const bool pointwise = is_pointwise(win_);
  // dx as a convolution of dy (stride 1, and padding small enough that the flipped padding is >= 0).
  const bool dx_by_conv = !pointwise && dx && win_.sh == 1 && win_.sw == 1 && win_.ph < win_.kh && win_.pw < win_.kw;
  const int64_t k2 = oc * kk;  // rows of dy's im2col matrix when dx is computed as a convolution
  // dy's geometry as the input of the flipped convolution, whose output is (C, H, W), and its window.
  const ImageGeometry g2 = geom_.transposed(oc);
  const Window2d flipped{win_.kh, win_.kw, 1, 1, win_.kh - 1 - win_.ph, win_.kw - 1 - win_.pw};

  const int lanes = lanes_for(ctx, batch);
  const int64_t col_per_sample = std::max(k * p, dx_by_conv ? k2 * hw : 0);
  const int64_t block = block_samples(col_per_sample, ceil_div(batch, lanes));
  const int64_t col_size = padded(col_per_sample * block);
  const int64_t lane_size =
      pointwise ? 0 : col_size + padded(oc * block * p) + (dx_by_conv ? padded(c * block * hw) : 0);
  const int64_t wt_size = dx_by_conv ? padded(c * k2) : 0, partial_size = padded(oc * k);
  T* scratch = scratch_.get<T>(static_cast<size_t>(wt_size + (lanes - 1) * partial_size + lanes * lane_size + 1));
  T* wt = scratch;
  T* partials = scratch + wt_size;  // dW of lanes 1.., summed into dw (lane 0's) after the lanes finish
  T* lane_base = partials + (lanes - 1) * partial_size;
  if (dx_by_conv) {
    // W' (C, OC*kh*kw): W'[ci][(o*kh + i)*kw + j] = W[o][ci][kh-1-i][kw-1-j]
    for (int64_t o = 0; o < oc; ++o)
      for (int64_t ci = 0; ci < c; ++ci)
        for (int64_t t = 0; t < kk; ++t) wt[ci * k2 + o * kk + t] = w[(o * c + ci) * kk + (kk - 1 - t)];
  }
  const SerialBlas serial(lanes > 1 ? ctx.cpu_threads() : 1);
  run_lanes(ctx, lanes, [&](int lane) {
    const int64_t first = batch * lane / lanes, last = batch * (lane + 1) / lanes;
    T* dwl = lane == 0 ? dw : partials + (lane - 1) * partial_size;
    if (pointwise) {
      for (int64_t s = first; s < last; ++s) {
        // dW (OC, C) += dy_s (OC, P) . x_s^T (P, C);  dx_s (C, P) = W^T (C, OC) . dy_s (OC, P)
        blas_gemm<T>(false, true, oc, k, p, dy + s * oc * p, p, x + s * in, p, s == first ? T(0) : T(1), dwl, k);
        if (dx) blas_gemm<T>(true, false, k, p, oc, w, k, dy + s * oc * p, p, T(0), dx + s * in, p);
      }
      return;
    }
    T* col = lane_base + lane * lane_size;
    T* dyc = col + col_size;
    T* out = dyc + padded(oc * block * p);
    if (dx && !dx_by_conv) std::fill_n(dx + first * in, (last - first) * in, T(0));
    for (int64_t s0 = first; s0 < last; s0 += block) {
      const int64_t n = std::min(block, last - s0);
      for (int64_t s = 0; s < n; ++s) {
        im2col(x + (s0 + s) * in, geom_, win_, col + s * p, n * p);
        for (int64_t o = 0; o < oc; ++o)
          std::memcpy(dyc + o * n * p + s * p, dy + ((s0 + s) * oc + o) * p, static_cast<size_t>(p) * sizeof(T));
      }
      // dW (OC, K) (+)= dY (OC, n*P) . col^T (n*P, K)
      blas_gemm<T>(false, true, oc, k, n * p, dyc, n * p, col, n * p, s0 == first ? T(0) : T(1), dwl, k);
      if (!dx) continue;
      if (dx_by_conv) {
        // out (C, n*HW) = W' (C, OC*kh*kw) . col (OC*kh*kw, n*HW), col now dy's im2col under the flipped window
        for (int64_t s = 0; s < n; ++s) im2col(dy + (s0 + s) * oc * p, g2, flipped, col + s * hw, n * hw);
        blas_gemm<T>(false, false, c, n * hw, k2, wt, k2, col, n * hw, T(0), out, n * hw);
        for (int64_t s = 0; s < n; ++s)
          for (int64_t ci = 0; ci < c; ++ci)
            std::memcpy(dx + (s0 + s) * in + ci * hw, out + ci * n * hw + s * hw, static_cast<size_t>(hw) * sizeof(T));
      } else {
        // dcol (K, n*P) = W^T (K, OC) . dY (OC, n*P), written over col (no longer needed).
        blas_gemm<T>(true, false, k, n * p, oc, w, k, dyc, n * p, T(0), col, n * p);
        for (int64_t s = 0; s < n; ++s) col2im_add(col + s * p, n * p, geom_, win_, dx + (s0 + s) * in);
      }
    }
  });
  // The lanes' partial weight gradients, added in lane order: the same bits on every call with the
  // same lane count (a different thread count sums the batch in different groups).
  for (int l = 1; l < lanes; ++l) {
    const T* __restrict part = partials + (l - 1) * partial_size;
    T* __restrict out = dw;
    for (int64_t i = 0; i < oc * k; ++i) out[i] += part[i];
  }
}

template <typename T>
void Conv2d::forward_winograd(Context& ctx, const T* x, T* y, int64_t batch) {
  const WinogradPass pass{
      WinogradConv::forward_of(geom_, win_, out_channels_, use_winograd4(geom_.oh, geom_.ow) ? 4 : 2)};
  const WinogradConv& g = pass.g;
  const T* b = bias_ ? params_[1].data<T>() : nullptr;
  const int lanes = lanes_for(ctx, batch);
  const int64_t block = pass.block_samples(ceil_div(batch, lanes));
  const int64_t u_size = padded(pass.weights_size()), lane_size = padded(pass.work_size(block));
  T* u = scratch_.get<T>(static_cast<size_t>(u_size + lanes * lane_size));
  // The transformed weights, once per call and shared by the lanes.
  pass.weights(params_[0].data<T>(), g.oc, g.c, false, u);
  run_lanes(ctx, lanes, [&](int lane) {
    const int64_t first = batch * lane / lanes, last = batch * (lane + 1) / lanes;
    pass.conv(u, b, x + first * g.in_size(), y + first * g.out_size(), last - first, block,
              u + u_size + lane * lane_size);
  });
}

// The weight gradient by F(3x3, 2x2), summed per lane in the transformed domain (the lanes' partials
// added in lane order, then one output transform: deterministic for a given thread count), and dx by
// F(2x2, 3x3) or F(4x4, 3x3) on dy with the flipped, transposed kernel. Both run block by block of samples, the
// weight gradient's block then dx's, so that dx's transform finds the block of dy that the weight
// gradient just read still in the cache: dy comes from memory once instead of twice.
template <typename T>
void Conv2d::backward_winograd(Context& ctx, const T* x, const T* dy, T* dx, int64_t batch) {
  const WinogradConv g = WinogradConv::forward_of(geom_, win_, out_channels_);
  const WinogradPass dx_pass{WinogradConv::dx_of(geom_, win_, out_channels_, use_winograd4(geom_.h, geom_.w) ? 4 : 2)};
  const int lanes = lanes_for(ctx, batch);
  const int64_t per_lane = ceil_div(batch, lanes);
  const int64_t block = std::min(winograd_block_samples(g, per_lane), dx_pass.block_samples(per_lane));
  const int64_t lane_size = padded(std::max(winograd_work_size(g, block), dx ? dx_pass.work_size(block) : int64_t{0}));
  const int64_t dwt_used = winograd_weight_grad_size(g), dwt_size = padded(dwt_used);
  const int64_t u_size = dx ? padded(dx_pass.weights_size()) : 0;
  T* u = scratch_.get<T>(static_cast<size_t>(u_size + lanes * (dwt_size + lane_size)));
  T* dwt = u + u_size;  // lane l's transformed weight gradient at dwt + l * dwt_size
  T* work = dwt + lanes * dwt_size;
  if (dx) dx_pass.weights(params_[0].data<T>(), g.oc, g.c, true, u);
  run_lanes(ctx, lanes, [&](int lane) {
    const int64_t first = batch * lane / lanes, n = batch * (lane + 1) / lanes - first;
    T* lane_work = work + lane * lane_size;
    if (n == 0) std::fill_n(dwt + lane * dwt_size, dwt_used, T(0));  // a lane without samples adds zeros
    for (int64_t s0 = 0; s0 < n; s0 += block) {
      const int64_t nb = std::min(block, n - s0), s = first + s0;
      winograd_weight_grad(g, x + s * g.in_size(), dy + s * g.out_size(), nb, block, lane_work, dwt + lane * dwt_size,
                           s0 > 0);
      if (dx)
        dx_pass.conv(u, static_cast<const T*>(nullptr), dy + s * g.out_size(), dx + s * g.in_size(), nb, block,
                     lane_work);
    }
  });
  for (int l = 1; l < lanes; ++l) {
    const T* __restrict part = dwt + l * dwt_size;
    T* __restrict sum = dwt;
    for (int64_t i = 0; i < dwt_used; ++i) sum[i] += part[i];
  }
  winograd_weight_grad_output(dwt, g.oc, g.c, grads_[0].data<T>());
}

void Conv2d::forward_cpu(Context& ctx, const Tensor& x, Tensor& y, bool) {
  dispatch_float(x.dtype(), [&]<typename T>() { forward_reference<T>(ctx, x.data<T>(), y.data<T>(), x.dim(0)); });
}

#if QTRAIN_HAS_CUDA
void Conv2d::forward_cuda(Context& ctx, const Tensor& x, Tensor& y, bool) {
  conv2d_forward_cuda(ctx, cudnn_, geom_, win_, x, params_[0], bias_ ? &params_[1] : nullptr, y);
}
#endif

void Conv2d::backward_cpu(Context& ctx, const Tensor& x, const Tensor&, const Tensor& dy, Tensor& dx) {
  dispatch_float(x.dtype(), [&]<typename T>() {
    backward_reference<T>(ctx, x.data<T>(), dy.data<T>(), dx.defined() ? dx.data<T>() : nullptr, x.dim(0));
  });
}

#if QTRAIN_HAS_CUDA
void Conv2d::backward_cuda(Context& ctx, const Tensor& x, const Tensor&, const Tensor& dy, Tensor& dx) {
  conv2d_backward_cuda(ctx, cudnn_, geom_, win_, x, params_[0], dy, grads_[0], bias_ ? &grads_[1] : nullptr,
                       dx.defined() ? &dx : nullptr);
}
#endif

std::unique_ptr<Layer> make_conv2d(ConfigNode& cfg) {
  const WeightedWindowConfig c = read_weighted_window(cfg);
  return std::make_unique<Conv2d>(c.out_channels, c.win, c.bias);
}

#if !QTRAIN_HAS_CUDA
// Without the toolkit no cuDNN state is ever created, so there is nothing to free (conv2d.cu defines
// the deleter otherwise).
void Conv2dCudnnDeleter::operator()(Conv2dCudnn*) const noexcept {}
#endif

}  // namespace qtrain
