// Float bit access and fp16 / bf16 conversion as inline code for both the CPU and CUDA kernels: the
// quantizers (quant/numerics.h) and the 16-bit gradient exchange (comm/) round with the same rules,
// so an fp16 value means the same bits wherever it was made.
#pragma once

#include <cstdint>
#include <cstring>

#include "framework/core/philox.h"  // QT_HD

namespace qtrain {

QT_HD uint32_t float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
#endif
}

QT_HD float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
#endif
}

// ---- fp16 / bf16, round to nearest even (branch-free so the CPU loops vectorize) ----------------
// Same results as CUDA's __float2half_rn / __float2bfloat16_rn for every finite input and for
// infinities; every NaN becomes the quiet NaN 0x7e00 (fp16) or keeps its payload with the quiet bit
// set (bf16).
QT_HD uint16_t float_to_half(float f) {
  const uint32_t x = float_bits(f);
  const uint32_t sign = x & 0x80000000u;
  const uint32_t a = x ^ sign;
  const uint32_t inf_nan = a > 0x7f800000u ? 0x7e00u : 0x7c00u;
  // Subnormal halves: adding 0.5 (2^-1) aligns the 10 result bits at the bottom of the mantissa and
  // the float adder rounds to nearest even for us.
  constexpr uint32_t kDenormMagic = ((127u - 15u) + (23u - 10u) + 1u) << 23;
  const uint32_t sub = float_bits(bits_float(a) + bits_float(kDenormMagic)) - kDenormMagic;
  // Normal halves: rebias the exponent and round to nearest even on bit 13.
  const uint32_t norm = (a + ((15u - 127u) << 23) + 0xfffu + ((a >> 13) & 1u)) >> 13;
  const uint32_t r = a >= ((127u + 16u) << 23) ? inf_nan : (a < (113u << 23) ? sub : norm);
  return static_cast<uint16_t>(r | (sign >> 16));
}

QT_HD float half_to_float(uint16_t h) {
  const uint32_t em = static_cast<uint32_t>(h & 0x7fffu) << 13;
  const uint32_t exp = em & (0x7c00u << 13);
  const uint32_t normal = em + ((127u - 15u) << 23);
  const uint32_t inf_nan = normal + ((128u - 16u) << 23);
  // Subnormal halves: scale the mantissa by 2^-24 exactly through a float subtraction.
  const uint32_t sub = float_bits(bits_float(normal + (1u << 23)) - bits_float(113u << 23));
  const uint32_t r = exp == (0x7c00u << 13) ? inf_nan : (exp == 0 ? sub : normal);
  return bits_float(r | (static_cast<uint32_t>(h & 0x8000u) << 16));
}

QT_HD uint16_t float_to_bf16(float f) {
  const uint32_t x = float_bits(f);
  const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  const uint32_t nan = (x >> 16) | 0x40u;
  return static_cast<uint16_t>((x & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

QT_HD float bf16_to_float(uint16_t b) { return bits_float(static_cast<uint32_t>(b) << 16); }

}  // namespace qtrain
