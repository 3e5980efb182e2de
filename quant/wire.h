// The wire format of quantized payloads, version 1 (docs/quantizers.md, "Wire format"): a 32-byte
// little-endian header, the method's body, zero padding to a multiple of 8 bytes. This header holds
// what every method shares: the header and the checks decode runs on untrusted headers, and the
// helpers of several bodies. Each method's body layout is in quant/<name>_wire.h. Used by the CPU and
// CUDA paths and by tests/quant.
#pragma once

#include <cstdint>
#include <span>

#include "quant/quantizer.h"

namespace qtrain {

// Header, bytes 0..31:
//   0  u8  'Q'        1  u8  'T'        2  u8  method id     3  u8  version (1)
//   4  u32 a          8  u64 n (values) 16  u64 total bytes (header + body + padding)
//   24 u32 b          28 u32 c
// a, b, c are the method's parameters (quant/<name>_wire.h and docs/quantizers.md list them).
struct WireHeader {
  QuantMethod method = QuantMethod::fp32;
  uint8_t version = 1;
  uint32_t a = 0;
  uint64_t n = 0;
  uint64_t total = 0;
  uint32_t b = 0;
  uint32_t c = 0;
};

// The element formats of fp8 and mx as their headers store them (field a: the index of the config's
// choice name); quant/minifloat.h implements them. The other methods' parameter values are in their
// quant/<name>_wire.h.
enum class Fp8Format : uint8_t { e4m3 = 0, e5m2 = 1 };
enum class MxElement : uint8_t { fp8_e4m3 = 0, fp8_e5m2 = 1, fp6_e3m2 = 2, fp6_e2m3 = 3, fp4_e2m1 = 4 };

namespace wire {

constexpr uint8_t kVersion = 1;
constexpr size_t kHeaderBytes = 32;
constexpr size_t kAlign = 8;
// Largest span a payload may describe (row and index fields are 32-bit).
constexpr int64_t kMaxValues = 0x7fffffff;

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

// ---- helpers of several body layouts (offsets from the payload start; they also run in kernels) ----

// Element codes of `bits` (8, 6 or 4), packed block by block (each block starts on a byte; a block of
// len codes takes packed_bytes(len, bits)): 8 bits one byte each; 4 bits the block's halves side by
// side, byte j = code j | code j + ceil(len / 2) << 4; 6 bits LSB first, code 4g + k at bits 6k of the
// 24-bit little-endian group of bytes 3g .. 3g + 2. Unused bits of a block's last byte are zero
// (quant/minifloat.h's pack_block).
constexpr size_t packed_bytes(int64_t n, int bits) { return static_cast<size_t>((n * bits + 7) / 8); }

// The number of values adaptive sends and topk keeps: max(1, round(p * n)), at most n.
int64_t count_for_proportion(double proportion, int64_t n);

}  // namespace wire
}  // namespace qtrain
