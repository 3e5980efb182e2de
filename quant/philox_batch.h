// Many Philox4x32-10 blocks at once for the CPU stochastic-rounding loops. The counters are
// (first_block + j, c2, c3) for j < count (a 64-bit block index in the first two words), exactly the
// blocks framework/philox.h computes one at a time; blocks are stored in order, 4 words each.
// Internal to quant/.
#pragma once

#include <cstdint>

#include "framework/philox.h"

namespace qtrain::quant_detail {

// out must hold 4 * count words.
void philox_blocks(PhiloxKey key, uint64_t first_block, uint32_t c2, uint32_t c3, int64_t count, uint32_t* out);

}  // namespace qtrain::quant_detail
