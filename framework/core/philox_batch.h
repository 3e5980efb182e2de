// Many Philox4x32-10 blocks at once for the CPU loops that draw one random word per value
// (stochastic rounding in quant/, dropout masks in layers/). The blocks are exactly those
// framework/core/philox.h computes one at a time, in order, 4 words each, under one of two counter layouts:
//   philox_blocks:             counter (first_block + j as 64 bits, c2, c3)
//   philox_subsequence_blocks: counter (0, 0, first + j as 64 bits), i.e. philox_subsequence_block,
//                              cuRAND's curand_init(seed, first + j, 0) + curand4()
#pragma once

#include <cstdint>

#include "framework/core/philox.h"

namespace qtrain {

// out must hold 4 * count words.
void philox_blocks(PhiloxKey key, uint64_t first_block, uint32_t c2, uint32_t c3, int64_t count, uint32_t* out);
void philox_subsequence_blocks(PhiloxKey key, uint64_t first, int64_t count, uint32_t* out);

}  // namespace qtrain
