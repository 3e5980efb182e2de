// The topk payload's body (quant/wire.h has the header every method shares; docs/quantizers.md,
// "Wire format"). Offsets are from the payload's start. Field a's low byte is the body's value format,
// so that a payload written before value_bits existed (a = 0, exact f32 values) still decodes, and
// value_bits: 32 still writes exactly that layout; its upper bytes describe the chunks of a chunk-local
// selection (parameter chunk), 0 for the global one, so every payload before chunk existed decodes too.
#pragma once

#include <cstddef>
#include <cstdint>

#include "framework/core/philox.h"  // QT_HD
#include "quant/wire.h"

namespace qtrain {

namespace wire {

// Field a: bits 0..7 the value format, bits 8..15 log2(C) (0: global selection), bits 16..31 K - 1
// (chunked only, else 0).
constexpr uint32_t kTopkExactValues = 0;  // k f32 values
inline bool topk_known_value_bits(uint32_t format) { return format == 2 || format == 4 || format == 8; }
constexpr int kTopkMaxChunkShift = 16;  // chunks of at most 65536 values: local indices of at most 16 bits

// a = 0 (exact values), b = k, c = 0. Body: the k indices, then k f32 values.
// a = 2, 4 or 8 (value_bits), b = k, c = entries per range (>= 1). Body: the k indices; then per range
// of c consecutive entries (the last one may be shorter) its lo and hi as f32 (finite, 0 <= lo <= hi:
// the smallest and largest magnitude of the range's values); then the k codes of `a` bits packed LSB
// first, code j at bit a*j of the code bytes (bits after the last code are zero). A code is
// sign << (a - 1) | level (quant/topk_values.h).
// The indices: global selection, k u32 words (strictly increasing, below n). Chunked (log2(C) = s in
// 1..16, C = 2^s): the span is ceil(n / C) chunks of C values (the last one n - (chunks - 1) C, maybe
// shorter); a chunk of C values keeps K entries, the last one k - (chunks - 1) K (1 .. its length; K
// when it is whole); entries go chunk by chunk, each chunk's local indices (i - chunk start) strictly
// increasing and below its length, packed in s bits LSB first: entry j at bit s*j of
// ceil(k s / 32) u32 words, the bits after the last index zero.
struct TopkChunks {
  int shift = 0;          // s = log2(C); 0: global selection, u32 indices
  int64_t size = 0;       // C
  int64_t keep = 0;       // K: the entries of a chunk of C values
  int64_t count = 0;      // chunks
  int64_t last_size = 0;  // the last chunk's values
  int64_t last_keep = 0;  // and entries

  QT_HD int64_t size_of(int64_t c) const { return c + 1 < count ? size : last_size; }
  QT_HD int64_t keep_of(int64_t c) const { return c + 1 < count ? keep : last_keep; }
  // The chunk of entry j (0 <= j < k).
  QT_HD int64_t chunk_of_entry(int64_t j) const {
    const int64_t full = (count - 1) * keep;
    return j < full ? j / keep : count - 1;
  }
};

// The chunks of n values in chunks of 2^shift, K and the last chunk's entries given.
inline TopkChunks topk_chunks(int64_t n, int shift, int64_t keep, int64_t last_keep) {
  TopkChunks ch;
  ch.shift = shift;
  ch.size = int64_t{1} << shift;
  ch.keep = keep;
  ch.count = ceil_div(n, ch.size);
  ch.last_size = n - (ch.count - 1) * ch.size;
  ch.last_keep = last_keep;
  return ch;
}

struct TopkLayout {
  int64_t k = 0;
  int bits = 32;        // 32: f32 values; 2, 4, 8: codes
  int index_bits = 32;  // 32: u32 indices (global selection); else log2(C)
  TopkChunks chunks;    // chunked selection (index_bits < 32)
  int64_t group = 0;    // entries per range (codes only)
  int64_t groups = 0;   // ranges (codes only)
  size_t values = 0;    // offset of the f32 values (bits 32)
  size_t ranges = 0;    // offset of the (lo, hi) pairs (codes)
  size_t codes = 0;     // offset of the packed codes
  size_t end = 0;       // end of the body, before the padding
};

// The bytes of k indices of index_bits each, in u32 words.
constexpr size_t topk_index_bytes(int64_t k, int index_bits) {
  return 4 * static_cast<size_t>(ceil_div(k * index_bits, 32));
}

// `group` is the entries per range (>= 1; ignored for bits 32); `chunks.shift` 0 is the global selection.
inline TopkLayout topk_layout(int64_t k, int bits, int64_t group, const TopkChunks& chunks = {}) {
  TopkLayout l;
  l.k = k;
  l.bits = bits;
  l.chunks = chunks;
  l.index_bits = chunks.shift == 0 ? 32 : chunks.shift;
  const size_t after_indices = kHeaderBytes + topk_index_bytes(k, l.index_bits);
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

// Entry j's index field (global: the index; chunked: the local index) from the index words.
QT_HD uint32_t topk_index_field(const uint32_t* words, int64_t j, int index_bits) {
  const uint64_t bit = static_cast<uint64_t>(j) * static_cast<uint64_t>(index_bits);
  const uint64_t word = bit / 32;
  const auto off = static_cast<uint32_t>(bit % 32);
  uint64_t x = words[word];
  if (off + static_cast<uint32_t>(index_bits) > 32) x |= static_cast<uint64_t>(words[word + 1]) << 32;
  return static_cast<uint32_t>((x >> off) & ((uint64_t{1} << index_bits) - 1));
}

// Entry j's index in the span.
QT_HD uint32_t topk_index(const uint32_t* words, const TopkLayout& l, int64_t j) {
  const uint32_t field = topk_index_field(words, j, l.index_bits);
  if (l.index_bits == 32) return field;
  return static_cast<uint32_t>(l.chunks.chunk_of_entry(j) << l.chunks.shift) | field;
}

}  // namespace wire
}  // namespace qtrain
