// The onebit payload's body (quant/wire.h has the header every method shares; docs/quantizers.md,
// "Wire format"). Offsets are from the payload's start; the accessors also run in kernels.
#pragma once

#include <cstddef>
#include <cstdint>

#include "quant/wire.h"

namespace qtrain {

// The mode as the header stores it (field a).
enum class OnebitMode : uint8_t { column = 0, bucket = 1 };

namespace wire {

// onebit: a = mode (0 column, 1 bucket), b = group length L (the column length or the bucket size),
// c = 0. Groups of L consecutive values (column mode: L divides n; bucket mode: the last group may be
// shorter), each [m0 f32][m1 f32][ceil(len/32) u32 words], bit j of word w = value 32w + j >= 0.
struct OnebitLayout {
  int64_t n = 0, group = 1, groups = 0;
  int64_t words_full = 0;  // words of a full group
  size_t group_bytes = 0;  // bytes of a full group (header + words)
  size_t body_end = 0;     // unpadded payload size
  QT_HD int64_t len(int64_t g) const { return g + 1 < groups ? group : n - g * group; }
  QT_HD size_t offset(int64_t g) const { return kHeaderBytes + static_cast<size_t>(g) * group_bytes; }
};
inline OnebitLayout onebit_layout(int64_t n, int64_t group) {
  OnebitLayout l;
  l.n = n;
  l.group = group;
  l.groups = ceil_div(n, group);
  l.words_full = ceil_div(group, 32);
  l.group_bytes = 8 + 4 * static_cast<size_t>(l.words_full);
  l.body_end = kHeaderBytes;
  if (l.groups > 0)
    l.body_end = l.offset(l.groups - 1) + 8 + 4 * static_cast<size_t>(ceil_div(l.len(l.groups - 1), 32));
  return l;
}

}  // namespace wire
}  // namespace qtrain
