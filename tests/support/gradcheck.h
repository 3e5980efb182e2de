// Float64 central-difference gradient checks for any Layer or Loss: every backward is tested against
// them (after Caffe's GradientChecker). A layer is checked through the scalar L = sum(y * r) for a
// fixed random r, so one backward call with dy = r gives dL/dx and dL/dparams at once; each
// coordinate is then perturbed by +-h and compared as |a - n| <= rtol * max(|a|, |n|, 1). Backward's
// outputs are pre-filled with NaN so a coordinate it forgets to write (or accumulates into) fails.
// Header-only: tests link it directly.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "framework/core/context.h"
#include "framework/core/layer.h"
#include "framework/core/loss.h"
#include "framework/core/philox.h"
#include "framework/core/tensor.h"

namespace qtrain::testing {

struct GradCheckOptions {
  // Central-difference step. In float64 the truncation error (h^2 f'''/6 ~ 1e-11) and the rounding
  // error (eps |L| / h ~ 1e-11 |L|) both stay far below rtol for the smooth layers we check.
  double step = 1e-5;
  double rtol = 1e-6;
  // Skip input coordinates within kink_range of a point where the function is not differentiable
  // (ReLU at 0): there the two one-sided slopes differ and the central difference is meaningless.
  bool has_kink = false;
  double kink = 0.0;
  double kink_range = 1e-5;
  uint64_t seed = 1701;  // of r, the random projection of y
};

struct GradCheckResult {
  int64_t checked = 0;
  int64_t skipped = 0;  // inside the kink window
  int64_t failed = 0;
  double max_error = 0;  // of |a - n| / max(|a|, |n|, 1)
  std::string failures;  // the first few, one per line
  bool ok() const { return failed == 0 && checked > 0; }
};

// Deterministic uniform doubles in [lo, hi) from Philox (the same on every platform, unlike
// std::uniform_real_distribution). Returns a CPU tensor of `dtype` (f64 or f32).
inline Tensor random_tensor(const Shape& shape, uint64_t seed, double lo = -1.0, double hi = 1.0,
                            DType dtype = DType::f64) {
  Tensor t = Tensor::empty(shape, dtype);
  const PhiloxKey key = derive_philox_key(seed, 0x7E57);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const PhiloxBlock b = philox_subsequence_block(key, static_cast<uint64_t>(i));
    // 53 random bits, as numpy builds a double from two 32-bit words.
    const double u =
        static_cast<double>((static_cast<uint64_t>(b.v[0] >> 5) << 26) | (b.v[1] >> 6)) / 9007199254740992.0;
    const double v = lo + (hi - lo) * u;
    if (dtype == DType::f64)
      t.data<double>()[i] = v;
    else
      t.data<float>()[i] = static_cast<float>(v);
  }
  return t;
}

// The parameters of a layer as Net holds them: one arena for the values, one for the gradients, and
// views into them bound to the layer (call after setup()). Values are uniform in [-scale, scale).
struct BoundParams {
  Tensor params;
  Tensor grads;
};

inline BoundParams bind_random_params(Layer& layer, uint64_t seed, DType dtype = DType::f64,
                                      Device device = Device::cpu(), double scale = 1.0) {
  const std::vector<ParamSpec> specs = layer.param_specs();
  int64_t total = 0;
  for (const ParamSpec& s : specs) total += shape_numel(s.shape);
  BoundParams out;
  const Tensor host = random_tensor({std::max<int64_t>(total, 1)}, seed, -scale, scale, dtype);
  out.params = host.to(device);
  out.grads = Tensor::zeros({std::max<int64_t>(total, 1)}, dtype, device);
  std::vector<Tensor> p, g;
  int64_t offset = 0;
  for (const ParamSpec& s : specs) {
    p.push_back(out.params.view(offset, s.shape));
    g.push_back(out.grads.view(offset, s.shape));
    offset += shape_numel(s.shape);
  }
  layer.bind(std::move(p), std::move(g));
  return out;
}

