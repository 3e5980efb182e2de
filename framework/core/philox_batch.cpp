// Batched Philox4x32-10 on the CPU (philox_batch.h). Philox is the one place where GCC's auto-vectorizer fails us
// (it cannot see that the 64-bit products of the round function are 32x32 multiplies and expands
// them into shift-and-add chains, costing ~27 cycles per block), so with AVX2 eight blocks run in the
// lanes of a vector explicitly, four vectors interleaved (about 6 cycles per block); the scalar loop is the reference
// and the fallback, and tests/quant checks that the two agree.
#include "framework/core/philox_batch.h"

#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace qtrain {
namespace {

// The varying 64-bit counter sits in words 0-1 (`subsequence` false; words 2-3 hold c2, c3) or in
// words 2-3 (`subsequence` true; words 0-1 are zero).
void philox_blocks_scalar(PhiloxKey key, uint64_t first_block, uint32_t c2, uint32_t c3, int64_t count, uint32_t* out,
                          bool subsequence) {
  for (int64_t j = 0; j < count; ++j) {
    const uint64_t c = first_block + static_cast<uint64_t>(j);
    const uint32_t lo = static_cast<uint32_t>(c), hi = static_cast<uint32_t>(c >> 32);
    const PhiloxBlock b = subsequence ? philox4x32_10(0u, 0u, lo, hi, key) : philox4x32_10(lo, hi, c2, c3, key);
    for (int w = 0; w < 4; ++w) out[4 * j + w] = b.v[w];
  }
}

#if defined(__AVX2__)
// The high 32 bits of the eight lane products a * m (m the same in every lane).
inline __m256i mulhi_epu32(__m256i a, __m256i m) {
  const __m256i even = _mm256_mul_epu32(a, m);                        // lanes 0, 2, 4, 6 as 64-bit
  const __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), m);  // lanes 1, 3, 5, 7
  return _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xaa);
}

// 8 * G consecutive blocks whose counters share their high word. The round function is a chain of
// dependent multiplies, so G independent groups of eight run interleaved to keep the multipliers
// busy (one group alone is latency-bound at about 10 cycles per block).
template <int G>
inline void philox_groups(PhiloxKey key, uint32_t lo0, uint32_t hi, uint32_t c2in, uint32_t c3in, uint32_t* out,
                          bool subsequence) {
  __m256i c0[G], c1[G], c2[G], c3[G];
  for (int g = 0; g < G; ++g) {
    const __m256i lanes = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(lo0 + 8u * static_cast<uint32_t>(g))),
                                           _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    const __m256i high = _mm256_set1_epi32(static_cast<int>(hi));
    if (subsequence) {
      c0[g] = c1[g] = _mm256_setzero_si256();
      c2[g] = lanes;
      c3[g] = high;
    } else {
      c0[g] = lanes;
      c1[g] = high;
      c2[g] = _mm256_set1_epi32(static_cast<int>(c2in));
      c3[g] = _mm256_set1_epi32(static_cast<int>(c3in));
    }
  }
  const __m256i m0 = _mm256_set1_epi32(static_cast<int>(philox_detail::kM0));
  const __m256i m1 = _mm256_set1_epi32(static_cast<int>(philox_detail::kM1));
  uint32_t k0 = key.k0, k1 = key.k1;
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      k0 += philox_detail::kW0;
      k1 += philox_detail::kW1;
    }
    const __m256i kv0 = _mm256_set1_epi32(static_cast<int>(k0));
    const __m256i kv1 = _mm256_set1_epi32(static_cast<int>(k1));
    for (int g = 0; g < G; ++g) {
      const __m256i hi0 = mulhi_epu32(c0[g], m0);
      const __m256i lo0v = _mm256_mullo_epi32(c0[g], m0);
      const __m256i hi1 = mulhi_epu32(c2[g], m1);
      const __m256i lo1 = _mm256_mullo_epi32(c2[g], m1);
      c0[g] = _mm256_xor_si256(_mm256_xor_si256(hi1, c1[g]), kv0);
      c2[g] = _mm256_xor_si256(_mm256_xor_si256(hi0, c3[g]), kv1);
      c1[g] = lo1;
      c3[g] = lo0v;
    }
  }
  for (int g = 0; g < G; ++g) {
    // Transpose lanes (one block per lane) into block-major order: 4 words per block.
    const __m256i t0 = _mm256_unpacklo_epi32(c0[g], c1[g]);  // b0.c0 b0.c1 b1.c0 b1.c1 | b4 b5
    const __m256i t1 = _mm256_unpackhi_epi32(c0[g], c1[g]);  // b2 b3 | b6 b7
    const __m256i t2 = _mm256_unpacklo_epi32(c2[g], c3[g]);
    const __m256i t3 = _mm256_unpackhi_epi32(c2[g], c3[g]);
    const __m256i u0 = _mm256_unpacklo_epi64(t0, t2);  // b0 | b4
    const __m256i u1 = _mm256_unpackhi_epi64(t0, t2);  // b1 | b5
    const __m256i u2 = _mm256_unpacklo_epi64(t1, t3);  // b2 | b6
    const __m256i u3 = _mm256_unpackhi_epi64(t1, t3);  // b3 | b7
    auto* o = reinterpret_cast<__m256i*>(out + 32 * g);
    _mm256_storeu_si256(o + 0, _mm256_permute2x128_si256(u0, u1, 0x20));
    _mm256_storeu_si256(o + 1, _mm256_permute2x128_si256(u2, u3, 0x20));
    _mm256_storeu_si256(o + 2, _mm256_permute2x128_si256(u0, u1, 0x31));
    _mm256_storeu_si256(o + 3, _mm256_permute2x128_si256(u2, u3, 0x31));
  }
}
#endif

void blocks(PhiloxKey key, uint64_t first_block, uint32_t c2, uint32_t c3, int64_t count, uint32_t* out,
            bool subsequence) {
  int64_t j = 0;
#if defined(__AVX2__)
  constexpr int kGroups = 4;
  constexpr int64_t kBatch = 8 * kGroups;
  for (; j < count; j += kBatch) {
    const uint64_t c = first_block + static_cast<uint64_t>(j);
    const uint32_t lo = static_cast<uint32_t>(c), hi = static_cast<uint32_t>(c >> 32);
    if (lo > 0xffffffffu - kBatch) break;  // the low word would wrap inside the batch: scalar loop
    if (j + kBatch <= count) {
      philox_groups<kGroups>(key, lo, hi, c2, c3, out + 4 * j, subsequence);
    } else {
      // A last partial batch: computing all of it and keeping the part asked for is cheaper than
      // the scalar loop.
      uint32_t tmp[4 * kBatch];
      philox_groups<kGroups>(key, lo, hi, c2, c3, tmp, subsequence);
      for (int64_t w = 0; w < 4 * (count - j); ++w) out[4 * j + w] = tmp[w];
      return;
    }
  }
#endif
  philox_blocks_scalar(key, first_block + static_cast<uint64_t>(j), c2, c3, count - j, out + 4 * j, subsequence);
}

}  // namespace

void philox_blocks(PhiloxKey key, uint64_t first_block, uint32_t c2, uint32_t c3, int64_t count, uint32_t* out) {
  blocks(key, first_block, c2, c3, count, out, /*subsequence=*/false);
}

void philox_subsequence_blocks(PhiloxKey key, uint64_t first, int64_t count, uint32_t* out) {
  blocks(key, first, 0, 0, count, out, /*subsequence=*/true);
}

}  // namespace qtrain
