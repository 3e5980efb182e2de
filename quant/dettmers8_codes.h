// dettmers8's per-value code decisions that the CPU loops (dettmers8.cpp) and the kernels
// (dettmers8.cu) share: the same inline code on both sides is what keeps their bytes identical.
// Internal to quant/.
#pragma once

#include <cstdint>

#include "quant/numerics.h"

namespace qtrain::quant_detail {

// linear: the level round(127 a / M), half up, of a = |v| under the span's max M (r127 =
// inverse_scale(M, 127); 0 when M is too small to invert, and then every value is level 0). The float
// estimate a * r127 + 1/2 alone is within one level, but not exact: it turned 0.49999997 (times 127)
// into 1. The double products decide exactly: 127 a has at most 31 significant bits and (est +- 1/2) M
// at most 32, so neither is rounded. NaN and Inf (refused once the encode finishes) give 127.
QT_HD uint32_t dettmers8_linear_level(float a, float m, float r127) {
  if (r127 == 0.0f) return 0u;
  const float e = a * r127 + 0.5f;
  const int32_t est = e < 128.0f ? static_cast<int32_t>(e) : 127;
  const double y = 127.0 * static_cast<double>(a), md = m;
  const int32_t q = est + static_cast<int32_t>(y >= (est + 0.5) * md) - static_cast<int32_t>(y < (est - 0.5) * md);
  return q > 127 ? 127u : static_cast<uint32_t>(q);
}

}  // namespace qtrain::quant_detail
