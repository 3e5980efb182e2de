// batch norm: configuration, shapes and the CPU reference. Per channel the statistics accumulate in
// f64 (two passes: mean, then squared deviations, which keeps the variance accurate for f32 inputs
// with a large mean); the normalization itself is one fused scale-and-shift per element. Channels are
// split over the context's CPU threads; each channel's sums run in one fixed order, so the results
// do not depend on the thread count.
#include "layers/batchnorm.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "layers/activation.h"
#include "layers/cpu_prefetch.h"
#include "layers/dispatch.h"

namespace qtrain {

using layer_detail::dispatch_float;

namespace {

struct Dims {
  int64_t batch, channels, spatial;
  int64_t n() const { return batch * spatial; }  // values per channel
  int64_t at(int64_t b, int64_t c) const { return (b * channels + c) * spatial; }
  // The row a channel pass reads after row (b, c): the next sample's, and after the last sample the
  // next channel's first (the last channel's own first at the very end: a harmless prefetch).
  int64_t after(int64_t b, int64_t c) const {
    return b + 1 < batch ? at(b + 1, c) : at(0, std::min(c + 1, channels - 1));
  }
  size_t row_bytes(size_t element) const { return static_cast<size_t>(spatial) * element; }
};

// y = x scale + shift, and with `relu` then max(0, .) as the relu layer computes it (a NaN becomes 0),
// so that the fused layer writes the bits of batch norm followed by relu.
template <bool Relu, typename T>
void scale_shift(const Dims& d, int64_t c, const T* __restrict x, T* __restrict y, T scale, T shift) {
  for (int64_t b = 0; b < d.batch; ++b) {
    const T* __restrict in = x + d.at(b, c);
    T* __restrict out = y + d.at(b, c);
    for (int64_t s = 0; s < d.spatial; ++s) {
      const T v = in[s] * scale + shift;
      out[s] = Relu ? (v > T(0) ? v : T(0)) : v;
    }
  }
}

template <typename T>
void scale_shift(bool relu, const Dims& d, int64_t c, const T* x, T* y, T scale, T shift) {
  if (relu)
    scale_shift<true>(d, c, x, y, scale, shift);
  else
    scale_shift<false>(d, c, x, y, scale, shift);
}

// f64 sums of a row with 8 interleaved partial sums: a fixed order (the result does not depend on
// which thread computes it) that the compiler vectorizes, unlike one serial chain of f64 adds.
constexpr int kLanes = 8;

template <typename T>
void add_row(const T* __restrict in, int64_t n, double* __restrict acc) {
  int64_t s = 0;
  for (; s + kLanes <= n; s += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += in[s + l];
  for (; s < n; ++s) acc[s % kLanes] += in[s];
}

template <typename T>
void add_row_squares(const T* __restrict in, int64_t n, double mean, double* __restrict acc) {
  int64_t s = 0;
  for (; s + kLanes <= n; s += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      const double dev = in[s + l] - mean;
      acc[l] += dev * dev;
    }
  for (; s < n; ++s) {
    const double dev = in[s] - mean;
    acc[s % kLanes] += dev * dev;
  }
}

// Eight doubles, and eight float or double values read as doubles (GCC's vector extensions: one zmm
// with AVX-512, two ymm with AVX2).
using Doubles8 = double __attribute__((vector_size(64)));
using Floats8 = float __attribute__((vector_size(32)));

template <typename T>
Doubles8 load_as_doubles(const T* p) {
  if constexpr (std::is_same_v<T, float>) {
    Floats8 f;
    std::memcpy(&f, p, sizeof f);
    return __builtin_convertvector(f, Doubles8);
  } else {
    Doubles8 d;
    std::memcpy(&d, p, sizeof d);
    return d;
  }
}

// sum dy and sum dy (x - mean) of a row. The lanes are kLanes partial sums as in add_row, written
// as one vector each: in the scalar form GCC built the vectors element by element (vmovss, vinsertps)
// or not at all, and these sums were half of batch norm's backward.
template <typename T>
void add_row_grads(const T* __restrict in, const T* __restrict g, int64_t n, double mean, double* __restrict acc_dy,
                   double* __restrict acc_dy_dev) {
  static_assert(kLanes == 8, "one vector of partial sums");
  Doubles8 a, b;
  std::memcpy(&a, acc_dy, sizeof a);
  std::memcpy(&b, acc_dy_dev, sizeof b);
  const Doubles8 m = Doubles8{} + mean;
  int64_t s = 0;
  for (; s + kLanes <= n; s += kLanes) {
    const Doubles8 gd = load_as_doubles(g + s);
    a += gd;
    b += gd * (load_as_doubles(in + s) - m);
  }
  std::memcpy(acc_dy, &a, sizeof a);
  std::memcpy(acc_dy_dev, &b, sizeof b);
  for (; s < n; ++s) {
    acc_dy[s % kLanes] += g[s];
    acc_dy_dev[s % kLanes] += static_cast<double>(g[s]) * (in[s] - mean);
  }
}

// The gradient behind a fused relu, of one row: dy where the layer's output y > 0, else 0 (the relu
// layer's backward). A loop of its own: folded into the f64 sums, the select kept GCC from
// vectorizing them (the backward took twice as long).
template <typename T>
void mask_row(const T* __restrict y, const T* __restrict dy, int64_t n, T* __restrict row) {
  for (int64_t s = 0; s < n; ++s) row[s] = y[s] > T(0) ? dy[s] : T(0);
}

double total(const double* acc) {
  double sum = 0;
  for (int l = 0; l < kLanes; ++l) sum += acc[l];
  return sum;
}

// Channels per pool lane at least: small layers run on the calling thread (a wake-up costs more).
int64_t channel_grain(const Dims& d) { return std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(d.n(), 1)); }

template <typename T>
void forward_training_cpu(CpuPool& pool, const Dims& d, bool relu, double eps, double momentum, const T* x, const T* w,
                          const T* bias, T* running_mean, T* running_var, T* y, double* saved_mean,
                          double* saved_invstd) {
  const double n = static_cast<double>(d.n());
  // Channels are independent: split over the pool's lanes, each channel computed the same way by any.
  pool.parallel_for(d.channels, channel_grain(d), [&](int64_t c_begin, int64_t c_end) {
    for (int64_t c = c_begin; c < c_end; ++c) {
      double acc[kLanes] = {};
      for (int64_t b = 0; b < d.batch; ++b) {
        // Rows of one channel lie a whole sample apart: fetch the next while this one is summed (the
        // next channel's first after the last; the passes below find the channel in the L2 cache).
        prefetch_lines(x + d.after(b, c), d.row_bytes(sizeof(T)));
        add_row(x + d.at(b, c), d.spatial, acc);
      }
      const double mean = total(acc) / n;
      double sq[kLanes] = {};
      for (int64_t b = 0; b < d.batch; ++b) add_row_squares(x + d.at(b, c), d.spatial, mean, sq);
      const double var = total(sq) / n;
      const double invstd = 1.0 / std::sqrt(var + eps);
      const double scale = (w ? w[c] : 1.0) * invstd;
      const double shift = (bias ? bias[c] : 0.0) - mean * scale;
      scale_shift<T>(relu, d, c, x, y, static_cast<T>(scale), static_cast<T>(shift));
      saved_mean[c] = mean;
      saved_invstd[c] = invstd;
      running_mean[c] = static_cast<T>((1 - momentum) * running_mean[c] + momentum * mean);
      running_var[c] = static_cast<T>((1 - momentum) * running_var[c] + momentum * var * n / (n - 1));
    }
  });
}

template <typename T>
void forward_inference_cpu(CpuPool& pool, const Dims& d, bool relu, double eps, const T* x, const T* w, const T* bias,
                           const T* running_mean, const T* running_var, T* y) {
  pool.parallel_for(d.channels, channel_grain(d), [&](int64_t c_begin, int64_t c_end) {
    for (int64_t c = c_begin; c < c_end; ++c) {
      const double scale = (w ? w[c] : 1.0) / std::sqrt(static_cast<double>(running_var[c]) + eps);
      const double shift = (bias ? bias[c] : 0.0) - running_mean[c] * scale;
      scale_shift<T>(relu, d, c, x, y, static_cast<T>(scale), static_cast<T>(shift));
    }
  });
}

// With xhat = (x - mean) invstd: dbias = sum dy, dweight = sum dy xhat, and
// dx = w invstd (dy - dbias / n - xhat dweight / n), written as one scale-and-shift of dy and x.
// With the fused relu, dy is first masked by the layer's output y (mask_row), into dx itself: the
// second pass then reads the masked dy and x as the plain layer reads dy and x, a channel's worth of
// each (256 KiB to 1 MiB in CIFAR ResNets), still in the L2 cache from the first pass. (Masking into a
// row buffer in both passes instead read y and dy twice from memory: the three streams of a channel
// no longer fit the cache.) Without dx the masked rows go to a row buffer.
template <typename T>
void backward_reference(CpuPool& pool, const Dims& d, bool relu, const T* x, const T* y, const T* dy, const T* w,
                        const double* saved_mean, const double* saved_invstd, T* dweight, T* dbias, T* dx) {
  const double n = static_cast<double>(d.n());
  pool.parallel_for(d.channels, channel_grain(d), [&](int64_t c_begin, int64_t c_end) {
    std::vector<T> row(relu && !dx ? static_cast<size_t>(d.spatial) : 0);
    for (int64_t c = c_begin; c < c_end; ++c) {
      const double mean = saved_mean[c], invstd = saved_invstd[c];
      double acc_dy[kLanes] = {}, acc_dy_dev[kLanes] = {};
      for (int64_t b = 0; b < d.batch; ++b) {
        // As in the forward pass: the next rows, a sample apart.
        prefetch_lines(x + d.after(b, c), d.row_bytes(sizeof(T)));
        prefetch_lines(dy + d.after(b, c), d.row_bytes(sizeof(T)));
        if (relu) prefetch_lines(y + d.after(b, c), d.row_bytes(sizeof(T)));
        const T* g = dy + d.at(b, c);
        if (relu) {
          T* masked = dx ? dx + d.at(b, c) : row.data();
          mask_row(y + d.at(b, c), g, d.spatial, masked);
          g = masked;
        }
        add_row_grads(x + d.at(b, c), g, d.spatial, mean, acc_dy, acc_dy_dev);
      }
      const double sum_dy = total(acc_dy), sum_dy_dev = total(acc_dy_dev);
      if (dweight) dweight[c] = static_cast<T>(sum_dy_dev * invstd);
      if (dbias) dbias[c] = static_cast<T>(sum_dy);
      if (!dx) continue;
      const double k = (w ? w[c] : 1.0) * invstd;
      const double x_coef = k * invstd * invstd * sum_dy_dev / n;
      const T a = static_cast<T>(k), bx = static_cast<T>(x_coef),
              shift = static_cast<T>(x_coef * mean - k * sum_dy / n);
      for (int64_t b = 0; b < d.batch; ++b) {
        const T* __restrict in = x + d.at(b, c);
        T* out = dx + d.at(b, c);
        // g is out itself behind the fused relu: each element is read before it is written.
        const T* g = relu ? out : dy + d.at(b, c);
        for (int64_t s = 0; s < d.spatial; ++s) out[s] = a * g[s] - bx * in[s] + shift;
      }
    }
  });
}

}  // namespace

BatchNorm::BatchNorm(int spatial_dims, double eps, double momentum, bool affine, bool relu)
    : spatial_dims_(spatial_dims), eps_(eps), momentum_(momentum), affine_(affine), relu_(relu) {
  QT_CHECK(eps > 0 && momentum >= 0 && momentum <= 1, "batch norm: eps {} must be > 0, momentum {} in [0, 1]", eps,
           momentum);
}

Shape BatchNorm::configure(const Shape& input) {
  const bool ok = spatial_dims_ == 2 ? input.size() == 3 : input.size() == 1 || input.size() == 2;
  if (!ok)
    input_error("{} expects {} per sample, got {}", type(),
                spatial_dims_ == 2 ? "(channels, height, width)" : "(features) or (channels, length)",
                shape_str(input));
  channels_ = input[0];
  spatial_ = 1;
  for (size_t d = 1; d < input.size(); ++d) spatial_ *= input[d];
  if (channels_ <= 0 || spatial_ <= 0) input_error("{} got an empty input {}", type(), shape_str(input));
  saved_mean_.assign(static_cast<size_t>(channels_), 0.0);
  saved_invstd_.assign(static_cast<size_t>(channels_), 0.0);
  return input;
}

std::vector<ParamSpec> BatchNorm::param_specs() const {
  QT_CHECK(channels_ > 0, "{}: param_specs() before setup()", describe());
  if (!affine_) return {};
  return {{"weight", {channels_}, Init::ones, channels_, channels_},
          {"bias", {channels_}, Init::zeros, channels_, channels_}};
}

std::vector<ParamSpec> BatchNorm::buffer_specs() const {
  QT_CHECK(channels_ > 0, "{}: buffer_specs() before setup()", describe());
  return {{"running_mean", {channels_}, Init::zeros, 1, 1}, {"running_var", {channels_}, Init::ones, 1, 1}};
}

#if QTRAIN_HAS_CUDA
void BatchNorm::ensure_cuda_state(Context& ctx, const Tensor& like, int64_t batch) {
  const Device dev = like.device();
  if (!cuda_saved_mean_.defined() || cuda_saved_mean_.device() != dev) {
    cuda_saved_mean_ = Tensor::empty({channels_}, DType::f32, dev);
    cuda_saved_invstd_ = Tensor::empty({channels_}, DType::f32, dev);
    cuda_dscale_ = Tensor::empty({channels_}, DType::f32, dev);
    cuda_dbias_ = Tensor::empty({channels_}, DType::f32, dev);
    // Filled on the context's stream: Tensor::zeros' memset runs on the legacy stream, which the
    // context's non-blocking stream does not wait for.
    cuda_zeros_ = Tensor::empty({channels_}, DType::f32, dev);
    cuda_ones_ = Tensor::empty({channels_}, DType::f32, dev);
    batchnorm_fill_cuda(ctx, cuda_zeros_, 0.0f);
    batchnorm_fill_cuda(ctx, cuda_ones_, 1.0f);
  }
  if (batch > 0 &&
      (!cuda_dx_scratch_.defined() || cuda_dx_scratch_.device() != dev || cuda_dx_scratch_.numel() < like.numel()))
    cuda_dx_scratch_ = Tensor::empty({like.numel()}, DType::f32, dev);
}
#endif

bool BatchNorm::begin_forward(const Tensor& x, bool training) {
  const int64_t batch = x.dim(0);
  if (training && batch * spatial_ < 2)
    input_error("{}: training needs more than one value per channel, got a batch of {} x {} positions", describe(),
                batch, spatial_);
  if (batch == 0) return false;
  if (training) has_batch_stats_ = true;
  return true;
}

void BatchNorm::forward_cpu(Context& ctx, const Tensor& x, Tensor& y, bool training) {
  if (!begin_forward(x, training)) return;
  const Dims d{x.dim(0), channels_, spatial_};
  dispatch_float(x.dtype(), [&]<typename T>() {
    const T* w = affine_ ? params_[0].data<T>() : nullptr;
    const T* b = affine_ ? params_[1].data<T>() : nullptr;
    if (training)
      forward_training_cpu<T>(ctx.cpu_pool(), d, relu_, eps_, momentum_, x.data<T>(), w, b, buffers_[0].data<T>(),
                              buffers_[1].data<T>(), y.data<T>(), saved_mean_.data(), saved_invstd_.data());
    else
      forward_inference_cpu<T>(ctx.cpu_pool(), d, relu_, eps_, x.data<T>(), w, b, buffers_[0].data<T>(),
                               buffers_[1].data<T>(), y.data<T>());
  });
}

#if QTRAIN_HAS_CUDA
void BatchNorm::forward_cuda(Context& ctx, const Tensor& x, Tensor& y, bool training) {
  if (!begin_forward(x, training)) return;
  ensure_cuda_state(ctx, x, 0);
  const Tensor& scale = affine_ ? params_[0] : cuda_ones_;
  const Tensor& bias = affine_ ? params_[1] : cuda_zeros_;
  if (training)
    batchnorm_forward_training_cuda(ctx, x.dim(0), channels_, spatial_, eps_, momentum_, x, scale, bias, buffers_[0],
                                    buffers_[1], cuda_saved_mean_, cuda_saved_invstd_, y);
  else
    batchnorm_forward_inference_cuda(ctx, x.dim(0), channels_, spatial_, eps_, x, scale, bias, buffers_[0], buffers_[1],
                                     y);
  if (relu_) relu_in_place_cuda(ctx, y);
}
#endif

bool BatchNorm::begin_backward(const Tensor& x) {
  QT_CHECK(has_batch_stats_ || x.dim(0) == 0, "{}: backward without a training-mode forward", describe());
  if (x.dim(0) > 0) return true;
  for (Tensor& g : grads_) g.zero_();  // on either device (fill_ is CPU only)
  return false;
}

void BatchNorm::backward_cpu(Context& ctx, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) {
  if (!begin_backward(x)) return;
  const Dims d{x.dim(0), channels_, spatial_};
  dispatch_float(x.dtype(), [&]<typename T>() {
    backward_reference<T>(ctx.cpu_pool(), d, relu_, x.data<T>(), y.data<T>(), dy.data<T>(),
                          affine_ ? params_[0].data<T>() : nullptr, saved_mean_.data(), saved_invstd_.data(),
                          affine_ ? grads_[0].data<T>() : nullptr, affine_ ? grads_[1].data<T>() : nullptr,
                          dx.defined() ? dx.data<T>() : nullptr);
  });
}

#if QTRAIN_HAS_CUDA
void BatchNorm::backward_cuda(Context& ctx, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) {
  if (!begin_backward(x)) return;
  ensure_cuda_state(ctx, x, dx.defined() ? 0 : x.dim(0));
  Tensor dx_target = dx.defined() ? dx : cuda_dx_scratch_.view(0, x.shape());
  const Tensor& scale = affine_ ? params_[0] : cuda_ones_;
  Tensor& dscale = affine_ ? grads_[0] : cuda_dscale_;
  Tensor& dbias = affine_ ? grads_[1] : cuda_dbias_;
  Tensor reaching = dy;
  if (relu_) {
    if (!cuda_dy_scratch_.defined() || cuda_dy_scratch_.device() != x.device() || cuda_dy_scratch_.numel() < x.numel())
      cuda_dy_scratch_ = Tensor::empty({x.numel()}, DType::f32, x.device());
    reaching = cuda_dy_scratch_.view(0, x.shape());
    activation_backward_cuda(ctx, ActivationKind::relu, y, dy, reaching);
  }
  batchnorm_backward_cuda(ctx, x.dim(0), channels_, spatial_, eps_, x, reaching, scale, cuda_saved_mean_,
                          cuda_saved_invstd_, dscale, dbias, &dx_target);
}
#endif

namespace {
std::unique_ptr<Layer> make_batchnorm(ConfigNode& cfg, int spatial_dims) {
  const double eps = cfg.get_double("eps", 1e-5, 0.0, 1.0, /*min_exclusive=*/true);
  const double momentum = cfg.get_double("momentum", 0.1, 0.0, 1.0);
  const bool affine = cfg.get<bool>("affine", true);
  const std::string activation = cfg.get_choice("activation", "none", {"none", "relu"});
  cfg.finish();
  return std::make_unique<BatchNorm>(spatial_dims, eps, momentum, affine, activation == "relu");
}
}  // namespace

std::unique_ptr<Layer> make_batchnorm2d(ConfigNode& cfg) { return make_batchnorm(cfg, 2); }
std::unique_ptr<Layer> make_batchnorm1d(ConfigNode& cfg) { return make_batchnorm(cfg, 1); }

}  // namespace qtrain
