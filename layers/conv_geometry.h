// conv_geometry: the shared vocabulary of the image layers (conv2d, locally_connected2d, the pooling
// layers): a 2-D sliding window (kernel, stride, padding), its output size with PyTorch's rounding,
// the config readers for "int or [h, w]" keys, and the check that an input is one image per sample
// (C, H, W). Kept apart from any one layer so that every image layer states and checks its geometry
// the same way, with the same messages.
#pragma once

#include <cstdint>
#include <string>

#include "framework/core/config_node.h"
#include "framework/core/tensor.h"

namespace qtrain {

struct Window2d {
  int64_t kh = 1, kw = 1;  // kernel
  int64_t sh = 1, sw = 1;  // stride
  int64_t ph = 0, pw = 0;  // zero padding on each side
};

// (C, H, W) of one sample plus the window's output size.
struct ImageGeometry {
  int64_t c = 0, h = 0, w = 0;
  int64_t oh = 0, ow = 0;
  int64_t in_plane() const { return h * w; }
  int64_t out_plane() const { return oh * ow; }
  // Per-sample shapes as arrays, for the allocation-free per-call checks: (C, H, W) in and
  // (out_channels, OH, OW) out.
  struct Dims {
    int64_t in[3], out[3];
  };
  Dims dims(int64_t out_channels) const { return {{c, h, w}, {out_channels, oh, ow}}; }
  // The input gradient of a stride-1 convolution seen as a convolution itself: dy (out_channels, OH,
  // OW) is its input and dx (C, H, W) its output.
  ImageGeometry transposed(int64_t out_channels) const { return {out_channels, oh, ow, h, w}; }
};

// Output length along one axis, as PyTorch computes it: floor((in + 2p - k) / s) + 1, or with
// ceil_mode the ceiling, minus one when the last window would start inside the right padding only
// (torch.nn.MaxPool2d's rule, so that every window covers at least one input element).
int64_t window_output_size(int64_t in, int64_t k, int64_t s, int64_t p, bool ceil_mode);

// Throws unless `input` is one non-empty image (C, H, W) per sample; `who` names the layer.
void check_image_input(const std::string& who, const Shape& input);

// Validates `input` as (C, H, W) and the window against it, and returns the geometry. `who` names the
// layer in messages ("conv2d 'conv1'"). Rejects a kernel larger than the padded input and (when
// `pad_at_most_half`, PyTorch's pooling rule) padding larger than half the kernel.
ImageGeometry image_geometry(const std::string& who, const Shape& input, const Window2d& win, bool ceil_mode = false,
                             bool pad_at_most_half = false);

// Reads an "int or [h, w]" key (kernel: 3 or [3, 5]); `fallback` is used when the key is absent
// (h < 0 makes the key required). Every entry must be >= min.
struct IntPair {
  int64_t h = -1, w = -1;
};
IntPair read_int_pair(ConfigNode& cfg, const std::string& key, IntPair fallback, int64_t min);

// Reads kernel (required), stride (default `default_stride`, or the kernel when its h is -1) and
// padding (default 0): the keys every image layer shares.
Window2d read_window(ConfigNode& cfg, IntPair default_stride);

// The whole config of a layer with learned weights per window (conv2d, locally_connected2d):
// `out_channels` (required), kernel / stride (default 1) / padding, `bias` (default true), and no
// other key but `type` and `name`.
struct WeightedWindowConfig {
  int64_t out_channels = 0;
  Window2d win;
  bool bias = true;
};
WeightedWindowConfig read_weighted_window(ConfigNode& cfg);

}  // namespace qtrain
