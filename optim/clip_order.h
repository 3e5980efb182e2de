// The order in which clip_grad_norm sums the squares of the gradients, shared by its CPU loop and its
// CUDA kernels so that both get the same double, bit for bit (and so clip alike; cuBLAS's float nrm2
// did not, and its order may differ between GPU models, so replicas on different GPUs could diverge):
//   - the values are cut into chunks of kChunk; in a chunk, lane t of kLanes adds the values
//     t, t + kLanes, t + 2 kLanes, ... in that order, starting from +0;
//   - the lanes then fold pairwise: lane t += lane t + h, for h = kLanes / 2, ..., 2, 1; lane 0 is the
//     chunk's sum;
//   - the chunk sums are summed again the same way, level after level, until one value remains.
// Every term is a square of a float widened to double (exact) or a partial sum; no operation is fused
// (optim/ is built without contraction). On a GPU a chunk is one block of kLanes threads.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace qtrain::clip_order {

constexpr int64_t kLanes = 256;
constexpr int64_t kChunk = 4096;

inline int64_t chunks_of(int64_t n) { return (n + kChunk - 1) / kChunk; }

// The sum of value(i) for i in [begin, end) (at most kChunk values) in the order above.
template <typename Value>
double chunk_sum(int64_t begin, int64_t end, const Value& value) {
  double lanes[kLanes] = {};
  for (int64_t row = begin; row < end; row += kLanes)
    for (int64_t t = 0; t < kLanes && row + t < end; ++t) lanes[t] += value(row + t);
  for (int64_t h = kLanes / 2; h >= 1; h /= 2)
    for (int64_t t = 0; t < h; ++t) lanes[t] += lanes[t + h];
  return lanes[0];
}

// The sum of value(i) for i in [0, n) in the order above (+0 for n = 0).
template <typename Value>
double ordered_sum(int64_t n, const Value& value) {
  if (n == 0) return 0.0;
  std::vector<double> level(static_cast<size_t>(chunks_of(n)));
  for (int64_t c = 0; c < chunks_of(n); ++c)
    level[static_cast<size_t>(c)] = chunk_sum(c * kChunk, std::min(n, (c + 1) * kChunk), value);
  while (level.size() > 1) {
    const auto m = static_cast<int64_t>(level.size());
    std::vector<double> next(static_cast<size_t>(chunks_of(m)));
    for (int64_t c = 0; c < chunks_of(m); ++c)
      next[static_cast<size_t>(c)] = chunk_sum(c * kChunk, std::min(m, (c + 1) * kChunk),
                                               [&](int64_t i) { return level[static_cast<size_t>(i)]; });
    level.swap(next);
  }
  return level[0];
}

}  // namespace qtrain::clip_order
