// conv_geometry: output sizes, input validation and the "int or [h, w]" readers of the image layers.
#include "layers/conv_geometry.h"

#include <limits>

namespace qtrain {

int64_t window_output_size(int64_t in, int64_t k, int64_t s, int64_t p, bool ceil_mode) {
  const int64_t span = in + 2 * p - k;
  if (span < 0) return 0;
  int64_t out = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
  if (ceil_mode && (out - 1) * s >= in + p) --out;
  return out;
}

void check_image_input(const std::string& who, const Shape& input) {
  if (input.size() != 3)
    input_error("{} expects one image (channels, height, width) per sample, got input shape {}", who, shape_str(input));
  for (int64_t d : input)
    if (d <= 0) input_error("{} got an input of shape {} with an empty dimension", who, shape_str(input));
}

ImageGeometry image_geometry(const std::string& who, const Shape& input, const Window2d& win, bool ceil_mode,
                             bool pad_at_most_half) {
  check_image_input(who, input);
  if (pad_at_most_half && (2 * win.ph > win.kh || 2 * win.pw > win.kw))
    input_error("{}: padding [{}, {}] must be at most half of the kernel [{}, {}]", who, win.ph, win.pw, win.kh,
                win.kw);
  ImageGeometry g;
  g.c = input[0];
  g.h = input[1];
  g.w = input[2];
  if (win.kh > g.h + 2 * win.ph || win.kw > g.w + 2 * win.pw)
    input_error("{}: kernel [{}, {}] is larger than the padded input [{}, {}] (input {} with padding [{}, {}])", who,
                win.kh, win.kw, g.h + 2 * win.ph, g.w + 2 * win.pw, shape_str(input), win.ph, win.pw);
  g.oh = window_output_size(g.h, win.kh, win.sh, win.ph, ceil_mode);
  g.ow = window_output_size(g.w, win.kw, win.sw, win.pw, ceil_mode);
  return g;
}

IntPair read_int_pair(ConfigNode& cfg, const std::string& key, IntPair fallback, int64_t min) {
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  if (!cfg.has(key)) {
    if (fallback.h < 0) cfg.fail(key, "is required (an integer or a list [height, width])");
    cfg.accept(key);
    return fallback;
  }
  if (cfg.yaml()[key].IsSequence()) {
    const std::vector<int64_t> v = cfg.get_int_list(key, {}, min, kMax);
    if (v.size() != 2)
      cfg.fail(key, fmt::format("must be an integer or a list [height, width], got {} entries", v.size()));
    return {v[0], v[1]};
  }
  const int64_t v = cfg.get_int(key, 0, min, kMax);
  return {v, v};
}

Window2d read_window(ConfigNode& cfg, IntPair default_stride) {
  const IntPair kernel = read_int_pair(cfg, "kernel", {}, 1);
  const IntPair stride = read_int_pair(cfg, "stride", default_stride.h < 0 ? kernel : default_stride, 1);
  const IntPair padding = read_int_pair(cfg, "padding", {0, 0}, 0);
  return {kernel.h, kernel.w, stride.h, stride.w, padding.h, padding.w};
}

WeightedWindowConfig read_weighted_window(ConfigNode& cfg) {
  if (!cfg.has("out_channels")) cfg.fail("out_channels", "is required (the number of output channels)");
  WeightedWindowConfig c;
  c.out_channels = cfg.get_int("out_channels", 0, 1, int64_t{1} << 30);
  c.win = read_window(cfg, {1, 1});
  c.bias = cfg.get<bool>("bias", true);
  cfg.finish();
  return c;
}

}  // namespace qtrain
