// The per-element arithmetic every quantizer shares between its CPU loops and its CUDA kernels:
// float bit access and fp16/bf16 rounding (framework/core/float16.h, shared with comm/), the
// deterministic summation order, and the stochastic rounding decision. Being the same inline code on
// both sides (and compiled without FMA contraction, see quant/CMakeLists.txt) is what makes the CPU
// and CUDA encoders produce identical bytes.
// Internal to quant/.
#pragma once

#include <cstdint>
#include <cmath>
#include <cstring>

#include "framework/core/float16.h"
#include "framework/core/philox.h"  // QT_HD

namespace qtrain::quant_detail {

using qtrain::bf16_to_float;
using qtrain::bits_float;
using qtrain::float_bits;
using qtrain::float_to_bf16;
using qtrain::float_to_half;
using qtrain::half_to_float;

// |x| as bits: for non-negative floats the integer order is the float order, so max|v| is an integer
// max (order-independent, vectorizes on the CPU, atomicMax on the GPU) and any value >= kNonFinite
// is an Inf or NaN.
constexpr uint32_t kAbsMask = 0x7fffffffu;
constexpr uint32_t kNonFinite = 0x7f800000u;
QT_HD uint32_t abs_bits(float x) { return float_bits(x) & kAbsMask; }

// The largest abs_bits of in[i] (+ residual[i] with Ef) over n values (Len > 0: Len, known at
// compile time, for full blocks). An integer max: the same for any order of the values, and NaN and
// Inf lie above every finite value. The CPU encoders' scale search (dettmers8, fp8, mx, nvfp4).
template <bool Ef, int64_t Len = 0>
inline uint32_t max_abs_bits(const float* __restrict in, const float* __restrict residual, int64_t n) {
  const int64_t count = Len ? Len : n;
  uint32_t m = 0;
  for (int64_t i = 0; i < count; ++i) {
    const uint32_t b = abs_bits(Ef ? in[i] + residual[i] : in[i]);
    m = b > m ? b : m;
  }
  return m;
}

// x where keep, +0 elsewhere: the same value as `keep ? x : 0.0f`, written as a bit mask so that GCC
// vectorizes the masked sums (it will not if-convert a conditional float accumulation).
QT_HD float masked(float x, bool keep) { return bits_float(float_bits(x) & (0u - static_cast<uint32_t>(keep))); }

// adaptive's candidate tests on float bits: v > 0 and v >= tau+ (tau+ >= 0), v < 0 and v <= tau-
// (tau- <= 0); integer comparisons, which GCC keeps branch-free, with the same results as the float
// comparisons for every non-NaN v.
QT_HD bool adaptive_positive(uint32_t v, uint32_t tau_pos) {
  return (static_cast<int32_t>(v) > 0) & (static_cast<int32_t>(v) >= static_cast<int32_t>(tau_pos));
}
QT_HD bool adaptive_negative(uint32_t v, uint32_t tau_neg) {
  return (v > 0x80000000u) & ((v & kAbsMask) >= (tau_neg & kAbsMask));
}

// numerator / scale for an encoder's per-span or per-bucket scale (max|v| or a norm, as float bits,
// numerator = the number of levels): 0 when the scale is 0 or below FLT_MIN, and also when the quotient
// overflows (e.g. 127 / 1e-37): every value of such a span then encodes as level 0 and stays in the
// residual. An Inf here would turn |v| * inverse into Inf or NaN, whose int conversion differs between
// x86 (INT_MIN) and CUDA (saturated, NaN -> 0), so the encoders' bytes and residuals would be garbage
// and differ, and dettmers8 linear would index its decode table with INT_MIN.
QT_HD float inverse_scale(uint32_t scale_bits, float numerator) {
  if (scale_bits < 0x00800000u) return 0.0f;
  const float r = numerator / bits_float(scale_bits);
  return abs_bits(r) >= kNonFinite ? 0.0f : r;
}

// The l2 norm as max * sqrt(sum((v * r)^2)) with r = 1 / max (qsgd's norm=l2, both paths). Above
// 2^126, 1 / max is subnormal, which flush-to-zero arithmetic (every qtrain thread and kernel,
// docs/design.md "Arithmetic") reads as 0: the sum would be 0 and a norm beyond the float range would
// pass as 0 instead of failing. There r = 2^32 / max, normal, and l2_norm takes the 2^32 back out; the
// squares stay below 2^64 each. At or below 2^126 both are exactly the plain formula.
constexpr uint32_t kTwoTo126Bits = 0x7e800000u;
QT_HD float l2_inverse(uint32_t max_bits) {
  return max_bits > kTwoTo126Bits ? 0x1p32f / bits_float(max_bits) : 1.0f / bits_float(max_bits);
}
QT_HD float l2_norm(uint32_t max_bits, float sqrt_sum) {
  const float m = bits_float(max_bits);
  return max_bits > kTwoTo126Bits ? (m * 0x1p-32f) * sqrt_sum : m * sqrt_sum;
}

// ---- deterministic summation ----------------------------------------------------------------------
// Means and norms must be bit-identical on the CPU and the GPU, so their sums follow one fixed order:
// a span is cut into chunks of kSumChunk values; in a chunk, lane j (of kSumLanes) adds values j,
// j + 32, j + 64, ... in order, starting from +0; the 32 lane sums are then folded pairwise
// (lane j += lane j + off for off = 16, 8, 4, 2, 1), which is exactly what a CUDA warp computes with
// __shfl_xor_sync. When a span has several chunks, the chunk sums are summed again by the same rule.
constexpr int kSumLanes = 32;
constexpr int64_t kSumChunk = 4096;

QT_HD float fold_lanes(float* lanes) {
  for (int off = kSumLanes / 2; off >= 1; off /= 2)
    for (int j = 0; j < off; ++j) lanes[j] = lanes[j] + lanes[j + off];
  return lanes[0];
}

// fold_lanes for a chunk of `used` < kSumLanes values, where only lanes [0, used) were written (each
// +0 + value, so none holds -0) and the rest would be +0: the folds that pair a lane with one at or
// past bit_ceil(used) add +0, which changes no bit, so folding the first bit_ceil(used) lanes gives
// fold_lanes' result without the fixed cost of 32 lanes (CPU; short columns such as a 3x3 kernel's).
inline float fold_used_lanes(float* lanes, int64_t used) {
  int64_t width = 1;
  while (width < used) width *= 2;
  for (int64_t j = used; j < width; ++j) lanes[j] = 0.0f;
  for (int64_t off = width / 2; off >= 1; off /= 2)
    for (int64_t j = 0; j < off; ++j) lanes[j] = lanes[j] + lanes[j + off];
  return lanes[0];
}

// ---- stochastic rounding ------------------------------------------------------------------------
// Element i of a span rounds up with probability p (its fractional level) using Philox4x32-10 under
// the state's key. Stage 1: the 16-bit half i % 8 of the block at counter (i / 8, 0, kStage1, tag)
// (half h = bits 16 (h % 2) .. of word h / 2) is a uniform u16; round up when u16 < floor(65536 p).
// Only when u16 == floor(65536 p) (probability 2^-16) stage 2 draws word 0 of the block at counter
// (i, 0, kStage2, tag) and rounds up when it is below frac(65536 p) * 2^32. Together P(up) = p
// exactly (to 2^-48) while 8 values share one Philox call, and ties are rare enough for a scalar
// fix-up.
constexpr uint32_t kStage1 = 0;
constexpr uint32_t kStage2 = 1;
constexpr uint32_t kTagQsgd = 0x51534744u;    // "QSGD"
constexpr uint32_t kTagSample = 0x53414d50u;  // "SAMP": adaptive's sampled thresholds
constexpr int kValuesPerBlock = 8;

// The stage-1 uniform of element i, from its Philox block (the CPU batches blocks, kernels call this).
QT_HD uint32_t stage1_u16(const PhiloxBlock& b, uint64_t i) {
  const uint32_t half = static_cast<uint32_t>(i % kValuesPerBlock);
  return (b.v[half / 2] >> (16 * (half % 2))) & 0xffffu;
}

QT_HD PhiloxBlock stage1_block(PhiloxKey key, uint64_t block, uint32_t tag) {
  return philox4x32_10(static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), kStage1, tag, key);
}

