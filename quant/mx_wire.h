// The mx payload's body (quant/wire.h has the header every method shares; docs/quantizers.md,
// "Wire format"). Offsets are from the payload's start; the accessors also run in kernels.
#pragma once

#include <cstddef>
#include <cstdint>

#include "quant/wire.h"

namespace qtrain {

namespace wire {

// mx (OCP MX v1.0): a = element (0 fp8_e4m3, 1 fp8_e5m2, 2 fp6_e3m2, 3 fp6_e2m3, 4 fp4_e2m1), b = block
// size (32), c = 0. Body: the n elements packed (packed_bytes; each block of 32 starts on a byte),
// then ceil(n / 32) E8M0 scale bytes (2^(code - 127); 0xff, NaN, is refused). The last block may be
// shorter. Value of element i = its element value * the scale of block i / 32.
struct MxLayout {
  int64_t n = 0, block = 32, blocks = 0;
  int bits = 8;
  size_t scales_offset = 0;
  size_t body_end = 0;
  QT_HD int64_t len(int64_t b) const { return b + 1 < blocks ? block : n - b * block; }
  // The first byte of block b's elements (blocks of 32 elements are whole bytes for every width).
  QT_HD size_t elements_offset(int64_t b) const { return kHeaderBytes + static_cast<size_t>(b * block * bits / 8); }
};
constexpr int64_t kMxBlock = 32;
inline MxLayout mx_layout(int64_t n, int bits) {
  MxLayout l;
  l.n = n;
  l.block = kMxBlock;
  l.blocks = ceil_div(n, kMxBlock);
  l.bits = bits;
  l.scales_offset = kHeaderBytes + packed_bytes(n, bits);
  l.body_end = l.scales_offset + static_cast<size_t>(l.blocks);
  return l;
}

}  // namespace wire
}  // namespace qtrain
