// Emulator stand-in for cuRAND's device API, Philox4x32-10 only (the generator qtrain's kernels use).
// cuRAND's device API is header code, so its sequence is fully specified by what the toolkit ships
// (curand_philox4x32_x.h, curand_kernel.h, curand_uniform.h); this file reproduces it, written anew:
//
// - the state layout: a 128-bit counter ctr (x least significant), the current block `output`, the
//   64-bit key, and STATE, the index (0..3) in `output` of the next word; then cuRAND's Box-Muller
//   fields, kept so that sizeof and layout match (64 bytes);
// - curand_init(seed, subsequence, offset): key = seed (low word first), counter zero, then skip
//   `subsequence` blocks of 2^64 (added to the counter's high 64 bits, ctr.z/ctr.w) and `offset`
//   words (offset / 4 whole blocks added to the counter, offset % 4 into STATE);
// - curand: word STATE of `output`, advancing to the next counter after the fourth; curand4: the next
//   four words, which span two blocks when STATE != 0;
// - curand_uniform: x * 2^-32 + 2^-33 in float (CURAND_2POW32_INV is 2^-32 exactly, so the product is
//   exact and an FMA, which nvcc may contract this to, rounds the same): in (0, 1], never 0.
//
// framework/core/philox.h computes the same function on the CPU; tests/cuemu/test/test_curand_kernel.cu
// checks this header against values of the toolkit's own header and against philox.h.
#pragma once

#include <cuda_runtime.h>
#include <curand.h>

#include <cstdint>

struct curandStatePhilox4_32_10 {
  uint4 ctr;
  uint4 output;
  uint2 key;
  unsigned int STATE;
  int boxmuller_flag;
  int boxmuller_flag_double;
  float boxmuller_extra;
  double boxmuller_extra_double;
};
using curandStatePhilox4_32_10_t = curandStatePhilox4_32_10;
static_assert(sizeof(curandStatePhilox4_32_10_t) == 64, "cuRAND's Philox state is 64 bytes");

namespace cuemu::curand_detail {

constexpr unsigned kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;  // key schedule (golden ratio, sqrt(3) - 1)
constexpr unsigned kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;  // round multipliers

inline uint4 round(uint4 c, uint2 k) {
  const uint64_t p0 = static_cast<uint64_t>(kM0) * c.x, p1 = static_cast<uint64_t>(kM1) * c.z;
  const unsigned hi0 = static_cast<unsigned>(p0 >> 32), lo0 = static_cast<unsigned>(p0);
  const unsigned hi1 = static_cast<unsigned>(p1 >> 32), lo1 = static_cast<unsigned>(p1);
  return {hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0};
}

inline uint4 philox4x32_10(uint4 c, uint2 k) {
  for (int r = 0; r < 9; ++r) {
    c = round(c, k);
    k.x += kW0;
    k.y += kW1;
  }
  return round(c, k);
}

// Adds n to the 128-bit counter, with cuRAND's carry handling: a carry out of the low word is added
// to n's high word (which can wrap to 0 and lose it when n >= 2^64 - 2^32: cuRAND does the same), and
// a carry out of ctr.y is detected as cuRAND detects it.
inline void advance(curandStatePhilox4_32_10_t* s, unsigned long long n) {
  const unsigned lo = static_cast<unsigned>(n);
  unsigned hi = static_cast<unsigned>(n >> 32);
  s->ctr.x += lo;
  if (s->ctr.x < lo) ++hi;
  s->ctr.y += hi;
  if (hi <= s->ctr.y) return;
  if (++s->ctr.z != 0) return;
  ++s->ctr.w;
}

inline void advance_one(curandStatePhilox4_32_10_t* s) {
  if (++s->ctr.x != 0) return;
  if (++s->ctr.y != 0) return;
  if (++s->ctr.z != 0) return;
  ++s->ctr.w;
}

// Adds n to the counter's high 64 bits (ctr.z, ctr.w): n subsequences of 2^64 blocks.
inline void advance_high(curandStatePhilox4_32_10_t* s, unsigned long long n) {
  const unsigned lo = static_cast<unsigned>(n);
  unsigned hi = static_cast<unsigned>(n >> 32);
  s->ctr.z += lo;
  if (s->ctr.z < lo) ++hi;
  s->ctr.w += hi;
}

inline void refresh(curandStatePhilox4_32_10_t* s) { s->output = philox4x32_10(s->ctr, s->key); }

inline float uniform(unsigned x) {
  constexpr float kInv2Pow32 = 2.3283064e-10f;  // CURAND_2POW32_INV, which is exactly 2^-32
  return static_cast<float>(x) * kInv2Pow32 + (kInv2Pow32 / 2.0f);
}

}  // namespace cuemu::curand_detail

// Skips n words.
inline void skipahead(unsigned long long n, curandStatePhilox4_32_10_t* state) {
  state->STATE += static_cast<unsigned>(n & 3);
  n /= 4;
  if (state->STATE > 3) {
    n += 1;
    state->STATE -= 4;
  }
  cuemu::curand_detail::advance(state, n);
  cuemu::curand_detail::refresh(state);
}

// Skips n subsequences of 2^66 words.
inline void skipahead_sequence(unsigned long long n, curandStatePhilox4_32_10_t* state) {
  cuemu::curand_detail::advance_high(state, n);
  cuemu::curand_detail::refresh(state);
}

inline void curand_init(unsigned long long seed, unsigned long long subsequence, unsigned long long offset,
                        curandStatePhilox4_32_10_t* state) {
  state->ctr = make_uint4(0, 0, 0, 0);
  state->key = make_uint2(static_cast<unsigned>(seed), static_cast<unsigned>(seed >> 32));
  state->STATE = 0;
  state->boxmuller_flag = 0;
  state->boxmuller_flag_double = 0;
  state->boxmuller_extra = 0.0f;
  state->boxmuller_extra_double = 0.0;
  skipahead_sequence(subsequence, state);
  skipahead(offset, state);
}

inline unsigned int curand(curandStatePhilox4_32_10_t* state) {
  const uint4& o = state->output;
  const unsigned words[4] = {o.x, o.y, o.z, o.w};
  const unsigned r = words[state->STATE & 3];
  if (++state->STATE == 4) {
    cuemu::curand_detail::advance_one(state);
    cuemu::curand_detail::refresh(state);
    state->STATE = 0;
  }
  return r;
}

inline uint4 curand4(curandStatePhilox4_32_10_t* state) {
  const uint4 prev = state->output;
  cuemu::curand_detail::advance_one(state);
  cuemu::curand_detail::refresh(state);
  const uint4& next = state->output;
  // The four words from position STATE on, across the old block and the new one.
  const unsigned w[8] = {prev.x, prev.y, prev.z, prev.w, next.x, next.y, next.z, next.w};
  const unsigned s = state->STATE & 3;
  return make_uint4(w[s], w[s + 1], w[s + 2], w[s + 3]);
}

inline float curand_uniform(curandStatePhilox4_32_10_t* state) { return cuemu::curand_detail::uniform(curand(state)); }

inline float4 curand_uniform4(curandStatePhilox4_32_10_t* state) {
  const uint4 x = curand4(state);
  using cuemu::curand_detail::uniform;
  return make_float4(uniform(x.x), uniform(x.y), uniform(x.z), uniform(x.w));
}
