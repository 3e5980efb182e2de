// codebook's per-value decisions and its table arithmetic, shared by the CPU loops (codebook.cpp) and
// the kernels (codebook.cu): the same inline code on both sides is what keeps their bytes identical.
// Everything that decides a bin or a table entry is integer arithmetic on float bits, so that neither
// the order of a sum nor flush-to-zero can make the two paths differ. Internal to quant/.
//
// - Order: values compare by their order key (a total order on float bits: -0 below +0).
// - Boundaries: t_1 <= ... <= t_(B-1) are the keys of the sorted pool (the span, or a sample of it) at
//   positions floor(j m / B) for a pool of m keys. Value x falls into bin b = the number of t_j <= x:
//   bin b holds [t_b, t_(b+1)), with t_0 = -M and t_B = +M (M = max |x|). A value that fills two
//   quantile positions or more (t_(b-1) = t_b = x: exact zeros of a sparse gradient, a constant
//   span) instead takes the first bin of its run, [x, x]: it decodes to itself, and the values just
//   above it are not averaged with it.
// - Means: each value is summed as the integer floor(x 2^s) (codebook_fixed), so a bin's sum is exact
//   in int64 whatever the order; the mean is sum / count (integer division), rounded once to float
//   and scaled back by 2^-s, then clamped into [t_b, t_(b+1)] (it is there already but for the last
//   rounding). An empty bin gets the midpoint of its boundaries. The table is therefore non-decreasing.
#pragma once

#include <cstdint>

#include "quant/numerics.h"

