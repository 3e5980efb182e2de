// The CPU side of the deterministic summation order of quant/numerics.h: lane sums of one chunk, and
// the fold of chunk sums (at most three levels, since spans hold at most 2^31 values). The CUDA side
// (quant/cuda_common.cuh) does the same additions in the same order. No allocation. Internal to quant/.
#pragma once

#include <cstdint>

#include "quant/numerics.h"

namespace qtrain::quant_detail {

// Sums value(i) for i in [0, len) (len <= kSumChunk) by the lane rule: lane j adds values j, j + 32,
// ... starting from +0, then the lanes fold pairwise.
template <typename F>
inline float chunk_sum(F value, int64_t len) {
  if (len < kSumLanes) {
    float used[kSumLanes];
    for (int64_t j = 0; j < len; ++j) used[j] = 0.0f + value(j);
    return fold_used_lanes(used, len);
  }
  float lanes[kSumLanes] = {};
  int64_t t = 0;
  for (; t + kSumLanes <= len; t += kSumLanes)
    for (int j = 0; j < kSumLanes; ++j) lanes[j] += value(t + j);
  for (int j = 0; t + j < len; ++j) lanes[j] += value(t + j);
  return fold_lanes(lanes);
}

// The deterministic sum of value(i) over [0, n): the chunk sums of the values, then (when there are
// several) the chunk sums of those, and so on until one value is left.
template <typename F>
inline float det_sum_of(F value, int64_t n) {
  if (n <= kSumChunk) return chunk_sum(value, n);
  const int64_t chunks = (n + kSumChunk - 1) / kSumChunk;  // level-1 sums, at most 2^19
  float level1[kSumChunk];
  float level2[kSumChunk / kSumLanes];  // at most 2^19 / 4096 = 128 level-2 sums
  int64_t n2 = 0;
  for (int64_t first = 0; first < chunks; first += kSumChunk) {
    const int64_t count = chunks - first < kSumChunk ? chunks - first : kSumChunk;
    for (int64_t k = 0; k < count; ++k) {
      const int64_t base = (first + k) * kSumChunk;
      const int64_t len = n - base < kSumChunk ? n - base : kSumChunk;
      level1[k] = chunk_sum([&value, base](int64_t i) { return value(base + i); }, len);
    }
    level2[n2++] = chunk_sum([&level1](int64_t i) { return level1[i]; }, count);
  }
  if (n2 == 1) return level2[0];
  return chunk_sum([&level2](int64_t i) { return level2[i]; }, n2);
}

// K deterministic sums computed in one pass: chunk(base, len, sums) writes the K chunk sums of
// [base, base + len) (each by the lane rule, e.g. with chunk_sums_masked below); the chunk sums fold
// as in det_sum_of.
template <int K, typename ChunkFn>
inline void det_sums(ChunkFn chunk, int64_t n, float* out) {
  if (n <= kSumChunk) {
    chunk(int64_t{0}, n, out);
    return;
  }
  const int64_t chunks = (n + kSumChunk - 1) / kSumChunk;
  float level1[K][kSumChunk];
  float level2[K][kSumChunk / kSumLanes];
  int64_t n2 = 0;
  for (int64_t first = 0; first < chunks; first += kSumChunk) {
    const int64_t count = chunks - first < kSumChunk ? chunks - first : kSumChunk;
    for (int64_t k = 0; k < count; ++k) {
      const int64_t base = (first + k) * kSumChunk;
      float sums[K];
      chunk(base, n - base < kSumChunk ? n - base : kSumChunk, sums);
      for (int s = 0; s < K; ++s) level1[s][k] = sums[s];
    }
    for (int s = 0; s < K; ++s) level2[s][n2] = chunk_sum([&level1, s](int64_t i) { return level1[s][i]; }, count);
    ++n2;
  }
  for (int s = 0; s < K; ++s)
    out[s] = n2 == 1 ? level2[s][0] : chunk_sum([&level2, s](int64_t i) { return level2[s][i]; }, n2);
}

inline float det_sum(const float* x, int64_t n) {
  return det_sum_of([x](int64_t i) { return x[i]; }, n);
}

}  // namespace qtrain::quant_detail
