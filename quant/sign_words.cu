// The decode kernel of the 1-bit sign words that efsign and signsgd send (quant/sign_words.h has the
// CPU loop): one thread per value, bit 1 -> pos, bit 0 -> neg. The payload's fields are checked on
// the host (the scale is a header field), so nothing in the body can be malformed.
#include "quant/cuda_common.cuh"
#include "quant/sign_words.h"

namespace qtrain::quant_detail {
namespace {

template <bool Add>
__global__ void unpack_signs_kernel(const uint32_t* __restrict__ words, int64_t n, float pos, float neg,
                                    float* __restrict__ out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = (words[i >> 5] >> (i & 31)) & 1u ? pos : neg;
    out[i] = Add ? out[i] + v : v;
  }
}

}  // namespace

void sign_decode_cuda(Context& ctx, const uint8_t* words, int64_t n, float pos, float neg, float* out, bool add) {
  if (n == 0) return;
  constexpr int kThreads = 256;
  const auto* w = reinterpret_cast<const uint32_t*>(words);
  if (add)
    unpack_signs_kernel<true><<<grid_for(n, kThreads), kThreads, 0, stream_of(ctx)>>>(w, n, pos, neg, out);
  else
    unpack_signs_kernel<false><<<grid_for(n, kThreads), kThreads, 0, stream_of(ctx)>>>(w, n, pos, neg, out);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace qtrain::quant_detail
