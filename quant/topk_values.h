// topk's quantized values (value_bits 2, 4 or 8; SparseLoCo's low-bit top-k): each sent value becomes
// its sign and a level on an even grid of 2^(bits-1) magnitudes from lo to hi, the smallest and the
// largest magnitude among the sent values of its range. A top-k selection leaves no small values, so
// no code is spent on zero: 2 bits are the sign and {lo, hi}. The same inline code runs in the CPU
// loops and the CUDA kernels (compiled without FMA contraction, quant/CMakeLists.txt), which is what
// makes their bytes and residuals identical. Internal to quant/.
#pragma once

#include <cmath>
#include <cstdint>

#include "quant/numerics.h"

namespace qtrain::quant_detail {

// The top level, 2^(bits - 1) - 1: 1, 7 or 127.
QT_HD uint32_t topk_top_level(int bits) { return (1u << (bits - 1)) - 1u; }

// The grid's step in f32: 0 when hi == lo, and when (hi - lo) / top is below FLT_MIN (flushed to zero,
// docs/design.md "Arithmetic"): every value of the range then decodes to lo, within top FLT_MIN.
QT_HD float topk_step(float lo, float hi, uint32_t top) { return (hi - lo) / static_cast<float>(top); }

// The level of magnitude a (lo <= a <= hi): the nearest grid point, ties to even (rintf in the default
// rounding mode, on both sides). The quotient may round past top: it is clamped first.
QT_HD uint32_t topk_level(float a, float lo, float step, uint32_t top) {
  if (!(step > 0.0f)) return 0u;
  const float x = (a - lo) / step;
  const float t = static_cast<float>(top);
  return static_cast<uint32_t>(rintf(x < t ? x : t));
}

// The magnitude of level q: lo and hi exactly at the ends (2 bits: no arithmetic at all), lo + q step
// between them, never above hi.
QT_HD float topk_magnitude(uint32_t q, float lo, float hi, float step, uint32_t top) {
  if (q == 0u) return lo;
  if (q >= top) return hi;
  const float m = lo + static_cast<float>(q) * step;
  return m < hi ? m : hi;
}

// The code of v: its sign bit (also for -0) above its level.
QT_HD uint32_t topk_code(float v, float lo, float step, uint32_t top, int bits) {
  return ((float_bits(v) >> 31) << (bits - 1)) | topk_level(bits_float(abs_bits(v)), lo, step, top);
}

// The value a code decodes to. The sign is set on the bits: a negation is an arithmetic operation on
// CUDA, which --ftz=true would let flush a subnormal lo to zero.
QT_HD float topk_decoded(uint32_t code, float lo, float hi, float step, uint32_t top, int bits) {
  const float m = topk_magnitude(code & top, lo, hi, step, top);
  return bits_float(float_bits(m) | (((code >> (bits - 1)) & 1u) << 31));
}

}  // namespace qtrain::quant_detail
