// The adaptive payload's body (quant/wire.h has the header every method shares; docs/quantizers.md,
// "Wire format"). Offsets are from the payload's start; the accessors also run in kernels.
#pragma once

#include <cstddef>
#include <cstdint>

#include "quant/wire.h"

namespace qtrain {

namespace wire {

// adaptive: column lengths up to this use 16-bit entries (15-bit row + sign), longer ones 32-bit.
constexpr int64_t kMaxRows16 = 32767;
inline int adaptive_entry_bytes(int64_t column) { return column <= kMaxRows16 ? 2 : 4; }

// adaptive: a = entry bytes (2 when L <= 32767, else 4), b = column length L, c = entry count E.
// Body: n/L column headers [first entry u32][mu+ f32][mu- f32], then u32 E, then E entries
// (row << 1 | positive), grouped by column in increasing row order.
struct AdaptiveLayout {
  int64_t n = 0, column = 1, columns = 0, entries = 0;
  int entry_bytes = 2;
  size_t count_offset = 0;  // the u32 E
  size_t entries_offset = 0;
  size_t body_end = 0;
};
inline AdaptiveLayout adaptive_layout(int64_t n, int64_t column, int64_t entries) {
  AdaptiveLayout l;
  l.n = n;
  l.column = column;
  l.columns = n / column;
  l.entries = entries;
  l.entry_bytes = adaptive_entry_bytes(column);
  l.count_offset = kHeaderBytes + 12 * static_cast<size_t>(l.columns);
  l.entries_offset = l.count_offset + 4;
  l.body_end = l.entries_offset + static_cast<size_t>(l.entry_bytes) * static_cast<size_t>(entries);
  return l;
}

}  // namespace wire
}  // namespace qtrain
