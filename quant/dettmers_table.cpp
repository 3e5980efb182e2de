// Generates the dynamic-tree table: for each decade k = 0..5 (scale 10^-k), 2^(5-k) equal bins on
// [0.10, 0.45] * 10^-k and 2^(5-k) on [0.45, 1.00] * 10^-k; the entries are the 126 bin midpoints.
// Computed in double and rounded once to float, so every build gets the same bits.
#include "quant/dettmers_table.h"

#include <algorithm>

#include "framework/core/check.h"
#include "quant/numerics.h"

namespace qtrain::quant_detail {
namespace {

DettmersTables build() {
  DettmersTables t{};
  constexpr double kDecade[6] = {1.0, 0.1, 0.01, 0.001, 0.0001, 0.00001};
  int i = 0;
  for (int k = 5; k >= 0; --k) {  // ascending: smallest decade first
    const int bins = 1 << (5 - k);
    const double edges[3] = {0.10 * kDecade[k], 0.45 * kDecade[k], 1.00 * kDecade[k]};
    for (int half = 0; half < 2; ++half) {
      const double lo = edges[half], width = (edges[half + 1] - edges[half]) / bins;
      for (int j = 0; j < bins; ++j) t.value[i++] = static_cast<float>(lo + (j + 0.5) * width);
    }
  }
  QT_CHECK_EQ(i, DettmersTables::kEntries, "dynamic tree table size");
  for (int e = 0; e + 1 < DettmersTables::kEntries; ++e) {
    QT_CHECK(t.value[e] < t.value[e + 1], "dynamic tree table must ascend at entry {}", e);
    t.mid_bits[e] = float_bits(static_cast<float>((static_cast<double>(t.value[e]) + t.value[e + 1]) / 2));
  }
  t.mid_bits[DettmersTables::kEntries - 1] = kAbsMask;
  t.zero_bits = float_bits(1.5e-6f);
  t.sat_bits = float_bits(static_cast<float>((static_cast<double>(t.value[DettmersTables::kEntries - 1]) + 1.0) / 2));

  t.lut_first = t.zero_bits >> DettmersTables::kLutShift;
  t.lut_size = static_cast<int32_t>((t.sat_bits >> DettmersTables::kLutShift) - t.lut_first + 1);
  QT_CHECK(t.lut_size <= DettmersTables::kLutMax, "dynamic tree lookup needs {} buckets", t.lut_size);
  for (int32_t b = 0; b < t.lut_size; ++b) {
    const uint32_t lo = (t.lut_first + static_cast<uint32_t>(b)) << DettmersTables::kLutShift;
    const uint32_t hi = lo + (1u << DettmersTables::kLutShift) - 1;
    const int base = t.nearest_by_search(lo);
    // At most one midpoint inside the bucket, else one comparison would not be enough.
    const int midpoints = t.nearest_by_search(hi + (hi < kAbsMask ? 1 : 0)) - base;
    QT_CHECK(midpoints <= 1, "dynamic tree bucket {} holds several midpoints", b);
    const uint32_t low = midpoints == 1 ? (t.mid_bits[base] & DettmersTables::kLowMask) : DettmersTables::kLowMask;
    t.lut[b] = (static_cast<uint32_t>(base) << DettmersTables::kLutShift) | low;
  }
  return t;
}

}  // namespace

int DettmersTables::nearest_by_search(uint32_t a_bits) const {
  // Count midpoints strictly below a (binary search over the ascending midpoints 0..124).
  int lo = 0, hi = kEntries - 1;
  while (lo < hi) {
    const int m = (lo + hi) / 2;
    if (mid_bits[m] < a_bits)
      lo = m + 1;
    else
      hi = m;
  }
  return lo;
}

const DettmersTables& dettmers_tables() {
  static const DettmersTables tables = build();
  return tables;
}

}  // namespace qtrain::quant_detail
