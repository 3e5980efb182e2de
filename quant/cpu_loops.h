// The inner CPU loops of the quantizers that have a hand-vectorized (AVX2) version next to their plain
// C++ reference. Both versions write the same bytes and residuals for every input; the quantizers call
// CpuPath::fast, and tests/quant runs both and compares them. In a build without AVX2, fast is the
// reference. Internal to quant/.
#pragma once

#include <cstdint>

#include "framework/core/philox.h"

namespace qtrain::quant_detail {

enum class CpuPath { reference, fast };

// Whether CpuPath::fast is a different (vectorized) loop in this build.
bool cpu_fast_path_is_simd();

// dettmers8 dynamic_tree: codes of v = in (+ residual) under the reciprocal scale r = 1 / M (0 for an
// all-zero span); with a residual, residual = v - d[code]. d is decode's 256-entry table.
void dettmers8_tree_codes(CpuPath path, const float* in, float* residual, uint8_t* out, int64_t n, float r,
                          const float* d);
// out[i] = d[codes[i]] (or += with add).
void dettmers8_decode_values(CpuPath path, const uint8_t* codes, float* out, int64_t n, const float* d, bool add);

// qsgd: packs `count` staged codes (a multiple of 8 / bits for bits < 8; bit 31, the tie mark, and any
// bit above `bits` are dropped) into bytes, `bits` wide, LSB first.
void qsgd_pack_codes(CpuPath path, int bits, const uint32_t* codes, int64_t count, uint8_t* out);
// qsgd: stage-1 codes of n values (a multiple of 64; bits 4 or 8; no residual) under the reciprocal
// scale `inv` and the 16-bit uniforms u, packed into n * bits / 8 bytes. Returns false when a value's
// uniform tied (it needs stage 2): the bytes are then incomplete and the caller encodes the values on
// the staged path (codes, stage 2, qsgd_pack_codes).
bool qsgd_stage1_packed(CpuPath path, int bits, const float* in, int64_t n, float inv, const uint16_t* u, uint8_t* out);
// qsgd: values [first, first + count) of one bucket whose codes start at `bytes`, decoded as
// sign * level * step into out[0..count) (or added to it).
void qsgd_decode_codes(CpuPath path, int bits, const uint8_t* bytes, int64_t first, int64_t count, float step,
                       float* out, bool add);

// codebook: the bins of v = in (+ residual) under the 2^bits - 1 sorted boundary keys t (followed by two
// sentinels 0xffffffff) and their run starts (quant/codebook_bins.h): the packed codes (codebook's
// layout), each bin's sum of floor(v 2^shift) and its count. The fast path bins through a prefix table
// (65536 u16 of scratch in prefix_table) instead of a binary search per value; not vectorized, and
// the same results for every input.
void codebook_bin_values(CpuPath path, int bits, const float* in, const float* residual, int64_t n, const uint32_t* t,
                         const uint8_t* run, int shift, uint16_t* prefix_table, uint8_t* codes, int64_t* sums,
                         int64_t* counts);

}  // namespace qtrain::quant_detail
