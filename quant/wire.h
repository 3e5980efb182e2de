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
enum class Fp8Format : uint8_t { e4m3 = 0, e5m2 = 1 };
enum class MxElement : uint8_t { fp8_e4m3 = 0, fp8_e5m2 = 1, fp6_e3m2 = 2, fp6_e2m3 = 3, fp4_e2m1 = 4 };

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
  int64_t words_full = 0;  // words of a full group
  size_t group_bytes = 0;  // bytes of a full group (header + words)
  size_t body_end = 0;     // unpadded payload size
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
  size_t count_offset = 0;  // the u32 E
  size_t entries_offset = 0;
  size_t body_end = 0;
};
AdaptiveLayout adaptive_layout(int64_t n, int64_t column, int64_t entries);
inline int adaptive_entry_bytes(int64_t column) { return column <= kMaxRows16 ? 2 : 4; }

// topk: a = 0, b = k, c = 0. Body: k u32 indices (strictly increasing), then k f32 values.
inline size_t topk_body_end(int64_t k) { return kHeaderBytes + 8 * static_cast<size_t>(k); }

// fp8: a = format (0 e4m3, 1 e5m2), b = scale s as f32 bits (max|v| / the format's largest finite
// magnitude, 448 or 57344), c = 0. Body: n code bytes (sign << 7 | magnitude); value = code's value * s.
inline size_t fp8_body_end(int64_t n) { return kHeaderBytes + static_cast<size_t>(n); }

// Element codes of `bits` (8, 6 or 4), packed block by block (each block starts on a byte; a block of
// len codes takes packed_bytes(len, bits)): 8 bits one byte each; 4 bits the block's halves side by
// side, byte j = code j | code j + ceil(len / 2) << 4; 6 bits LSB first, code 4g + k at bits 6k of the
// 24-bit little-endian group of bytes 3g .. 3g + 2. Unused bits of a block's last byte are zero
// (quant/minifloat.h's pack_block).
constexpr size_t packed_bytes(int64_t n, int bits) { return static_cast<size_t>((n * bits + 7) / 8); }

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
  const PhiloxBlock b =
      philox4x32_10(static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), 0u, kTagRandomk, key);
  const uint64_t r = b.v[j % 4];
  return lo + static_cast<int64_t>((r * static_cast<uint64_t>(hi - lo)) >> 32);
}

// The number of values adaptive sends and topk keeps: max(1, round(p * n)), at most n.
int64_t count_for_proportion(double proportion, int64_t n);

}  // namespace wire
}  // namespace qtrain
