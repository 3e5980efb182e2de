// signsgd kernels: a check pass (NaN/Inf, read back before the momentum is touched, as signsgd.cpp),
// then per 32-value word the momentum update of quant/numerics.h (signum) and the signs, LSB first.
// Both stream (cuda_common.cuh): float4 loads, eight lanes per word (their nibbles joined by
// shuffles); the last word, if partial, by one warp's ballot, and spans not 16-byte aligned by one
// warp per word. Per value the check reads 4 bytes; the pack reads 4 (12 with momentum) and writes
// 1/8 (+ 4).
#include "quant/cuda_common.cuh"
#include "quant/signsgd_cuda.h"

namespace qtrain::quant_detail {
namespace {

template <bool Vec>
__global__ void __launch_bounds__(kStreamThreads)
    check_kernel(const float* __restrict__ in, int64_t n, EncodeStatus* status) {
  uint32_t m = 0;
  int64_t first = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  if (Vec) {  // float4 tiles, the n % 4 last values in block 0
    const int64_t vecs = n / 4;
    for (int64_t tile = blockIdx.x; tile * kTileVecs < vecs; tile += gridDim.x) {
      QT_UNROLL
      for (int k = 0; k < kStreamUnroll; ++k) {
        const int64_t v = tile * kTileVecs + threadIdx.x + k * kStreamThreads;
        if (v < vecs) {
          const uint32_t x = max4_abs_bits(load4(in, v));
          m = x > m ? x : m;
        }
      }
    }
    first = blockIdx.x == 0 ? 4 * vecs + threadIdx.x : n;
    stride = blockDim.x;
  }
  for (int64_t i = first; i < n; i += stride) {
    const uint32_t x = abs_bits(in[i]);
    m = x > m ? x : m;
  }
  if (m >= kNonFinite) atomicOr(&status->non_finite, 1u);
}

// Word w of 32 values by warp lanes (the ballot): the words from first_word on (scalar path) or the
// last, partial, word (vector path).
__device__ __forceinline__ void pack_word(const float* __restrict__ in, float* __restrict__ momentum, int64_t n,
                                          float beta, float one_minus_beta, uint32_t* __restrict__ words, int64_t w) {
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  const int64_t i = 32 * w + lane;
  const bool valid = i < n;
  float v = valid ? in[i] : 0.0f;
  if (valid && momentum) {
    v = signum_momentum(momentum[i], v, beta, one_minus_beta);
    momentum[i] = v;
  }
  const unsigned bits = __ballot_sync(kFullMask, valid && !(v < 0.0f));
  if (lane == 0) words[w] = bits;
}

// One warp per word of 32 values.
__global__ void pack_kernel(const float* __restrict__ in, float* __restrict__ momentum, int64_t n, float beta,
                            float one_minus_beta, uint32_t* __restrict__ words) {
  const int64_t warps_per_block = blockDim.x / kWarp;
  const int64_t stride = warps_per_block * gridDim.x;
  for (int64_t w = blockIdx.x * warps_per_block + threadIdx.x / kWarp; 32 * w < n; w += stride)
    pack_word(in, momentum, n, beta, one_minus_beta, words, w);
}

// The whole words, streamed: float4 v = values 4v .. 4v + 3 of word v / 8. The last word, if partial,
// by warp 0 of block 0.
template <bool Momentum>
__global__ void __launch_bounds__(kStreamThreads)
    pack_vec_kernel(const float* __restrict__ in, float* __restrict__ momentum, int64_t n, float beta,
                    float one_minus_beta, uint32_t* __restrict__ words) {
  const int64_t full = n / 32, vecs = full * 8;
  for (int64_t tile = blockIdx.x; tile * kTileVecs < vecs; tile += gridDim.x) {
    const int64_t v0 = tile * kTileVecs + threadIdx.x;
    float4 x[kStreamUnroll], mo[kStreamUnroll];
    QT_UNROLL
    for (int k = 0; k < kStreamUnroll; ++k) {  // every load before any use: kStreamUnroll in flight
      const int64_t v = v0 + k * kStreamThreads;
      x[k] = mo[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (v < vecs) {
        x[k] = load4(in, v);
        if (Momentum) mo[k] = load4(momentum, v);
      }
    }
    QT_UNROLL
    for (int k = 0; k < kStreamUnroll; ++k) {  // every lane runs the shuffles
      const int64_t v = v0 + k * kStreamThreads;
      float4 y = x[k];
      if (Momentum) {
        y = make_float4(
            signum_momentum(mo[k].x, y.x, beta, one_minus_beta), signum_momentum(mo[k].y, y.y, beta, one_minus_beta),
            signum_momentum(mo[k].z, y.z, beta, one_minus_beta), signum_momentum(mo[k].w, y.w, beta, one_minus_beta));
        if (v < vecs) store4(momentum, v, y);
      }
      const uint32_t word = sign_word_of_group(nonnegative_bits4(y));
      if (v < vecs && threadIdx.x % 8 == 0) words[v / 8] = word;
    }
  }
  if (blockIdx.x == 0 && threadIdx.x < kWarp && 32 * full < n)
    pack_word(in, Momentum ? momentum : nullptr, n, beta, one_minus_beta, words, full);
}

}  // namespace

void signsgd_encode_cuda(Context& ctx, const EncodeArgs& a, float beta, float one_minus_beta, const WireHeader& h) {
  if (a.n > 0) {
    Carver carver(a.state->workspace(ctx.device(), 256));
    EncodeStatus* status = fresh_status(ctx, carver);
    constexpr int kThreads = 256;
    if (aligned_to(a.in, 16))
      check_kernel<true><<<stream_grid(a.n / 4), kStreamThreads, 0, stream_of(ctx)>>>(a.in, a.n, status);
    else
      check_kernel<false><<<grid_for(a.n, kThreads), kThreads, 0, stream_of(ctx)>>>(a.in, a.n, status);
    CUDA_CHECK(cudaGetLastError());
    check_status(ctx, status, [n = a.n](const EncodeStatus& done) {
      if (done.non_finite)
        throw NonFiniteInputError(fmt::format("signsgd encode: the input of {} values holds NaN or Inf", n));
    });
  }
  cuda_write_header(ctx, a.out, h);
  if (a.n == 0) return;
  constexpr int kThreads = 256;
  auto* words = reinterpret_cast<uint32_t*>(a.out + wire::kHeaderBytes);
  cudaStream_t s = stream_of(ctx);
  if (aligned_to(a.in, 16) && aligned_to(a.momentum, 16)) {
    const int grid = stream_grid(a.n / 32 * 8);
    if (a.momentum)
      pack_vec_kernel<true><<<grid, kStreamThreads, 0, s>>>(a.in, a.momentum, a.n, beta, one_minus_beta, words);
    else
      pack_vec_kernel<false><<<grid, kStreamThreads, 0, s>>>(a.in, a.momentum, a.n, beta, one_minus_beta, words);
  } else {
    const int64_t word_count = (a.n + 31) / 32;
    pack_kernel<<<grid_for(word_count * kWarp, kThreads), kThreads, 0, s>>>(a.in, a.momentum, a.n, beta, one_minus_beta,
                                                                            words);
  }
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace qtrain::quant_detail
