// The nvfp4 payload's body (quant/wire.h has the header every method shares; docs/quantizers.md,
// "Wire format"). Offsets are from the payload's start; the accessors also run in kernels.
#pragma once

#include <cstddef>
#include <cstdint>

#include "quant/wire.h"

namespace qtrain {

namespace wire {

// nvfp4: a = block size (16), b = tensor scale t as f32 bits (max|v| / (6 * 448)), c = 0. Body: n FP4
// E2M1 elements packed as above in blocks of 16 (ceil(n / 2) bytes), then ceil(n / 16) E4M3 block scale bytes (sign 0,
// never NaN). Value of element i = its E2M1 value * (the E4M3 value of block i / 16 * t).
struct Nvfp4Layout {
  int64_t n = 0, block = 16, blocks = 0;
  size_t scales_offset = 0;
  size_t body_end = 0;
  QT_HD int64_t len(int64_t b) const { return b + 1 < blocks ? block : n - b * block; }
};
constexpr int64_t kNvfp4Block = 16;
inline Nvfp4Layout nvfp4_layout(int64_t n) {
  Nvfp4Layout l;
  l.n = n;
  l.block = kNvfp4Block;
  l.blocks = ceil_div(n, kNvfp4Block);
  l.scales_offset = kHeaderBytes + packed_bytes(n, 4);
  l.body_end = l.scales_offset + static_cast<size_t>(l.blocks);
  return l;
}

}  // namespace wire
}  // namespace qtrain
