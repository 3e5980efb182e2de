// Streaming stores. GCC has no portable way to ask for a non-temporal store from plain code, so this
// one function uses the AVX intrinsic; other targets copy normally. The results are the same either
// way; only the cache traffic differs.
#include "quant/cpu_memory.h"
#include "quant/cpu_loops.h"

#if defined(__AVX__)
#include <immintrin.h>
#endif

namespace qtrain::quant_detail {

void stream_copy(float* dst, const float* src, int64_t n) {
#if defined(__AVX__)
  int64_t i = 0;
  // Regular stores up to the first 32-byte boundary of dst, streaming stores after it.
  for (; i < n && (reinterpret_cast<uintptr_t>(dst + i) & 31) != 0; ++i) dst[i] = src[i];
  for (; i + 8 <= n; i += 8) _mm256_stream_ps(dst + i, _mm256_loadu_ps(src + i));
  for (; i < n; ++i) dst[i] = src[i];
#else
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
#endif
}

bool cpu_fast_path_is_simd() {
#if defined(__AVX2__)
  return true;
#else
  return false;
#endif
}

void stream_fence() {
#if defined(__AVX__)
  _mm_sfence();  // streaming stores are weakly ordered: make them visible before the decode returns
#endif
}

}  // namespace qtrain::quant_detail
