// The small floating-point element formats of the fp8, mx and nvfp4 quantizers (OCP FP8 E4M3/E5M2,
// OCP MX v1.0 FP6 E3M2/E2M3 and FP4 E2M1), as integer arithmetic on float bits that the CPU loops and
// the CUDA kernels share: the same inline code on both sides is what makes their bytes identical.
//
// A format has M mantissa bits, E exponent bits and bias B; a code is sign << (E + M) | exponent field
// << M | mantissa. Exponent field 0 holds the subnormals m * 2^(1 - B - M). There are no infinities in
// the magnitudes the encoders write: a value beyond the largest finite magnitude saturates to it (the
// MX spec's conversion rule, and OCP FP8's saturating mode), so E4M3's NaN (S.1111.111) and E5M2's
// Inf/NaN (S.11111.xx) never appear in a payload and decoders refuse them.
// Internal to quant/.
#pragma once

#include <cstdint>

#include "quant/numerics.h"

namespace qtrain::quant_detail {

// Each format: mantissa bits, exponent bits, bias, the code of the largest finite magnitude, emax (the
// exponent of that magnitude's binade: the MX spec's emax_elem) and whether exponent field all-ones
// codes are Inf/NaN (E5M2) or the single code S.1111.111 is NaN (E4M3).
struct FloatE4M3 {  // OCP FP8 E4M3: max 448 = 1.75 * 2^8, min subnormal 2^-9
  static constexpr int kMant = 3, kExp = 4, kBias = 7, kEmax = 8;
  static constexpr uint32_t kMaxCode = 0x7e;
};
struct FloatE5M2 {  // OCP FP8 E5M2: max 57344 = 1.75 * 2^15, min subnormal 2^-16
  static constexpr int kMant = 2, kExp = 5, kBias = 15, kEmax = 15;
  static constexpr uint32_t kMaxCode = 0x7b;
};
struct FloatE3M2 {  // MX FP6 E3M2: max 28 = 1.75 * 2^4, min subnormal 2^-4
  static constexpr int kMant = 2, kExp = 3, kBias = 3, kEmax = 4;
  static constexpr uint32_t kMaxCode = 0x1f;
};
struct FloatE2M3 {  // MX FP6 E2M3: max 7.5 = 1.875 * 2^2, min subnormal 2^-3
  static constexpr int kMant = 3, kExp = 2, kBias = 1, kEmax = 2;
  static constexpr uint32_t kMaxCode = 0x1f;
};
struct FloatE2M1 {  // MX FP4 E2M1: {0, 0.5, 1, 1.5, 2, 3, 4, 6}
  static constexpr int kMant = 1, kExp = 2, kBias = 1, kEmax = 2;
  static constexpr uint32_t kMaxCode = 0x7;
};

template <class F>
constexpr int code_bits() {
  return 1 + F::kExp + F::kMant;
}
template <class F>
constexpr uint32_t sign_bit() {
  return 1u << (F::kExp + F::kMant);
}

// Whether a magnitude code (sign removed) is one the encoders never write: E4M3's NaN, E5M2's Inf and
// NaNs. FP6 and FP4 have no such codes.
template <class F>
QT_HD bool invalid_magnitude(uint32_t mag) {
  return mag > F::kMaxCode && (F::kExp == 4 || F::kExp == 5);
}

// The magnitude code of a = bits_float(abs_bits), a finite float >= 0, rounded to the format and
// saturated to its largest finite magnitude. `r` is the rounding: nearest-even when Stochastic is
// false (r unused), else a uniform 32-bit word, and the code rounds up with probability equal to the
// discarded fraction of a's significand (exactly when that fraction has at most 31 bits, which holds
// for every a at or above the format's subnormal spacing times 2^-7; below that the fraction is cut
// to its top 31 bits, a bias under 2^-31 of a subnormal step).
//
// Normal results: a's bits shifted right by 23 - M with the chosen rounding, then rebiased (a carry
// out of the mantissa moves to the next binade, past the largest one to the saturation). Subnormal
// results (a below 2^(1 - B)): a's significand shifted by the distance to the subnormal spacing
// 2^(1 - B - M); rounding up from the largest subnormal gives the smallest normal code, 1 << M.
template <class F, bool Stochastic>
QT_HD uint32_t minifloat_magnitude(uint32_t abs_bits, uint32_t r) {
  constexpr int kM = F::kMant;
  constexpr uint32_t kMinNormalBiased = static_cast<uint32_t>(128 - F::kBias);  // fp32 field of 2^(1 - B)
  const uint32_t field = abs_bits >> 23;
  const bool sub = field < kMinNormalBiased;
  const uint32_t sig = (abs_bits & 0x7fffffu) | (field != 0 ? 0x800000u : 0u);
  const uint32_t eff = field != 0 ? field : 1u;
  // Shift of the subnormal path: a = sig * 2^(eff - 150), spacing 2^(1 - B - M); at least 24 - M here.
  const uint32_t sub_shift = static_cast<uint32_t>(151 - kM - F::kBias) - eff;
  uint32_t x = sub ? sig : abs_bits;
  uint32_t s = sub ? sub_shift : static_cast<uint32_t>(23 - kM);
  const uint32_t offset = sub ? 0u : static_cast<uint32_t>(127 - F::kBias) << kM;
  uint32_t add;
  if constexpr (Stochastic) {
    // Shifts beyond 31 keep the fraction's top 31 bits (a shift of 32 or more leaves 0).
    const uint32_t extra = s > 31u ? s - 31u : 0u;
    x = extra > 31u ? 0u : x >> extra;
    s = s > 31u ? 31u : s;
    add = r & ((1u << s) - 1u);
  } else {
    (void)r;
    // x < 2^24 on the subnormal path, so any shift of 25 or more rounds to 0, as 31 does.
    s = s > 31u ? 31u : s;
    add = ((1u << (s - 1u)) - 1u) + ((x >> s) & 1u);
  }
  const uint32_t code = ((x + add) >> s) - offset;
  return code > F::kMaxCode ? F::kMaxCode : code;
}

// The value of a magnitude code, exactly (every value of these formats is a float).
template <class F>
QT_HD float minifloat_abs_value(uint32_t mag) {
  constexpr int kM = F::kMant;
  const uint32_t e = mag >> kM;
  const uint32_t m = mag & ((1u << kM) - 1u);
  // Subnormal: m * 2^(1 - B - M), a power of two times a small integer (exact).
  const float sub =
      static_cast<float>(static_cast<int32_t>(m)) * bits_float(static_cast<uint32_t>(127 + 1 - F::kBias - kM) << 23);
  const float normal = bits_float(((e + static_cast<uint32_t>(127 - F::kBias)) << 23) | (m << (23 - kM)));
  return e == 0 ? sub : normal;
}

// The signed value of a full code.
template <class F>
QT_HD float minifloat_value(uint32_t code) {
  const float mag = minifloat_abs_value<F>(code & (sign_bit<F>() - 1u));
  return code & sign_bit<F>() ? -mag : mag;
}

// The code of v under the reciprocal scale inv (a = |v| * inv, then minifloat_magnitude), with v's sign.
template <class F, bool Stochastic>
QT_HD uint32_t minifloat_code(float v, float inv, uint32_t r) {
  const uint32_t mag = minifloat_magnitude<F, Stochastic>(float_bits(fabsf(v) * inv), r);
  return mag | ((float_bits(v) >> 31) << (F::kExp + F::kMant));
}

// 2^k as a float for k in [-127, 127] (2^-127 is the subnormal 0x00400000): E8M0's values.
QT_HD float pow2_float(int32_t k) {
  return k >= -126 ? bits_float(static_cast<uint32_t>(k + 127) << 23) : bits_float(0x00400000u);
}

// ---- packing of one block's codes (quant/wire.h) ---------------------------------------------------
// A block of len codes takes wire::packed_bytes(len, Bits) bytes. 8 bits: one byte each. 4 bits: the
// block's two halves side by side, byte j = code j | code j + h << 4 with h = ceil(len / 2) (so that
// both directions are contiguous loads and stores, which vectorize; the high nibble of the last byte
// of an odd len is zero). 6 bits: LSB first, code 4g + k at bits 6k of the 24-bit little-endian group
// of bytes 3g .. 3g + 2 (a last partial group takes ceil(6r / 8) bytes).

// codes: `Block` entries, zero past len; writes packed_bytes(len, Bits) bytes.
template <int Bits, int64_t Block>
QT_HD void pack_block(const uint8_t* __restrict codes, int64_t len, uint8_t* __restrict out) {
  len = len < Block ? len : Block;  // states the bound for the compiler (callers pass at most Block)
  if constexpr (Bits == 8) {
    for (int64_t t = 0; t < len; ++t) out[t] = codes[t];
  } else if constexpr (Bits == 4) {
    const int64_t h = (len + 1) / 2;
    for (int64_t j = 0; j < h; ++j) out[j] = static_cast<uint8_t>(codes[j] | (codes[j + h] << 4));
  } else {
    const int64_t groups = len / 4;
    for (int64_t g = 0; g < groups; ++g) {
      const uint32_t w = uint32_t{codes[4 * g]} | (uint32_t{codes[4 * g + 1]} << 6) |
                         (uint32_t{codes[4 * g + 2]} << 12) | (uint32_t{codes[4 * g + 3]} << 18);
      out[3 * g] = static_cast<uint8_t>(w);
      out[3 * g + 1] = static_cast<uint8_t>(w >> 8);
      out[3 * g + 2] = static_cast<uint8_t>(w >> 16);
    }
    const int64_t rest = len - 4 * groups;
    if (rest > 0) {
      uint32_t w = 0;
      for (int64_t k = 0; k < rest; ++k) w |= uint32_t{codes[4 * groups + k]} << (6 * k);
      for (int64_t j = 0; j < (6 * rest + 7) / 8; ++j) out[3 * groups + j] = static_cast<uint8_t>(w >> (8 * j));
    }
  }
}

// The inverse of pack_block: codes[0..len) (codes has `Block` entries).
template <int Bits, int64_t Block>
QT_HD void unpack_block(const uint8_t* __restrict in, int64_t len, uint8_t* __restrict codes) {
  len = len < Block ? len : Block;  // states the bound for the compiler (callers pass at most Block)
  if constexpr (Bits == 8) {
    for (int64_t t = 0; t < len; ++t) codes[t] = in[t];
  } else if constexpr (Bits == 4) {
    const int64_t h = (len + 1) / 2;
    for (int64_t j = 0; j < h; ++j) {
      codes[j] = static_cast<uint8_t>(in[j] & 0xfu);
      codes[j + h] = static_cast<uint8_t>(in[j] >> 4);
    }
  } else {
    const int64_t groups = len / 4;
    for (int64_t g = 0; g < groups; ++g) {
      const uint32_t w = uint32_t{in[3 * g]} | (uint32_t{in[3 * g + 1]} << 8) | (uint32_t{in[3 * g + 2]} << 16);
      for (int k = 0; k < 4; ++k) codes[4 * g + k] = static_cast<uint8_t>((w >> (6 * k)) & 0x3fu);
    }
    const int64_t rest = len - 4 * groups;
    if (rest > 0) {
      uint32_t w = 0;
      for (int64_t j = 0; j < (6 * rest + 7) / 8; ++j) w |= uint32_t{in[3 * groups + j]} << (8 * j);
      for (int64_t k = 0; k < rest; ++k) codes[4 * groups + k] = static_cast<uint8_t>((w >> (6 * k)) & 0x3fu);
    }
  }
}

// The code of value t of a block of len values packed by pack_block (block points at its first byte).
template <int Bits>
QT_HD uint32_t packed_code_at(const uint8_t* block, int64_t len, int64_t t) {
  if constexpr (Bits == 8) {
    (void)len;
    return block[t];
  } else if constexpr (Bits == 4) {
    const int64_t h = (len + 1) / 2;
    return t < h ? block[t] & 0xfu : block[t - h] >> 4;
  } else {
    (void)len;
    const int64_t bit = 6 * t;
    const uint32_t two = uint32_t{block[bit / 8]} | (bit % 8 > 2 ? uint32_t{block[bit / 8 + 1]} << 8 : 0u);
    return (two >> (bit % 8)) & 0x3fu;
  }
}

// MX (OCP MX v1.0, 6.3): the E8M0 code 127 + X of a block whose max|v| has float bits max_bits
// (finite), X = floor(log2(max|v|)) - emax_elem clamped below at -127. floor(log2) is the float's
// unbiased exponent (a subnormal or zero max gives X below -127: clamped).
template <class F>
QT_HD uint32_t mx_scale_code(uint32_t max_bits) {
  const int32_t x = static_cast<int32_t>(max_bits >> 23) - 127 - F::kEmax;
  return static_cast<uint32_t>((x < -127 ? -127 : x) + 127);
}

// x (finite, >= 0) rounded to f32 by rounding to odd: toward zero, then the last bit set when that
// was inexact. A nearest-even rounding of the result to at most 22 significant bits (E4M3 keeps 4)
// then equals that of x itself: the set bit stands for what was cut, so no false tie appears.
QT_HD uint32_t round_to_odd_bits(double x) {
  const float f = static_cast<float>(x);
  const double back = f;
  const uint32_t toward_zero = float_bits(f) - (back > x ? 1u : 0u);
  return toward_zero | (back != x ? 1u : 0u);
}

// NVFP4's two-level scale: tensor scale t = M / (6 * 448), M = max|v| of the tensor (tensor_max_bits);
// block b's E4M3 scale code is (max|v of b| / 6) / (M / (6 * 448)) = 448 max_b / M rounded to nearest
// even, exactly, and saturated at 448 (0 when t is below FLT_MIN: such a tensor encodes as zeros); its
// decode scale is the code's value * t. Exactly: the f32 divisions this replaced rounded ratios just
// above a midpoint onto it, and the tie went to the even code (issue 41: a block became zeros). Here
// 448 max_b is exact in double (27 significant bits) and the quotient is rounded once; a ratio that
// is not a midpoint (5 significant bits) differs from every one by more than 2^-31 of itself, far more
// than that rounding, and one that is a midpoint is exact. round_to_odd_bits carries it to f32.
constexpr float kNvfp4TensorDivisor = 6.0f * 448.0f;
QT_HD uint32_t nvfp4_block_scale_code(uint32_t block_max_bits, uint32_t tensor_max_bits) {
  const float t = bits_float(tensor_max_bits) / kNvfp4TensorDivisor;
  if (float_bits(t) < 0x00800000u) return 0u;
  const double ratio = 448.0 * static_cast<double>(bits_float(block_max_bits)) / bits_float(tensor_max_bits);
  return minifloat_magnitude<FloatE4M3, false>(round_to_odd_bits(ratio), 0u);
}
QT_HD float nvfp4_decode_scale(uint32_t scale_code, float t) { return minifloat_abs_value<FloatE4M3>(scale_code) * t; }

// Stochastic rounding of the float formats: element i draws word i % 4 of the Philox block at counter
// (i / 4 as 64 bits, 0, kTagFloat) under the encode's key.
constexpr uint32_t kTagFloat = 0x464c5054u;  // "FLPT"
constexpr int kWordsPerBlock = 4;

QT_HD uint32_t float_round_word(PhiloxKey key, uint64_t i) {
  const uint64_t block = i / kWordsPerBlock;
  return philox4x32_10(static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), 0u, kTagFloat, key)
      .v[i % kWordsPerBlock];
}

// Calls f(F{}) with the element format type of an MX element choice (quant/wire.h's MxElement order);
// fp8 formats by Fp8Format.
template <typename Fn>
void with_mx_element(uint32_t element, Fn&& f) {
  switch (element) {
    case 0: f(FloatE4M3{}); break;
    case 1: f(FloatE5M2{}); break;
    case 2: f(FloatE3M2{}); break;
    case 3: f(FloatE2M3{}); break;
    default: f(FloatE2M1{}); break;
  }
}

}  // namespace qtrain::quant_detail
