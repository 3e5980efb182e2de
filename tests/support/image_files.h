// Builds image-dataset files for tests: CIFAR binary records and JPEG files (written with libjpeg),
// in the formats data/cifar.h and data/imagefolder.h read. Contents are synthetic.
#pragma once

// clang-format off
#include <cstdio>  // jpeglib.h needs FILE and size_t declared first
#include <jpeglib.h>
// clang-format on

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "tests/support/idx_files.h"

namespace qtrain::testing {

// One CIFAR record: label byte(s), then the R, G, B planes (3072 bytes).
inline void append_cifar_record(Bytes& out, const Bytes& labels, const Bytes& pixels) {
  out.insert(out.end(), labels.begin(), labels.end());
  out.insert(out.end(), pixels.begin(), pixels.end());
}

// Pixels of synthetic CIFAR image `i`: channel c, row y, column x holds (i * 31 + c * 85 + y * 8 + x) % 256.
inline uint8_t cifar_pixel(uint32_t i, int c, int y, int x) {
  return static_cast<uint8_t>((i * 31 + static_cast<uint32_t>(c * 85 + y * 8 + x)) % 256);
}

inline Bytes cifar_pixels(uint32_t i) {
  Bytes p;
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < 32; ++y)
      for (int x = 0; x < 32; ++x) p.push_back(cifar_pixel(i, c, y, x));
  return p;
}

// `components` = 1 (grayscale), 3 (RGB) or 4 (CMYK, written with an Adobe marker as libjpeg does, so
// readers take it as inverted) interleaved 8-bit pixels, height x width, encoded at `quality`.
inline Bytes encode_jpeg(const Bytes& pixels, int width, int height, int components, int quality = 95) {
  jpeg_compress_struct cinfo{};
  jpeg_error_mgr err{};
  cinfo.err = jpeg_std_error(&err);
  jpeg_create_compress(&cinfo);
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&cinfo, &buffer, &size);
  cinfo.image_width = static_cast<JDIMENSION>(width);
  cinfo.image_height = static_cast<JDIMENSION>(height);
  cinfo.input_components = components;
  cinfo.in_color_space = components == 1 ? JCS_GRAYSCALE : components == 3 ? JCS_RGB : JCS_CMYK;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, quality, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  const size_t stride = static_cast<size_t>(width) * static_cast<size_t>(components);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(pixels.data()) + cinfo.next_scanline * stride;
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  Bytes out(buffer, buffer + size);
  std::free(buffer);
  return out;
}

// A width x height RGB image of one colour.
inline Bytes solid_rgb(int width, int height, uint8_t r, uint8_t g, uint8_t b) {
  Bytes p;
  for (int i = 0; i < width * height; ++i) p.insert(p.end(), {r, g, b});
  return p;
}

}  // namespace qtrain::testing