namespace qtrain::quant_detail {

constexpr uint32_t kTagCodebook = 0x43424f4bu;  // "CBOK": codebook's sample positions

// The order key of a float's bits: unsigned comparison of keys is the order of the values (-NaN < -Inf
// < ... < -0 < +0 < ... < +Inf < NaN).
QT_HD uint32_t codebook_key(uint32_t bits) {
  return bits ^ (static_cast<uint32_t>(static_cast<int32_t>(bits) >> 31) | 0x80000000u);  // no branch on the sign
}
// The float bits of a key.
QT_HD uint32_t codebook_key_bits(uint32_t key) { return key ^ ((key >> 31) != 0u ? 0x80000000u : 0xffffffffu); }

// The bin of `key`: the number of boundaries at or below it among t[0 .. 2^bits - 2] (sorted), by
// binary lifting over the 2^bits - 1 entries (bits compares, no branch on the data).
QT_HD uint32_t codebook_bin(const uint32_t* t, int bits, uint32_t key) {
  uint32_t pos = 0;
  // The step masked in, not branched on: a data-dependent branch per level mispredicts half the time.
  for (uint32_t step = 1u << (bits - 1); step != 0u; step >>= 1)
    pos += step & (0u - static_cast<uint32_t>(t[pos + step - 1] <= key));
  return pos;
}

// The bin of a value whose upper-bound bin is `pos` (codebook_bin): run[pos] when the value equals
// boundaries t_(pos-1) and t_pos (t[pos - 2] and t[pos - 1]), else pos. run[b] (b >= 1) is the first
// boundary index of the run of equal boundaries that t_b ends (codebook_runs).
QT_HD uint32_t codebook_tied_bin(const uint32_t* t, const uint8_t* run, uint32_t pos, uint32_t key) {
  const uint32_t i = pos >= 2 ? pos - 2 : 0;  // read in range; pos >= 2 decides
  const bool tied = (pos >= 2) & (t[i + 1] == key) & (t[i] == key);
  return tied ? run[pos] : pos;
}

// run[b] for b = 1 .. bins - 1 (run[0] = 0): the smallest j <= b with t_j = t_b.
QT_HD uint8_t codebook_run_start(const uint32_t* t, int b) {
  int j = b;
  while (j > 1 && t[j - 2] == t[b - 1]) --j;
  return static_cast<uint8_t>(b == 0 ? 0 : j);
}

// The pool position of boundary j (1 <= j < bins) for a pool of m >= 1 keys.
QT_HD int64_t codebook_boundary_index(int64_t j, int64_t m, int bins) { return j * m / bins; }

// The span position of sample j from its uniform 32-bit word w: floor(w n / 2^32) (adaptive's rule).
QT_HD int64_t codebook_sample_index(uint32_t w, int64_t n) {
  return static_cast<int64_t>((static_cast<uint64_t>(w) * static_cast<uint64_t>(n)) >> 32);
}

// The shift s of the fixed-point sums: with 2^c >= n and every |x| <= M < 2^(E - 126) (E = M's
// exponent field, at least 1), |floor(x 2^s)| <= 2^(62 - c), so the n terms of any bin sum within
// int64 in any order. Values down to about 2^(c - 38) M keep every bit, smaller ones are resolved to
// 2^(c - 61) M (finer than a float mean of the bin holds).
QT_HD int codebook_shift(uint32_t max_bits, int64_t n) {
  int c = 0;
  while ((int64_t{1} << c) < n) ++c;
  const int e = static_cast<int>((max_bits >> 23) & 0xffu);
  return 188 - c - (e < 1 ? 1 : e);
}

// floor(x 2^s) for the float bits of x (|x| <= M, the s of codebook_shift), from the bits alone:
// x = mantissa 2^(e - 150) (subnormals with e = 1 and no implicit bit); the arithmetic right shift is
// the floor also for negative x. Subnormals count with their value (no flush on either side).
// Written without branches on the data (the sign and the magnitude are unpredictable in a span).
QT_HD int64_t codebook_fixed(uint32_t bits, int shift) {
  const uint32_t field = (bits >> 23) & 0xffu;
  const auto mant = static_cast<int64_t>(field != 0u ? (bits & 0x7fffffu) | 0x800000u : bits & 0x7fffffu);
  const int64_t sign = -static_cast<int64_t>(bits >> 31);  // 0 or -1
  const int64_t m = (mant ^ sign) - sign;
  const int t = static_cast<int>(field != 0u ? field : 1u) - 150 + shift;  // <= 38 for |x| <= M
  const int left = t > 0 ? t : 0;
  const int right = t >= 0 ? 0 : (-t < 63 ? -t : 63);
  return (m * (int64_t{1} << left)) >> right;
}

// q 2^-s as a float: q rounded to float (nearest even, as both sides convert), its exponent lowered by
// s (exact), or +0 where that falls below FLT_MIN (the flush either side would do, made explicit).
// |q| <= floor(M 2^s) gives at most M: no overflow.
QT_HD float codebook_unfixed(int64_t q, int shift) {
  if (q == 0) return 0.0f;
  const uint32_t f = float_bits(static_cast<float>(q));
  const int e = static_cast<int>((f >> 23) & 0xffu) - shift;
  if (e <= 0) return 0.0f;
  return bits_float((f & 0x807fffffu) | (static_cast<uint32_t>(e) << 23));
}

// Table entry of a bin with boundary keys [lo, hi] (lo <= hi), `count` values summing to `sum`
// (fixed point, shift s): their mean, or for an empty bin the midpoint of its boundaries, clamped
// into [lo, hi] by key.
QT_HD float codebook_entry(int64_t sum, int64_t count, uint32_t lo_key, uint32_t hi_key, int shift) {
  const float lo = bits_float(codebook_key_bits(lo_key)), hi = bits_float(codebook_key_bits(hi_key));
  const float y = count > 0 ? codebook_unfixed(sum / count, shift) : 0.5f * lo + 0.5f * hi;
  const uint32_t k = codebook_key(float_bits(y));
  return k < lo_key ? lo : (k > hi_key ? hi : y);
}

// The boundary keys of bin b of `bins` (t: the bins - 1 boundaries; max_bits: M's bits).
QT_HD uint32_t codebook_lo_key(const uint32_t* t, int b, uint32_t max_bits) {
  return b == 0 ? codebook_key(max_bits | 0x80000000u) : t[b - 1];
}
QT_HD uint32_t codebook_hi_key(const uint32_t* t, int b, int bins, uint32_t max_bits) {
  return b == bins - 1 ? codebook_key(max_bits) : t[b];
}

}  // namespace qtrain::quant_detail
