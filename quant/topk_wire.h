// The topk payload's body (quant/wire.h has the header every method shares; docs/quantizers.md,
// "Wire format"). Offsets are from the payload's start. Field a is the body's value format, so that a
// payload written before value_bits existed (a = 0, exact f32 values) still decodes, and value_bits: 32
// still writes exactly that layout.
#pragma once

#include <cstddef>
#include <cstdint>

#include "quant/wire.h"

namespace qtrain {

namespace wire {

// Value formats (header field a).
constexpr uint32_t kTopkExactValues = 0;  // k f32 values
inline bool topk_known_value_bits(uint32_t a) { return a == 2 || a == 4 || a == 8; }

// a = 0 (exact values), b = k, c = 0. Body: k u32 indices (strictly increasing), then k f32 values.
// a = 2, 4 or 8 (value_bits), b = k, c = entries per range (>= 1). Body: k u32 indices (strictly
// increasing); then per range of c consecutive entries (the last one may be shorter) its lo and hi
// as f32 (finite, 0 <= lo <= hi: the smallest and largest magnitude of the range's values); then the
// k codes of `a` bits packed LSB first, code j at bit a*j of the code bytes (bits after the last code
// are zero). A code is sign << (a - 1) | level (quant/topk_values.h).
struct TopkLayout {
  int64_t k = 0;
  int bits = 32;       // 32: f32 values; 2, 4, 8: codes
  int64_t group = 0;   // entries per range (codes only)
  int64_t groups = 0;  // ranges (codes only)
  size_t values = 0;   // offset of the f32 values (bits 32)
  size_t ranges = 0;   // offset of the (lo, hi) pairs (codes)
  size_t codes = 0;    // offset of the packed codes
  size_t end = 0;      // end of the body, before the padding
};

// `group` is the entries per range (>= 1; ignored for bits 32).
inline TopkLayout topk_layout(int64_t k, int bits, int64_t group) {
  TopkLayout l;
  l.k = k;
  l.bits = bits;
  const size_t after_indices = kHeaderBytes + 4 * static_cast<size_t>(k);
  if (bits == 32) {
    l.values = after_indices;
    l.end = after_indices + 4 * static_cast<size_t>(k);
    return l;
  }
  l.group = group;
  l.groups = k == 0 ? 0 : ceil_div(k, group);
  l.ranges = after_indices;
  l.codes = l.ranges + 8 * static_cast<size_t>(l.groups);
  l.end = l.codes + packed_bytes(k, bits);
  return l;
}

}  // namespace wire
}  // namespace qtrain