// The layer's buffers (running statistics) in one tensor, bound to the layer and initialized per
// spec as Net does (zeros or ones).
inline Tensor bind_initial_buffers(Layer& layer, DType dtype = DType::f64, Device device = Device::cpu()) {
  const std::vector<ParamSpec> specs = layer.buffer_specs();
  int64_t total = 0;
  for (const ParamSpec& s : specs) total += shape_numel(s.shape);
  Tensor host = Tensor::zeros({std::max<int64_t>(total, 1)}, dtype);
  int64_t offset = 0;
  for (const ParamSpec& s : specs) {
    if (s.init == Init::ones) host.view(offset, {shape_numel(s.shape)}).fill_(1.0);
    offset += shape_numel(s.shape);
  }
  Tensor arena = host.to(device);
  std::vector<Tensor> views;
  offset = 0;
  for (const ParamSpec& s : specs) {
    views.push_back(arena.view(offset, s.shape));
    offset += shape_numel(s.shape);
  }
  layer.bind_buffers(std::move(views));
  return arena;
}

namespace gradcheck_detail {

inline Shape with_batch(int64_t batch, const Shape& s) {
  Shape out{batch};
  out.insert(out.end(), s.begin(), s.end());
  return out;
}

inline double dot(const Tensor& a, const Tensor& b) {
  double s = 0;
  for (int64_t i = 0; i < a.numel(); ++i) s += a.data<double>()[i] * b.data<double>()[i];
  return s;
}

inline void compare(GradCheckResult& res, const std::string& what, int64_t index, double analytic, double numeric,
                    double rtol) {
  const double scale = std::max({std::fabs(analytic), std::fabs(numeric), 1.0});
  const double err = std::fabs(analytic - numeric) / scale;
  ++res.checked;
  // NaN (an unwritten or garbage gradient) counts as a failure.
  if (std::isnan(err) || err > rtol) {
    if (++res.failed <= 8)
      res.failures +=
          fmt::format("{}[{}]: analytic {:.12g} numeric {:.12g} (error {:.3g})\n", what, index, analytic, numeric, err);
  }
  if (!std::isnan(err)) res.max_error = std::max(res.max_error, err);
}

}  // namespace gradcheck_detail

// Checks dL/dx and dL/dparams of `layer` at x (CPU, f64, (B, input...)), in training mode, for
// L = sum(y * r). The layer must be set up and bound (bind_random_params). ctx is a CPU context;
// its step stays fixed, so stochastic layers (dropout) see the same randomness in every evaluation.
inline GradCheckResult check_layer_gradients(Layer& layer, Context& ctx, const Tensor& x_in, const Shape& out_shape,
                                             const GradCheckOptions& opt = {}) {
  using namespace gradcheck_detail;
  QT_CHECK(x_in.dtype() == DType::f64 && x_in.device().is_cpu(), "gradient checks run on f64 CPU tensors");
  GradCheckResult res;
  Tensor x = x_in.clone();
  const int64_t batch = x.dim(0);
  Tensor y = Tensor::empty(with_batch(batch, out_shape), DType::f64);
  const Tensor r = random_tensor(y.shape(), opt.seed);

  // Analytic gradients. NaN pre-fill: backward must overwrite every coordinate.
  y.fill_(std::nan(""));
  layer.forward(ctx, x, y, /*training=*/true);
  Tensor dx = Tensor::empty(x.shape(), DType::f64);
  dx.fill_(std::nan(""));
  for (Tensor& g : layer.grads()) g.fill_(std::nan(""));
  layer.backward(ctx, x, y, r, dx);

  auto objective = [&]() {
    y.fill_(std::nan(""));
    layer.forward(ctx, x, y, true);
    return dot(y, r);
  };
  auto numeric_at = [&](double* v) {
    const double saved = *v;
    *v = saved + opt.step;
    const double plus = objective();
    *v = saved - opt.step;
    const double minus = objective();
    *v = saved;
    return (plus - minus) / (2 * opt.step);
  };

  double* xs = x.data<double>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    if (opt.has_kink && std::fabs(xs[i] - opt.kink) < opt.kink_range) {
      ++res.skipped;
      continue;
    }
    compare(res, "dx", i, dx.data<double>()[i], numeric_at(xs + i), opt.rtol);
  }
  const std::vector<ParamSpec> specs = layer.param_specs();
  for (size_t k = 0; k < layer.params().size(); ++k) {
    double* ps = layer.params()[k].data<double>();
    const double* gs = layer.grads()[k].data<double>();
    for (int64_t i = 0; i < layer.params()[k].numel(); ++i)
      compare(res, "d" + specs[k].name, i, gs[i], numeric_at(ps + i), opt.rtol);
  }
  return res;
}

