// Philox4x32-10, the counter-based generator behind every random choice in qtrain (dropout masks,
// stochastic rounding). Counter-based means no state to save or share between threads: the value at
// (key, counter) is a pure function, identical on the CPU and in CUDA kernels, so checkpoints only
// need the step and the CPU and CUDA paths produce the same bits.
//
// The round function and the mapping to floats follow cuRAND's curandStatePhilox4_32_10_t exactly:
// curand_init(seed, subsequence, 0) followed by curand4() returns
// philox4x32_10({0, 0, lo(subsequence), hi(subsequence)}, {lo(seed), hi(seed)}), and curand_uniform
// maps a word x to x * 2^-32 + 2^-33 (in float arithmetic). Kernels may therefore use either cuRAND's
// device API or this header and agree with the CPU.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define QT_HD __host__ __device__ __forceinline__
#else
#define QT_HD inline
#endif

namespace qtrain {

struct PhiloxKey {
  uint32_t k0, k1;
};

struct PhiloxBlock {
  uint32_t v[4];
};

namespace philox_detail {
constexpr uint32_t kM0 = 0xD2511F53u;
constexpr uint32_t kM1 = 0xCD9E8D57u;
constexpr uint32_t kW0 = 0x9E3779B9u;
constexpr uint32_t kW1 = 0xBB67AE85u;

QT_HD void round(uint32_t c[4], uint32_t k0, uint32_t k1) {
  const uint64_t p0 = static_cast<uint64_t>(kM0) * c[0];
  const uint64_t p1 = static_cast<uint64_t>(kM1) * c[2];
  const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
  const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
  const uint32_t n0 = hi1 ^ c[1] ^ k0;
  const uint32_t n2 = hi0 ^ c[3] ^ k1;
  c[0] = n0;
  c[1] = lo1;
  c[2] = n2;
  c[3] = lo0;
}
}  // namespace philox_detail

// Ten rounds of Philox4x32 on the 128-bit counter (c0 least significant word) under a 64-bit key.
QT_HD PhiloxBlock philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, PhiloxKey key) {
  PhiloxBlock b{{c0, c1, c2, c3}};
  uint32_t k0 = key.k0, k1 = key.k1;
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      k0 += philox_detail::kW0;
      k1 += philox_detail::kW1;
    }
    philox_detail::round(b.v, k0, k1);
  }
  return b;
}

// The block cuRAND's curand_init(seed, subsequence, 0) + curand4() produces.
QT_HD PhiloxBlock philox_subsequence_block(PhiloxKey key, uint64_t subsequence) {
  return philox4x32_10(0u, 0u, static_cast<uint32_t>(subsequence), static_cast<uint32_t>(subsequence >> 32), key);
}

// A float in (0, 1], exactly as cuRAND's curand_uniform maps a 32-bit word.
QT_HD float uniform_from_bits(uint32_t x) {
  constexpr float kInv2Pow32 = 2.3283064e-10f;
  return static_cast<float>(x) * kInv2Pow32 + (kInv2Pow32 / 2.0f);
}

// SplitMix64 finalizer: spreads structured inputs (seed, step, rank, ids) over 64 bits.
QT_HD uint64_t mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// A Philox key for one use of randomness, derived from the run seed and up to three identifiers
// (e.g. step, layer id, rank). Different tuples give unrelated streams.
QT_HD PhiloxKey derive_philox_key(uint64_t seed, uint64_t a, uint64_t b = 0, uint64_t c = 0) {
  uint64_t h = mix64(seed);
  h = mix64(h ^ a);
  h = mix64(h ^ (b + 0x632BE59BD9B4E019ull));
  h = mix64(h ^ (c + 0x85157AF5ull));
  return PhiloxKey{static_cast<uint32_t>(h), static_cast<uint32_t>(h >> 32)};
}

QT_HD uint64_t philox_key_as_seed(PhiloxKey key) {
  return static_cast<uint64_t>(key.k0) | (static_cast<uint64_t>(key.k1) << 32);
}

}  // namespace qtrain
