// dettmers8's per-value code decisions that the CPU loops (dettmers8.cpp) and the kernels
// (dettmers8.cu) share: the same inline code on both sides is what keeps their bytes identical.
// (The default dynamic_tree search, the nearest entry, is the lookup of quant/dettmers_table.h.)
// Internal to quant/.
#pragma once

#include <cstdint>

#include "quant/dettmers_table.h"
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

// dynamic_tree with search: clusternet: the magnitude index that clusterNet's encode kernel
// (kCompression_8bit, the code behind the paper's Table 2) picks for |v| (abs_v) under the span's max
// M, with its constants and its f32 arithmetic: a = |v| / M divided as it does; the zero code below
// 1.5e-6, saturation above 0.995703; else six bisection steps over the 126 entries, after which the
// last pivot is compared only with the entry the value was last found above (`lower`), never with the
// one it was last found below (`upper`). So a value above the last pivot takes it even where `upper`
// is nearer: about a quarter of the values get a code that is not the nearest, which is why the
// paper's errors (1.39% / 2.46%) exceed the nearest search's (docs/quantizers.md). Pivot 126, past
// the table (clusterNet reads an unset shared-memory entry there), is never chosen: entry 125 is.
// A max below FLT_MIN encodes every value as zero, as the nearest search does.
QT_HD uint32_t dettmers8_clusternet_index(float abs_v, float m, const float* table) {
  const float a = float_bits(m) < 0x00800000u ? 0.0f : abs_v / m;
  if (a < 1.5e-6f) return DettmersTables::kZeroCode;
  if (a > 0.995703f) return DettmersTables::kSatCode;
  int pivot = 63, lower = 0, upper = DettmersTables::kEntries - 1;
  for (int step = 32; step > 0; step >>= 1) {  // selects, not branches: a warp's lanes do not diverge
    const bool above = a > table[pivot];
    lower = above ? pivot : lower;
    upper = above ? upper : pivot;
    pivot += above ? step : -step;
  }
  const float at_pivot = pivot < DettmersTables::kEntries ? table[pivot] : INFINITY;
  int chosen;
  if (lower == pivot)  // only pivot 0, reached from above
    chosen = fabsf(at_pivot - a) < table[upper] - a ? pivot : upper;
  else
    chosen = at_pivot - a < fabsf(table[lower] - a) ? pivot : lower;
  return static_cast<uint32_t>(chosen);
}

}  // namespace qtrain::quant_detail