// The stage-2 decision for element i whose scaled fraction is f = 65536 p - floor(65536 p) in [0, 1).
QT_HD bool stage2_up(PhiloxKey key, uint64_t i, uint32_t tag, float f) {
  const PhiloxBlock b = philox4x32_10(static_cast<uint32_t>(i), static_cast<uint32_t>(i >> 32), kStage2, tag, key);
  // Both sides exact: a float times 2^32 and a 32-bit integer are exact doubles.
  return static_cast<double>(b.v[0]) < static_cast<double>(f) * 4294967296.0;
}

// The level arithmetic of qsgd for |v| * inv = a: floor(a), the stage-1 cut floor(65536 frac(a)),
// and the stage-2 fraction. Exact: frac(a) is exact in float and the scaling is a power of two.
struct QsgdLevel {
  int32_t floor;
  int32_t cut;
  float rest;
};
QT_HD QsgdLevel qsgd_level(float v, float inv) {
  // The clamp keeps the conversions defined for NaN and Inf (fminf returns the number, not the NaN),
  // which the CUDA kernel meets before its status check refuses them; a C++ cast of those is undefined
  // (the UBSan run of the emulated tests reported it). Finite v <= max gives a <= 2^16: unchanged.
  const float a = fminf(fabsf(v) * inv, 2147483520.0f);  // the largest float below 2^31
  const auto l = static_cast<int32_t>(a);
  const float p = (a - static_cast<float>(l)) * 65536.0f;
  const auto h = static_cast<int32_t>(p);
  return {l, h, p - static_cast<float>(h)};
}

