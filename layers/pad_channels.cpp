// pad_channels: configuration, shapes and the CPU reference. Forward writes every output element
// (zeros in the padded channels); backward writes every input element (zeros where the stride skipped).
#include "layers/pad_channels.h"

#include <algorithm>

#include "layers/dispatch.h"

namespace qtrain {

using layer_detail::dispatch_float;

namespace {

template <typename T>
void forward_reference(const PadChannels::Geometry& g, int64_t batch, const T* __restrict x, T* __restrict y) {
  const int64_t in_plane = g.h_in * g.w_in, out_plane = g.h_out * g.w_out;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t c = 0; c < g.c_out; ++c) {
      T* __restrict out = y + (b * g.c_out + c) * out_plane;
      const int64_t ci = c - g.before;
      if (ci < 0 || ci >= g.c_in) {
        std::fill_n(out, out_plane, T(0));
        continue;
      }
      const T* __restrict in = x + (b * g.c_in + ci) * in_plane;
      for (int64_t i = 0; i < g.h_out; ++i)
        for (int64_t j = 0; j < g.w_out; ++j) out[i * g.w_out + j] = in[i * g.stride * g.w_in + j * g.stride];
    }
  }
}

template <typename T>
void backward_reference(const PadChannels::Geometry& g, int64_t batch, const T* __restrict dy, T* __restrict dx) {
  const int64_t in_plane = g.h_in * g.w_in, out_plane = g.h_out * g.w_out;
  std::fill_n(dx, batch * g.c_in * in_plane, T(0));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t c = 0; c < g.c_in; ++c) {
      const T* __restrict d = dy + (b * g.c_out + c + g.before) * out_plane;
      T* __restrict out = dx + (b * g.c_in + c) * in_plane;
      for (int64_t i = 0; i < g.h_out; ++i)
        for (int64_t j = 0; j < g.w_out; ++j) out[i * g.stride * g.w_in + j * g.stride] = d[i * g.w_out + j];
    }
}

}  // namespace

PadChannels::PadChannels(int64_t channels, int64_t stride) {
  QT_CHECK(channels > 0 && stride > 0, "pad_channels: channels and stride must be > 0, got {} and {}", channels,
           stride);
  g_.c_out = channels;
  g_.stride = stride;
}

Shape PadChannels::configure(const Shape& input) {
  if (input.size() != 3)
    input_error("pad_channels expects (channels, height, width) per sample, got {}", shape_str(input));
  if (input[0] > g_.c_out)
    input_error("pad_channels: the input has {} channels, more than channels: {}", input[0], g_.c_out);
  g_.c_in = input[0];
  g_.h_in = input[1];
  g_.w_in = input[2];
  g_.h_out = (g_.h_in + g_.stride - 1) / g_.stride;
  g_.w_out = (g_.w_in + g_.stride - 1) / g_.stride;
  g_.before = (g_.c_out - g_.c_in) / 2;
  return {g_.c_out, g_.h_out, g_.w_out};
}

void PadChannels::forward_cpu(Context&, const Tensor& x, Tensor& y, bool) {
  dispatch_float(x.dtype(), [&]<typename T>() { forward_reference<T>(g_, x.dim(0), x.data<T>(), y.data<T>()); });
}

#if QTRAIN_HAS_CUDA
void PadChannels::forward_cuda(Context& ctx, const Tensor& x, Tensor& y, bool) {
  pad_channels_forward_cuda(ctx, g_, x, y);
}
#endif

void PadChannels::backward_cpu(Context&, const Tensor& x, const Tensor&, const Tensor& dy, Tensor& dx) {
  dispatch_float(x.dtype(), [&]<typename T>() { backward_reference<T>(g_, x.dim(0), dy.data<T>(), dx.data<T>()); });
}

#if QTRAIN_HAS_CUDA
void PadChannels::backward_cuda(Context& ctx, const Tensor&, const Tensor&, const Tensor& dy, Tensor& dx) {
  pad_channels_backward_cuda(ctx, g_, dy, dx);
}
#endif

std::unique_ptr<Layer> make_pad_channels(ConfigNode& cfg) {
  if (!cfg.has("channels")) cfg.fail("channels", "is required: the output's number of channels");
  const int64_t channels = cfg.get_int("channels", 1, 1, 1 << 20);
  const int64_t stride = cfg.get_int("stride", 1, 1, 1 << 10);
  cfg.finish();
  return std::make_unique<PadChannels>(channels, stride);
}

}  // namespace qtrain
