// Crafted data for the communicator tests (nccl-tests style): every expected result is exact for any
// number of ranks and any reduction order, so the checks compare bits, not tolerances. Shared by the
// MPI tests on the CPU and the CUDA tests.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace qtrain::comm_test {

// fp32 element i of rank r: sign * k * 2^e * (r + 1) with k <= 13 and e in -2..2. Any partial sum is
// an integer multiple of 2^e far below 2^24 units, hence exact whatever the order.
inline float f32_value(int rank, size_t i) {
  const float k = static_cast<float>(i % 13 + 1);
  const float sign = i % 3 == 0 ? -1.0f : 1.0f;
  return sign * k * std::ldexp(1.0f, static_cast<int>(i % 5) - 2) * static_cast<float>(rank + 1);
}
inline float f32_sum(int world, size_t i) { return f32_value(0, i) * static_cast<float>(world * (world + 1) / 2); }

// fp64: a large power of two plus a tiny one per rank: every partial sum spans under 46 bits, exact
// in double (53) for any order and up to 64 ranks.
inline double f64_value(int rank, size_t i) {
  return std::ldexp(1.0, 30) * static_cast<double>(i % 7) + std::ldexp(1.0, -10) * static_cast<double>(rank + 1);
}
inline double f64_sum(int world, size_t i) {
  return std::ldexp(1.0, 30) * static_cast<double>(i % 7) * world +
         std::ldexp(1.0, -10) * static_cast<double>(world * (world + 1) / 2);
}

// 16-bit sums of quarters: (i % 9 - 4 + r) / 4. Every partial sum is a multiple of 1/4 below 64 in
// magnitude: at most 8 significant bits, exact in fp16 (11) and bf16 (8).
inline float small_value(int rank, size_t i) { return static_cast<float>(static_cast<int>(i % 9) - 4 + rank) * 0.25f; }
inline float small_sum(int world, size_t i) {
  return (static_cast<float>((static_cast<int>(i % 9) - 4) * world) + static_cast<float>(world * (world - 1) / 2)) *
         0.25f;
}

// Rounding cases: rank 0 contributes a, rank 1 contributes b, every other rank +0, so the result is
// round_to_nearest_even(a + b) in any order (a + 0 and 0 + 0 are exact).
struct RoundingCase {
  uint16_t a, b, sum;
};
// fp16: ties go to the even mantissa; 65504 + 16 = 65520 is the tie that overflows to Inf.
inline const std::vector<RoundingCase>& f16_rounding_cases() {
  static const std::vector<RoundingCase> cases = {
      {0x6800, 0x3c00, 0x6800},  // 2048 + 1 = 2049 -> 2048 (tie, even)
      {0x6800, 0x4200, 0x6802},  // 2048 + 3 = 2051 -> 2052 (tie, even)
      {0x3c00, 0x1000, 0x3c00},  // 1 + 2^-11 -> 1 (tie, even)
      {0x3c01, 0x1000, 0x3c02},  // (1 + 2^-10) + 2^-11 -> 1 + 2^-9 (tie, even)
      {0x7bff, 0x4800, 0x7bff},  // 65504 + 8 = 65512 -> 65504
      {0x7bff, 0x4c00, 0x7c00},  // 65504 + 16 = 65520 -> Inf
      {0xe800, 0xbc00, 0xe800},  // -2048 - 1 -> -2048
      {0x0001, 0x0001, 0x0002},  // subnormals: 2^-24 + 2^-24 = 2^-23, exact
      {0x6800, 0x3d00, 0x6801},  // 2048 + 1.25 -> 2050 (nearest, up)
      {0x6800, 0x3a00, 0x6800},  // 2048 + 0.75 -> 2048 (nearest, down)
  };
  return cases;
}
// bf16: 8 significant bits.
inline const std::vector<RoundingCase>& bf16_rounding_cases() {
  static const std::vector<RoundingCase> cases = {
      {0x4380, 0x3f80, 0x4380},  // 256 + 1 = 257 -> 256 (tie, even)
      {0x4380, 0x4040, 0x4382},  // 256 + 3 = 259 -> 260 (tie, even)
      {0x3f80, 0x3b80, 0x3f80},  // 1 + 2^-8 -> 1 (tie, even)
      {0x3f81, 0x3b80, 0x3f82},  // (1 + 2^-7) + 2^-8 -> 1 + 2^-6 (tie, even)
      {0x7f7f, 0x7f7f, 0x7f80},  // max + max -> Inf
      {0xc380, 0xbf80, 0xc380},  // -256 - 1 -> -256
  };
  return cases;
}

// all_gather_bytes: rank r sends gather_size(r) bytes (rank 1 sends none) of gather_byte(r, i).
inline size_t gather_size(int rank) { return rank == 1 ? 0 : 40 + 29 * static_cast<size_t>(rank); }
inline uint8_t gather_byte(int rank, size_t i) { return static_cast<uint8_t>(rank * 31 + i * 7 + 1); }

// all_to_all_bytes: rank s sends pair_size(s, d) bytes (0 to 18, some zero, the self block too) of
// pair_byte(s, d, i) to rank d.
inline size_t pair_size(int source, int dest) { return static_cast<size_t>(3 * source + 5 * dest + 2) % 7 * 3; }
inline uint8_t pair_byte(int source, int dest, size_t i) {
  return static_cast<uint8_t>(source * 17 + dest * 5 + i * 3 + 11);
}
// The send layout of rank `source`: blocks in reverse rank order with 3-byte gaps, so offsets are
// neither sorted nor contiguous. Returns the buffer size.
inline size_t pair_layout(int source, int world, std::vector<size_t>& sizes, std::vector<size_t>& offsets) {
  sizes.assign(static_cast<size_t>(world), 0);
  offsets.assign(static_cast<size_t>(world), 0);
  size_t at = 3;
  for (int d = world - 1; d >= 0; --d) {
    sizes[static_cast<size_t>(d)] = pair_size(source, d);
    offsets[static_cast<size_t>(d)] = at;
    at += sizes[static_cast<size_t>(d)] + 3;
  }
  return at;
}

inline uint8_t broadcast_byte(int root, size_t i) { return static_cast<uint8_t>(root * 13 + i * 11 + 5); }

}  // namespace qtrain::comm_test
