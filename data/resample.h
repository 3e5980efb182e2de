// Bilinear resampling of 8-bit RGB images into normalized CHW floats, antialiased like PIL's BILINEAR
// resize (which torchvision's Resize / RandomResizedCrop use on PIL images): each output pixel is a
// triangle-filter average over the source pixels under it, the filter widened by the reduction factor
// when shrinking, so downscaling averages instead of aliasing. Separable: rows first, then columns.
#pragma once

#include <cstdint>

#include "data/augment.h"
#include "data/jpeg.h"

namespace qtrain {

// A source rectangle in continuous pixel coordinates (pixel (y, x) covers [y, y+1) x [x, x+1)).
struct SourceRect {
  double top = 0, left = 0, height = 0, width = 0;
};

// Per-channel affine normalization of a pixel value v in [0, 255]: v * scale[c] + shift[c].
struct Normalization {
  float scale[3], shift[3];
};
// (v / 255 - mean[c]) / std[c].
Normalization make_normalization(const double mean[3], const double std[3]);

// Resamples `rect` of `image` to out_height x out_width, reading only pixels inside `bounds` (the whole
// image, or the crop being resized so that nothing outside it leaks in), mirrored left-right when
// `flip`, normalized, into out (3, out_height, out_width).
void resample_rgb(const RgbImage& image, const SourceRect& rect, const CropBox& bounds, int64_t out_height,
                  int64_t out_width, bool flip, const Normalization& norm, float* out);

}  // namespace qtrain