// The multi-input form (add): checks dL/dx_k for every input and dL/dparams, through the layer's
// *_inputs entry points. xs_in: CPU f64 tensors, each (B, input_k...).
inline GradCheckResult check_multi_input_gradients(Layer& layer, Context& ctx, const std::vector<Tensor>& xs_in,
                                                   const Shape& out_shape, const GradCheckOptions& opt = {}) {
  using namespace gradcheck_detail;
  GradCheckResult res;
  std::vector<Tensor> xs, dxs;
  for (const Tensor& x : xs_in) {
    QT_CHECK(x.dtype() == DType::f64 && x.device().is_cpu(), "gradient checks run on f64 CPU tensors");
    xs.push_back(x.clone());
    dxs.push_back(Tensor::empty(x.shape(), DType::f64));
    dxs.back().fill_(std::nan(""));
  }
  Tensor y = Tensor::empty(with_batch(xs[0].dim(0), out_shape), DType::f64);
  const Tensor r = random_tensor(y.shape(), opt.seed);
  y.fill_(std::nan(""));
  layer.forward_inputs(ctx, xs, y, /*training=*/true);
  for (Tensor& g : layer.grads()) g.fill_(std::nan(""));
  layer.backward_inputs(ctx, xs, y, r, dxs);
  auto numeric_at = [&](double* v) {
    const double saved = *v;
    auto objective = [&]() {
      y.fill_(std::nan(""));
      layer.forward_inputs(ctx, xs, y, true);
      return dot(y, r);
    };
    *v = saved + opt.step;
    const double plus = objective();
    *v = saved - opt.step;
    const double minus = objective();
    *v = saved;
    return (plus - minus) / (2 * opt.step);
  };
  for (size_t k = 0; k < xs.size(); ++k)
    for (int64_t i = 0; i < xs[k].numel(); ++i)
      compare(res, fmt::format("dx{}", k), i, dxs[k].data<double>()[i], numeric_at(xs[k].data<double>() + i), opt.rtol);
  const std::vector<ParamSpec> specs = layer.param_specs();
  for (size_t k = 0; k < layer.params().size(); ++k)
    for (int64_t i = 0; i < layer.params()[k].numel(); ++i)
      compare(res, "d" + specs[k].name, i, layer.grads()[k].data<double>()[i],
              numeric_at(layer.params()[k].data<double>() + i), opt.rtol);
  return res;
}

// Checks d(mean loss)/dlogits of `loss` at logits (CPU, f64, (B, C)) with fixed labels.
inline GradCheckResult check_loss_gradients(Loss& loss, Context& ctx, const Tensor& logits_in, const Tensor& labels,
                                            const GradCheckOptions& opt = {}) {
  using namespace gradcheck_detail;
  QT_CHECK(logits_in.dtype() == DType::f64 && logits_in.device().is_cpu(), "gradient checks run on f64 CPU tensors");
  GradCheckResult res;
  Tensor z = logits_in.clone();
  const double batch = static_cast<double>(z.dim(0));
  Tensor dz = Tensor::empty(z.shape(), DType::f64);
  dz.fill_(std::nan(""));
  loss.compute(ctx, z, labels, &dz);
  double* zs = z.data<double>();
  for (int64_t i = 0; i < z.numel(); ++i) {
    const double saved = zs[i];
    zs[i] = saved + opt.step;
    const double plus = loss.compute(ctx, z, labels, nullptr).loss_sum / batch;
    zs[i] = saved - opt.step;
    const double minus = loss.compute(ctx, z, labels, nullptr).loss_sum / batch;
    zs[i] = saved;
    compare(res, "dlogits", i, dz.data<double>()[i], (plus - minus) / (2 * opt.step), opt.rtol);
  }
  return res;
}

}  // namespace qtrain::testing
