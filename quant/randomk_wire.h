// The randomk payload's body (quant/wire.h has the header every method shares; docs/quantizers.md,
// "Wire format"). Offsets are from the payload's start; the accessors also run in kernels.
#pragma once

#include <cstddef>
#include <cstdint>

#include "framework/core/philox.h"
#include "quant/wire.h"

namespace qtrain {

namespace wire {

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

}  // namespace wire
}  // namespace qtrain
