// Separable antialiased bilinear resampling. For every output pixel i along an axis, the filter centre
// is at begin + (i + 0.5) * scale in source coordinates; source pixel x (centre x + 0.5) gets weight
// triangle((x + 0.5 - centre) / max(scale, 1)), normalized to sum 1, over the pixels within the
// filter's support (clamped to the bounds). This is PIL's ImagingResample coefficient rule, computed in
// float without PIL's 8-bit rounding between the passes.
#include "data/resample.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "framework/core/check.h"

namespace qtrain {
namespace {

// The filter taps of one axis: output i reads `taps` consecutive source pixels from first[i], with
// weights[i * taps ...] (zero-padded past the clamped range).
struct AxisTaps {
  std::vector<int64_t> first;
  std::vector<float> weights;
  int64_t taps = 0;
};

AxisTaps axis_taps(double begin, double length, int64_t out, int64_t lo, int64_t hi) {
  const double scale = length / static_cast<double>(out);
  const double filter_scale = std::max(scale, 1.0);
  const double support = filter_scale;  // the triangle has radius 1 in output pixels
  AxisTaps t;
  t.taps = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  t.first.resize(static_cast<size_t>(out));
  t.weights.assign(static_cast<size_t>(out * t.taps), 0.0f);
  std::vector<double> w(static_cast<size_t>(t.taps));
  for (int64_t i = 0; i < out; ++i) {
    const double center = begin + (static_cast<double>(i) + 0.5) * scale;
    int64_t xmin = std::max(lo, static_cast<int64_t>(std::floor(center - support + 0.5)));
    int64_t xmax = std::min(hi, static_cast<int64_t>(std::floor(center + support + 0.5)));
    xmax = std::min(xmax, xmin + t.taps);
    double sum = 0;
    for (int64_t x = xmin; x < xmax; ++x) {
      const double d = std::abs((static_cast<double>(x) + 0.5 - center) / filter_scale);
      w[static_cast<size_t>(x - xmin)] = d < 1 ? 1 - d : 0;
      sum += w[static_cast<size_t>(x - xmin)];
    }
    if (!(sum > 0)) {
      // The centre lies outside the bounds (a rectangle reaching past them): take the nearest pixel.
      xmin = std::clamp(static_cast<int64_t>(std::floor(center)), lo, hi - 1);
      xmax = xmin + 1;
      w[0] = sum = 1;
    }
    t.first[static_cast<size_t>(i)] = xmin;
    for (int64_t x = xmin; x < xmax; ++x)
      t.weights[static_cast<size_t>(i * t.taps + x - xmin)] =
          static_cast<float>(w[static_cast<size_t>(x - xmin)] / sum);
  }
  return t;
}

}  // namespace

Normalization make_normalization(const double mean[3], const double std[3]) {
  Normalization n{};
  for (int c = 0; c < 3; ++c) {
    n.scale[c] = static_cast<float>(1.0 / (255.0 * std[c]));
    n.shift[c] = static_cast<float>(-mean[c] / std[c]);
  }
  return n;
}

void resample_rgb(const RgbImage& image, const SourceRect& rect, const CropBox& bounds, int64_t out_height,
                  int64_t out_width, bool flip, const Normalization& norm, float* out) {
  QT_CHECK(out_height >= 1 && out_width >= 1, "resample: output {}x{}", out_height, out_width);
  QT_CHECK(bounds.top >= 0 && bounds.left >= 0 && bounds.height >= 1 && bounds.width >= 1 &&
               bounds.top + bounds.height <= image.height && bounds.left + bounds.width <= image.width,
           "resample: bounds {}x{} at ({}, {}) outside a {}x{} image", bounds.height, bounds.width, bounds.top,
           bounds.left, image.height, image.width);
  const AxisTaps ty = axis_taps(rect.top, rect.height, out_height, bounds.top, bounds.top + bounds.height);
  const AxisTaps tx = axis_taps(rect.left, rect.width, out_width, bounds.left, bounds.left + bounds.width);
  // Source rows any output row reads: first[0] .. first[last] + taps (first is non-decreasing).
  const int64_t row0 = ty.first.front();
  const int64_t rows = std::min(ty.first.back() + ty.taps, bounds.top + bounds.height) - row0;

  // Pass 1: every needed source row resampled horizontally, (rows, out_width, 3).
  std::vector<float> tmp(static_cast<size_t>(rows * out_width * 3));
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* src = image.pixels.data() + (row0 + r) * image.width * 3;
    float* dst = tmp.data() + r * out_width * 3;
    for (int64_t ox = 0; ox < out_width; ++ox) {
      const float* w = tx.weights.data() + ox * tx.taps;
      const uint8_t* p = src + tx.first[static_cast<size_t>(ox)] * 3;
      const int64_t n = std::min(tx.taps, bounds.left + bounds.width - tx.first[static_cast<size_t>(ox)]);
      float acc[3] = {0, 0, 0};
      for (int64_t k = 0; k < n; ++k)
        for (int c = 0; c < 3; ++c) acc[c] += w[k] * static_cast<float>(p[k * 3 + c]);
      for (int c = 0; c < 3; ++c) dst[ox * 3 + c] = acc[c];
    }
  }
  // Pass 2: columns, then normalization into planar output.
  const int64_t plane = out_height * out_width;
  for (int64_t oy = 0; oy < out_height; ++oy) {
    const float* w = ty.weights.data() + oy * ty.taps;
    const int64_t first = ty.first[static_cast<size_t>(oy)] - row0;
    const int64_t n = std::min(ty.taps, rows - first);
    for (int64_t ox = 0; ox < out_width; ++ox) {
      float acc[3] = {0, 0, 0};
      for (int64_t k = 0; k < n; ++k) {
        const float* p = tmp.data() + ((first + k) * out_width + ox) * 3;
        for (int c = 0; c < 3; ++c) acc[c] += w[k] * p[c];
      }
      const int64_t x = flip ? out_width - 1 - ox : ox;
      for (int c = 0; c < 3; ++c) out[c * plane + oy * out_width + x] = acc[c] * norm.scale[c] + norm.shift[c];
    }
  }
}

}  // namespace qtrain
