// The wire format of quantized payloads, version 1 (docs/quantizers.md, "Wire format"): a 32-byte
// little-endian header, the method's body, zero padding to a multiple of 8 bytes. This header holds
// the byte layout of every method in one place, and the checks decode runs on untrusted headers.
// Used by the CPU and CUDA paths and by tests/quant.
#pragma once

#include <cstdint>
#include <span>

#include "quant/quantizer.h"

namespace qtrain {

// Header, bytes 0..31:
//   0  u8  'Q'        1  u8  'T'        2  u8  method id     3  u8  version (1)
//   4  u32 a          8  u64 n (values) 16  u64 total bytes (header + body + padding)
//   24 u32 b          28 u32 c
// a, b, c are the method's parameters (quant/wire.h layouts and docs/quantizers.md list them).
struct WireHeader {
  QuantMethod method = QuantMethod::fp32;
  uint8_t version = 1;
  uint32_t a = 0;
  uint64_t n = 0;
  uint64_t total = 0;
  uint32_t b = 0;
  uint32_t c = 0;
};

// Parameter values as headers store them (field a or c): the index of the config's choice name.
enum class Dettmers8Variant : uint8_t { dynamic_tree = 0, linear = 1 };
enum class OnebitMode : uint8_t { column = 0, bucket = 1 };
enum class QsgdNorm : uint8_t { max = 0, l2 = 1 };

namespace wire {

constexpr uint8_t kVersion = 1;
constexpr size_t kHeaderBytes = 32;
constexpr size_t kAlign = 8;
// Largest span a payload may describe (row and index fields are 32-bit).
constexpr int64_t kMaxValues = 0x7fffffff;
// adaptive: column lengths up to this use 16-bit entries (15-bit row + sign), longer ones 32-bit.
constexpr int64_t kMaxRows16 = 32767;

constexpr size_t pad8(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }
constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

void write_header(uint8_t* out, const WireHeader& h);
// Reads the 32 bytes at p without checks.
WireHeader read_header(const uint8_t* p);

// Validates the parts every method shares: size >= 32, magic, method == expected, version, n ==
// expected_n, total a multiple of 8 and within the buffer. `head` is a host copy of the buffer's
// first min(32, in_size) bytes. Throws InputError naming the problem.
WireHeader check_header(std::span<const uint8_t> head, size_t in_size, QuantMethod expected, int64_t expected_n);

// Throws InputError "<method> payload: <what>".
[[noreturn]] void bad_payload(QuantMethod method, const std::string& what);

// ---- body layouts (offsets from the payload start; the accessors also run in kernels) ----

// fp32 / fp16 / bf16: a = b = c = 0; n values of 4 / 2 / 2 bytes.
size_t cast_value_bytes(QuantMethod method);

// dettmers8: a = variant (0 dynamic_tree, 1 linear), b = scale M as f32 bits, c = 0; n code bytes.

// onebit: a = mode (0 column, 1 bucket), b = group length L (the column length or the bucket size),
// c = 0. Groups of L consecutive values (column mode: L divides n; bucket mode: the last group may be
// shorter), each [m0 f32][m1 f32][ceil(len/32) u32 words], bit j of word w = value 32w + j >= 0.
struct OnebitLayout {
  int64_t n = 0, group = 1, groups = 0;
  int64_t words_full = 0;     // words of a full group
  size_t group_bytes = 0;     // bytes of a full group (header + words)
  size_t body_end = 0;        // unpadded payload size
  QT_HD int64_t len(int64_t g) const { return g + 1 < groups ? group : n - g * group; }
  QT_HD size_t offset(int64_t g) const { return kHeaderBytes + static_cast<size_t>(g) * group_bytes; }
};
OnebitLayout onebit_layout(int64_t n, int64_t group);

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
QsgdLayout qsgd_layout(int64_t n, int64_t bucket, int bits);

// adaptive: a = entry bytes (2 when L <= 32767, else 4), b = column length L, c = entry count E.
// Body: n/L column headers [first entry u32][mu+ f32][mu- f32], then u32 E, then E entries
// (row << 1 | positive), grouped by column in increasing row order.
struct AdaptiveLayout {
  int64_t n = 0, column = 1, columns = 0, entries = 0;
  int entry_bytes = 2;
  size_t count_offset = 0;    // the u32 E
  size_t entries_offset = 0;
  size_t body_end = 0;
};
AdaptiveLayout adaptive_layout(int64_t n, int64_t column, int64_t entries);
inline int adaptive_entry_bytes(int64_t column) { return column <= kMaxRows16 ? 2 : 4; }

// topk: a = 0, b = k, c = 0. Body: k u32 indices (strictly increasing), then k f32 values.
inline size_t topk_body_end(int64_t k) { return kHeaderBytes + 8 * static_cast<size_t>(k); }

// terngrad: a = 0, b = bucket d (the span's length when it is one bucket), c = 0. The layout of qsgd
// with 2 bits: ceil(n/d) f32 scales s, then per bucket ceil(len/16) u32 words of 2-bit codes, LSB
// first, each bucket starting on a word. Code 0 = 0, 1 = +s, 3 = -s; 2 is never written (malformed).
inline QsgdLayout terngrad_layout(int64_t n, int64_t bucket) { return qsgd_layout(n, bucket, 2); }

// efsign: a = 0, b = the scale (||v||_1 / n) as f32 bits, c = 0. Body: ceil(n/32) u32 words, bit j of
// word w = value 32w + j >= 0 (LSB first); unused bits of the last word are zero.
// signsgd: a = b = c = 0, the same words.
inline size_t sign_body_end(int64_t n) { return kHeaderBytes + 4 * static_cast<size_t>(ceil_div(n, 32)); }

// randomk: a = k, b and c = the low and high words of the Philox key the indices come from (the
// stream every rank shares). Body: k f32 values, those of indices randomk_index(key, j, n, k).
inline size_t randomk_body_end(int64_t k) { return kHeaderBytes + 4 * static_cast<size_t>(k); }
// Index j of k (0 <= j < k <= n): uniform in stratum j = [floor(j n / k), floor((j + 1) n / k)),
// from Philox word j % 4 of block j / 4 at counter (j / 4, 0, tag "RNDK"). Exact integer arithmetic,
// the same on the CPU and in kernels; the indices are distinct and increasing.
constexpr uint32_t kTagRandomk = 0x524e444bu;  // "RNDK"
QT_HD int64_t randomk_index(PhiloxKey key, int64_t j, int64_t n, int64_t k) {
  const int64_t lo = j * n / k, hi = (j + 1) * n / k;
  const auto block = static_cast<uint64_t>(j / 4);
  const PhiloxBlock b = philox4x32_10(static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), 0u,
                                      kTagRandomk, key);
  const uint64_t r = b.v[j % 4];
  return lo + static_cast<int64_t>((r * static_cast<uint64_t>(hi - lo)) >> 32);
}

// The number of values adaptive sends and topk keeps: max(1, round(p * n)), at most n.
int64_t count_for_proportion(double proportion, int64_t n);

}  // namespace wire
}  // namespace qtrain
