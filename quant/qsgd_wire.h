// The qsgd payload's body (quant/wire.h has the header every method shares; docs/quantizers.md,
// "Wire format"). Offsets are from the payload's start; the accessors also run in kernels.
#pragma once

#include <cstddef>
#include <cstdint>

#include "quant/wire.h"

namespace qtrain {

// The norm as the header stores it (field c).
enum class QsgdNorm : uint8_t { max = 0, l2 = 1 };

namespace wire {

// qsgd: a = bits (2, 4, 8, 16), b = bucket d, c = norm (0 max, 1 l2). Body: nb = ceil(n/d) f32
// scales, then per bucket ceil(len * bits / 32) u32 words of codes, `bits` wide, LSB first; each
// bucket starts on a word. Code = sign << (bits-1) | level.
struct QsgdLayout {
  int64_t n = 0, bucket = 1, buckets = 0;
  int bits = 4;
  int64_t words_full = 0;
  size_t codes_offset = 0;
  size_t body_end = 0;
  QT_HD int64_t len(int64_t b) const { return b + 1 < buckets ? bucket : n - b * bucket; }
  QT_HD size_t words_offset(int64_t b) const { return codes_offset + 4 * static_cast<size_t>(b * words_full); }
};
inline QsgdLayout qsgd_layout(int64_t n, int64_t bucket, int bits) {
  QsgdLayout l;
  l.n = n;
  l.bucket = bucket;
  l.bits = bits;
  l.buckets = ceil_div(n, bucket);
  l.words_full = ceil_div(bucket * bits, 32);
  l.codes_offset = kHeaderBytes + 4 * static_cast<size_t>(l.buckets);
  l.body_end = l.codes_offset;
  if (l.buckets > 0)
    l.body_end = l.words_offset(l.buckets - 1) + 4 * static_cast<size_t>(ceil_div(l.len(l.buckets - 1) * bits, 32));
  return l;
}

}  // namespace wire
}  // namespace qtrain