// ---- efsign's scale -------------------------------------------------------------------------------
// ||v||_1 / n as max * (sum(|v| * r) / n) with r = 1 / max, so that no finite input overflows the
// sum (each term is at most about 1); for a max below FLT_MIN (where 1 / max would overflow), r = 1
// and the scale is sum(|v|) / n. The sum follows the deterministic order on both paths.
QT_HD float efsign_inverse_max(uint32_t max_bits) {
  return max_bits < 0x00800000u ? 1.0f : 1.0f / bits_float(max_bits);
}
QT_HD float efsign_scale(uint32_t max_bits, float sum, int64_t n) {
  const float mean = sum / static_cast<float>(n);
  return max_bits < 0x00800000u ? mean : bits_float(max_bits) * mean;
}

// ---- terngrad's scale ---------------------------------------------------------------------------
// Per bucket of len values with max |v| = M: without clipping s = M. With clip factor c > 0, the
// values are clipped to c * sigma (Wen et al. 2017, section 3.3: sigma is the standard deviation of
// the bucket) and s = min(M, c * sigma). sigma = M * sqrt(sum((v r - mean)^2) / len) with r = 1 / M and
// mean = sum(v r) / len, both sums in the deterministic order: scaled by 1 / M, no finite input
// overflows them. A bucket whose c * sigma is 0 (all values equal) is not clipped (the clip would
// zero it), and nor is one whose M is below FLT_MIN (1 / M would overflow).
constexpr uint32_t kTagTerngrad = 0x5445524eu;  // "TERN"
QT_HD float terngrad_inverse_max(uint32_t max_bits) {
  return max_bits < 0x00800000u ? 0.0f : 1.0f / bits_float(max_bits);
}
QT_HD float terngrad_scale(uint32_t max_bits, float squares, int64_t len, float clip) {
  const float m = bits_float(max_bits);
  if (clip == 0.0f || max_bits < 0x00800000u) return m;
  const float cap = clip * (m * sqrtf(squares / static_cast<float>(len)));
  return cap > 0.0f && cap < m ? cap : m;
}

// The 2-bit code of v in a bucket of scale s (inv = inverse_scale(s, 1)): level 1 with probability
// min(|v|, s) / s (stage-1 uniform u16 and, on its tie, stage 2, as qsgd), code 1 (+s) or 3 (-s);
// else code 0.
QT_HD uint32_t terngrad_code(float v, float s, float inv, PhiloxKey key, uint64_t i, uint32_t u16) {
  const float mag = fabsf(v) < s ? fabsf(v) : s;
  const QsgdLevel lv = qsgd_level(mag, inv);
  const auto r = static_cast<int32_t>(u16);
  bool up = r < lv.cut;
  if (r == lv.cut) up = stage2_up(key, i, kTagTerngrad, lv.rest);
  const int32_t level = lv.floor + (up ? 1 : 0);
  if (level == 0) return 0u;
  return v < 0.0f ? 3u : 1u;
}

// Whether a word of terngrad's 2-bit codes holds the unused code 2 (high bit set, low bit clear).
QT_HD bool terngrad_bad_codes(uint32_t word) { return ((word >> 1) & ~word & 0x55555555u) != 0; }

// ---- signsgd's momentum (signum) ----------------------------------------------------------------
// m = beta m + (1 - beta) g, with 1 - beta computed once in float by the caller.
QT_HD float signum_momentum(float m, float g, float beta, float one_minus_beta) {
  return beta * m + one_minus_beta * g;
}

}  // namespace qtrain::quant_detail
