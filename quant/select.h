// Exact selection of the k-th largest magnitude (adaptive's threshold, topk's cut) by radix selection
// on the float bits: a histogram of the top 11 bits of |v| over the span, then 11 and 9 more bits over
// the values left in the chosen bucket. The answer is a value, not an order, so the CUDA histograms
// (atomics in any order) find the same one. Internal to quant/.
#pragma once

#include <cstdint>
#include <cstring>

#include "quant/numerics.h"

namespace qtrain::quant_detail {

struct Selection {
  uint32_t threshold_bits = 0;  // the k-th largest |v| as float bits
  int64_t ties_to_take = 0;     // how many values equal to the threshold complete the top k
  bool non_finite = false;      // the span holds NaN or Inf (nothing else is then meaningful)
};

namespace select_detail {
constexpr int kBins = 2048;

// The bucket holding the k-th largest (k >= 1) and k's rank inside it.
inline void find_bucket(const uint32_t* hist, int bins, int64_t k, uint32_t& bucket, int64_t& rank) {
  int64_t above = 0;
  for (int b = bins - 1; b >= 0; --b) {
    if (above + hist[b] >= k) {
      bucket = static_cast<uint32_t>(b);
      rank = k - above;
      return;
    }
    above += hist[b];
  }
  bucket = 0;
  rank = k - above;
}
}  // namespace select_detail

// value(i) for i in [0, n); 1 <= k <= n; `candidates` holds up to n words of scratch.
template <typename F>
Selection select_kth_largest_abs(F value, int64_t n, int64_t k, uint32_t* candidates) {
  using namespace select_detail;
  Selection s;
  // Four interleaved histograms: neighbouring values often share a bucket, and one histogram would
  // serialize their increments through store-to-load forwarding.
  uint32_t hist4[4][kBins];
  std::memset(hist4, 0, sizeof hist4);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int j = 0; j < 4; ++j) ++hist4[j][abs_bits(value(i + j)) >> 20];
  for (; i < n; ++i) ++hist4[0][abs_bits(value(i)) >> 20];
  uint32_t hist[kBins];
  for (int b = 0; b < kBins; ++b) hist[b] = hist4[0][b] + hist4[1][b] + hist4[2][b] + hist4[3][b];
  for (uint32_t b = kNonFinite >> 20; b < kBins; ++b)
    if (hist[b]) s.non_finite = true;
  if (s.non_finite) return s;

  uint32_t b1 = 0;
  int64_t r1 = 0;
  find_bucket(hist, kBins, k, b1, r1);
  int64_t m = 0;
  for (int64_t x = 0; x < n; ++x) {
    const uint32_t bits = abs_bits(value(x));
    if ((bits >> 20) == b1) candidates[m++] = bits;
  }

  uint32_t h2[kBins] = {};
  for (int64_t x = 0; x < m; ++x) ++h2[(candidates[x] >> 9) & 0x7ffu];
  uint32_t b2 = 0;
  int64_t r2 = 0;
  find_bucket(h2, kBins, r1, b2, r2);

  uint32_t h3[512] = {};
  const uint32_t prefix = (b1 << 20) | (b2 << 9);
  for (int64_t x = 0; x < m; ++x)
    if ((candidates[x] & ~0x1ffu) == prefix) ++h3[candidates[x] & 0x1ffu];
  uint32_t b3 = 0;
  int64_t r3 = 0;
  find_bucket(h3, 512, r2, b3, r3);

  s.threshold_bits = prefix | b3;
  s.ties_to_take = r3;
  return s;
}

}  // namespace qtrain::quant_detail
