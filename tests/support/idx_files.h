// Writes small MNIST-format IDX files for tests (the format of data/idx.h): big-endian magic and
// dimensions, then u8 payload. The content is synthetic and used only to exercise the pipeline.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace qtrain::testing {

inline void put_be32(std::ofstream& out, uint32_t v) {
  const char b[4] = {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
                     static_cast<char>(v)};
  out.write(b, 4);
}

inline void write_idx_images(const std::string& path, const std::vector<uint8_t>& pixels, uint32_t count,
                             uint32_t rows = 28, uint32_t cols = 28) {
  std::ofstream out(path, std::ios::binary);
  put_be32(out, 0x00000803);
  put_be32(out, count);
  put_be32(out, rows);
  put_be32(out, cols);
  out.write(reinterpret_cast<const char*>(pixels.data()), static_cast<std::streamsize>(pixels.size()));
}

inline void write_idx_labels(const std::string& path, const std::vector<uint8_t>& labels) {
  std::ofstream out(path, std::ios::binary);
  put_be32(out, 0x00000801);
  put_be32(out, static_cast<uint32_t>(labels.size()));
  out.write(reinterpret_cast<const char*>(labels.data()), static_cast<std::streamsize>(labels.size()));
}

// A learnable synthetic digit set: class c lights a c-dependent band of rows, plus deterministic noise.
inline void write_synthetic_mnist(const std::string& dir, uint32_t train, uint32_t test) {
  auto make = [](uint32_t n, uint32_t salt, std::vector<uint8_t>& px, std::vector<uint8_t>& lb) {
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
  std::vector<uint8_t> px, lb;
  make(train, 0, px, lb);
  write_idx_images(dir + "/train-images-idx3-ubyte", px, train);
  write_idx_labels(dir + "/train-labels-idx1-ubyte", lb);
  make(test, 1, px, lb);
  write_idx_images(dir + "/t10k-images-idx3-ubyte", px, test);
  write_idx_labels(dir + "/t10k-labels-idx1-ubyte", lb);
}

}  // namespace qtrain::testing
