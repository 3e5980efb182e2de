// The 1-bit sign words that efsign and signsgd send: bit j of word w is value 32w + j
// >= 0, LSB first, and decodes to `pos` (bit 1) or `neg` (bit 0). The CPU decode loop both methods
// share; the encoders write their words themselves (each with its own state update). Internal to quant/.
#pragma once

#include <cstdint>

#include "quant/kernels.h"

namespace qtrain::wire {

// efsign: a = 0, b = the scale (||v||_1 / n) as f32 bits, c = 0. Body: ceil(n/32) u32 words, bit j of
// word w = value 32w + j >= 0 (LSB first); unused bits of the last word are zero.
// signsgd: a = b = c = 0, the same words.
inline size_t sign_body_end(int64_t n) { return kHeaderBytes + 4 * static_cast<size_t>(ceil_div(n, 32)); }

}  // namespace qtrain::wire

namespace qtrain::quant_detail {

// The CUDA decode of both methods (sign_words.cu): the n values of the words as pos or neg. With
// `scaled` (efsign's payload) pos and -pos are instead its header field b, read on the device (under
// DeferredChecks the receiver predicts the rest of the header; the kernel checks the scale).
void sign_decode_cuda(Context& ctx, const uint8_t* words, int64_t n, float pos, float neg, float* out, bool add,
                      const uint8_t* scaled = nullptr);

// Values [begin, end) of the span into out[0 .. end - begin): the partial words at either end value
// by value, the whole words between them 32 values at a time (a fixed-length loop GCC vectorizes).
template <bool Add>
inline void unpack_signs(const uint32_t* __restrict words, int64_t begin, int64_t end, float pos, float neg,
                         float* __restrict out) {
  auto one = [&](int64_t i) {
    const float v = (words[i >> 5] >> (i & 31)) & 1u ? pos : neg;
    out[i - begin] = Add ? out[i - begin] + v : v;
  };
  int64_t i = begin;
  for (; i < end && (i & 31) != 0; ++i) one(i);
  for (; i + 32 <= end; i += 32) {
    const uint32_t word = words[i >> 5];
    float* __restrict o = out + (i - begin);
    for (int j = 0; j < 32; ++j) {
      const float v = (word >> j) & 1u ? pos : neg;
      o[j] = Add ? o[j] + v : v;
    }
  }
  for (; i < end; ++i) one(i);
}

}  // namespace qtrain::quant_detail
