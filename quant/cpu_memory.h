// Memory-traffic helpers of the CPU quantizers: software prefetch ahead of a streaming loop, and
// non-temporal (streaming) stores for decodes too large to stay in cache, which write the output
// without first reading it into the cache (one DRAM transfer per byte instead of two, as glibc's
// memcpy does for large copies). Internal to quant/.
#pragma once

#include <cstdint>
#include <cstring>

namespace qtrain::quant_detail {

// Decodes of at least this many values (32 MB of fp32) write with streaming stores: such outputs no
// longer fit the last-level cache of the machines we measured, so reading them in first is wasted.
constexpr int64_t kStreamingDecodeValues = int64_t{1} << 23;
// The tile a streaming decode fills in cache before it streams it out (16 KB: well inside L1).
constexpr int64_t kDecodeTile = 4096;

inline void prefetch_bytes(const void* p, size_t bytes) {
  const auto* c = static_cast<const char*>(p);
  for (size_t off = 0; off < bytes; off += 64) __builtin_prefetch(c + off);
}

// dst[0..n) = src[0..n) with streaming stores where the target has them (the caller ends the decode
// with stream_fence()).
void stream_copy(float* dst, const float* src, int64_t n);
void stream_fence();

// Runs decode_range(begin, end, dst) for the output [0, n): straight into out for small outputs and
// for decode_add, else tile by tile through an L1 buffer that is then streamed to out.
template <typename F>
void decode_tiled(float* out, int64_t n, bool add, F&& decode_range) {
  if (add || n < kStreamingDecodeValues) {
    decode_range(int64_t{0}, n, out);
    return;
  }
  alignas(64) float tile[kDecodeTile];
  for (int64_t b = 0; b < n; b += kDecodeTile) {
    const int64_t e = b + kDecodeTile < n ? b + kDecodeTile : n;
    decode_range(b, e, tile);
    stream_copy(out + b, tile, e - b);
  }
  stream_fence();
}

}  // namespace qtrain::quant_detail
