// The decode kernel of the 1-bit sign words that efsign and signsgd send (quant/sign_words.h has the
// CPU loop): bit 1 -> pos, bit 0 -> neg. Streamed (cuda_common.cuh): float4 v of the output from
// nibble v % 8 of word v / 8 (reads 1/8 byte per value, + 4 with add; writes 4); one thread per value
// for an output not 16-byte aligned. The payload's fields are checked on the host (the scale is a
// header field), so nothing in the body can be malformed.
#include "quant/cuda_common.cuh"
#include "quant/sign_words.h"

namespace qtrain::quant_detail {
namespace {

// efsign's scale from its payload's header field b (payload null: the pos and neg given), checked
// into the status as efsign.cpp's check_body checks it on the host.
struct Scaled {
  const uint8_t* payload;
  EncodeStatus* status;
  __device__ void apply(float& pos, float& neg) const {
    if (payload == nullptr) return;
    pos = checked_field_b_scale(payload, status);
    neg = -pos;
  }
};

template <bool Add>
__global__ void unpack_signs_kernel(const uint32_t* __restrict__ words, int64_t n, float pos, float neg,
                                    float* __restrict__ out, Scaled scaled, HeaderCheck header) {
  check_header_in_kernel(header);
  scaled.apply(pos, neg);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = (words[i >> 5] >> (i & 31)) & 1u ? pos : neg;
    out[i] = Add ? out[i] + v : v;
  }
}

template <bool Add>
__global__ void __launch_bounds__(kStreamThreads)
    unpack_signs_vec_kernel(const uint32_t* __restrict__ words, int64_t n, float pos, float neg,
                            float* __restrict__ out, Scaled scaled, HeaderCheck header) {
  check_header_in_kernel(header);
  scaled.apply(pos, neg);
  const int64_t vecs = n / 4;
  for (int64_t tile = blockIdx.x; tile * kTileVecs < vecs; tile += gridDim.x) {
    const int64_t v0 = tile * kTileVecs + threadIdx.x;
    uint32_t nib[kStreamUnroll];
    float4 acc[kStreamUnroll];
    QT_UNROLL
    for (int k = 0; k < kStreamUnroll; ++k) {
      const int64_t v = v0 + k * kStreamThreads;
      nib[k] = 0;
      acc[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (v >= vecs) continue;
      nib[k] = words[v / 8] >> (4 * (v % 8));
      if (Add) acc[k] = load4(out, v);
    }
    QT_UNROLL
    for (int k = 0; k < kStreamUnroll; ++k) {
      const int64_t v = v0 + k * kStreamThreads;
      if (v >= vecs) break;
      const float4 y = make_float4(nib[k] & 1u ? pos : neg, nib[k] & 2u ? pos : neg, nib[k] & 4u ? pos : neg,
                                   nib[k] & 8u ? pos : neg);
      store4(out, v, Add ? add4(acc[k], y) : y);
    }
  }
  if (blockIdx.x == 0)
    for (int64_t i = 4 * vecs + threadIdx.x; i < n; i += blockDim.x) {
      const float v = (words[i >> 5] >> (i & 31)) & 1u ? pos : neg;
      out[i] = Add ? out[i] + v : v;
    }
}

}  // namespace

void sign_decode_cuda(Context& ctx, const uint8_t* words, int64_t n, float pos, float neg, float* out, bool add,
                      const uint8_t* scaled) {
  if (n == 0) return;
  constexpr int kThreads = 256;
  const auto* w = reinterpret_cast<const uint32_t*>(words);
  std::optional<DecodeStatus> status;
  const Scaled sc{scaled, scaled != nullptr ? field_b_scale_status(ctx, status, QuantMethod::efsign) : nullptr};
  const HeaderCheck header = take_header_check(ctx);  // made by the decode kernel
  cudaStream_t s = stream_of(ctx);
  if (aligned_to(out, 16)) {
    const int grid = stream_grid(n / 4);
    if (add)
      unpack_signs_vec_kernel<true><<<grid, kStreamThreads, 0, s>>>(w, n, pos, neg, out, sc, header);
    else
      unpack_signs_vec_kernel<false><<<grid, kStreamThreads, 0, s>>>(w, n, pos, neg, out, sc, header);
  } else if (add) {
    unpack_signs_kernel<true><<<grid_for(n, kThreads), kThreads, 0, s>>>(w, n, pos, neg, out, sc, header);
  } else {
    unpack_signs_kernel<false><<<grid_for(n, kThreads), kThreads, 0, s>>>(w, n, pos, neg, out, sc, header);
  }
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace qtrain::quant_detail
