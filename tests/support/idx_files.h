// Builds MNIST-format IDX files for tests (the format data/idx.h reads): big-endian magic and
// dimensions, then the u8 payload. The contents are synthetic and only exercise the pipeline.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "data/idx.h"

namespace qtrain::testing {

using Bytes = std::vector<uint8_t>;

inline void put_be32(Bytes& b, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(v >> s));
}

// An image file of `count` images of rows x cols with the given pixels (count * rows * cols bytes).
inline Bytes idx_images_bytes(const Bytes& pixels, uint32_t count, uint32_t rows = 28, uint32_t cols = 28) {
  Bytes b;
  put_be32(b, kIdxImagesMagic);
  put_be32(b, count);
  put_be32(b, rows);
  put_be32(b, cols);
  b.insert(b.end(), pixels.begin(), pixels.end());
  return b;
}

inline Bytes idx_labels_bytes(const Bytes& labels) {
  Bytes b;
  put_be32(b, kIdxLabelsMagic);
  put_be32(b, static_cast<uint32_t>(labels.size()));
  b.insert(b.end(), labels.begin(), labels.end());
  return b;
}

inline void write_file(const std::string& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// A learnable synthetic digit set: class c lights a c-dependent band of rows, plus deterministic noise.
inline void write_synthetic_mnist(const std::string& dir, uint32_t train, uint32_t test) {
  auto make = [](uint32_t n, uint32_t salt, Bytes& px, Bytes& lb) {
    px.assign(static_cast<size_t>(n) * 784, 0);
    lb.resize(n);
    uint32_t state = 12345u + salt;
    for (uint32_t i = 0; i < n; ++i) {
      const uint8_t c = static_cast<uint8_t>((i * 7 + salt) % 10);
      lb[i] = c;
      for (uint32_t p = 0; p < 784; ++p) {
        state = state * 1664525u + 1013904223u;
        const uint32_t row = p / 28;
        const bool band = row >= 2u * c + 3u && row < 2u * c + 6u;
        px[static_cast<size_t>(i) * 784 + p] = static_cast<uint8_t>((band ? 160 : 0) + (state >> 27));
      }
    }
  };
  Bytes px, lb;
  make(train, 0, px, lb);
  write_file(dir + "/train-images-idx3-ubyte", idx_images_bytes(px, train));
  write_file(dir + "/train-labels-idx1-ubyte", idx_labels_bytes(lb));
  make(test, 1, px, lb);
  write_file(dir + "/t10k-images-idx3-ubyte", idx_images_bytes(px, test));
  write_file(dir + "/t10k-labels-idx1-ubyte", idx_labels_bytes(lb));
}

}  // namespace qtrain::testing
