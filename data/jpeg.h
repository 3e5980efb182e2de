// JPEG decoding with libjpeg-turbo into 8-bit RGB. Grayscale images are expanded to RGB; CMYK and YCCK
// images (a few ImageNet files) are converted to RGB (Adobe's inverted CMYK when the Adobe marker says
// so). Every libjpeg error, and every corrupt-data warning except the benign "extraneous bytes before
// marker", is an InputError naming the file and libjpeg's message: libjpeg would otherwise exit() on
// errors and fill truncated images with grey.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace qtrain {

struct RgbImage {
  int64_t height = 0, width = 0;
  std::vector<uint8_t> pixels;  // (height, width, 3) row-major, interleaved R, G, B
};

// The most pixels a JPEG may declare (PIL's DecompressionBombError threshold, 2 x 89478485); the
// largest ImageNet photographs have about 10^7.
constexpr uint64_t kMaxJpegPixels = 178956970;

// Decodes the JPEG in `data`; `path` names it in errors. Thread-safe (no shared state).
RgbImage decode_jpeg(const uint8_t* data, size_t size, const std::string& path);

// Reads and decodes a JPEG file.
RgbImage read_jpeg(const std::string& path);

}  // namespace qtrain
