// The codebook payload's body (quant/wire.h has the header every method shares; docs/quantizers.md,
// "Wire format"). Offsets are from the payload's start.
#pragma once

#include <cstddef>
#include <cstdint>

#include "quant/wire.h"

namespace qtrain {
namespace wire {

// codebook: a = bits (4 or 8), b = 0, c = 0. Body: the table of 2^bits f32 bin means (finite and
// non-decreasing), then the n codes packed as one block (wire.h's packed codes: 8 bits one byte each;
// 4 bits byte j = code j | code j + ceil(n/2) << 4, an odd n leaving the last high nibble zero).
// Value i decodes to table[code i].
struct CodebookLayout {
  int64_t n = 0;
  int bits = 8;
  int bins = 256;
  int64_t half = 0;  // 4 bits: ceil(n / 2), the first value of the high nibbles
  size_t table_offset = kHeaderBytes;
  size_t codes_offset = 0;
  size_t body_end = 0;
};

inline CodebookLayout codebook_layout(int64_t n, int bits) {
  CodebookLayout l;
  l.n = n;
  l.bits = bits;
  l.bins = 1 << bits;
  l.half = (n + 1) / 2;
  l.codes_offset = l.table_offset + 4 * static_cast<size_t>(l.bins);
  l.body_end = l.codes_offset + packed_bytes(n, bits);
  return l;
}

}  // namespace wire
}  // namespace qtrain
