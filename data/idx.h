// Reader for the IDX format of MNIST and Fashion-MNIST: a big-endian header (magic 0x00000803 for
// unsigned-byte images with 3 dimensions, 0x00000801 for unsigned-byte labels with 1), then the raw
// bytes. gzip-compressed files are read transparently (recognized by their content, whatever the
// name). Every malformed file is an InputError naming the path and what was expected.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace qtrain {

constexpr uint32_t kIdxImagesMagic = 0x00000803;  // u8, 3 dimensions: count, rows, cols
constexpr uint32_t kIdxLabelsMagic = 0x00000801;  // u8, 1 dimension: count

struct IdxImages {
  int64_t count = 0, rows = 0, cols = 0;  // count: the images read
  int64_t announced = 0;                  // the images the header announces (count, unless limited)
  std::vector<uint8_t> pixels;            // (count, rows, cols) row-major
};

// The whole (decompressed when gzip) content of a file. A file longer than `max_bytes` is an
// InputError saying so with `expected` (what announced the size), found after reading at most 1 MiB
// more: a few megabytes of gzip can expand to gigabytes.
std::vector<uint8_t> read_file_bytes(const std::string& path, uint64_t max_bytes = UINT64_MAX,
                                     const std::string& expected = "");

// All images, or the first `max_images` when that is below the header's count (>= 0): a shortened
// run's data.limit_* reads 4,096 of MNIST's 60,000 images, 3 MB instead of 47 MB, and the file's bytes
// past them are neither read nor checked.
IdxImages read_idx_images(const std::string& path, int64_t max_images = -1);
std::vector<uint8_t> read_idx_labels(const std::string& path);

}  // namespace qtrain
