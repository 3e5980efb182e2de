// Device-side pieces the float-format kernels (fp8.cu, mx.cu, nvfp4.cu; dettmers8.cu its max) share: the span's max|v|
// as float bits (an integer max, so any order gives the CPU's value) and the stochastic-rounding words of four values
// at once. Internal to quant/; CUDA sources only.
#pragma once

#include "quant/cuda_common.cuh"
#include "quant/minifloat.h"

namespace qtrain::quant_detail {

namespace minifloat_kernels {
// max_bits (zeroed by the caller) = max over i of |in[i] (+ residual[i])| as bits; NaN/Inf input sets
// status->non_finite. Moves 4 bytes per value (8 with a residual), nothing written but one word per
// block: Vec streams float4 tiles (in and residual 16-byte aligned), the n % 4 last values in block 0;
// otherwise one value per thread. The block reduces in shared memory and makes one atomicMax: the
// former atomic per warp, all on one word, serialized in L2 (512K of them at 16M values).
// A template, so that every .cu file may include it.
template <bool Ef, bool Vec>
__global__ void __launch_bounds__(kStreamThreads)
    span_max_bits_kernel(const float* __restrict__ in, const float* __restrict__ residual, int64_t n,
                         uint32_t* max_bits, EncodeStatus* status) {
  uint32_t m = 0;
  // Values the scalar loop takes: all of them, or (Vec) the n % 4 after the last float4, in block 0.
  int64_t first = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  if (Vec) {
    const int64_t vecs = n / 4;
    for (int64_t tile = blockIdx.x; tile * kTileVecs < vecs; tile += gridDim.x) {
      const int64_t v0 = tile * kTileVecs + threadIdx.x;
      QT_UNROLL
      for (int k = 0; k < kStreamUnroll; ++k) {
        const int64_t v = v0 + k * kStreamThreads;
        if (v < vecs) {
          const uint32_t x = max4_abs_bits(Ef ? add4(load4(in, v), load4(residual, v)) : load4(in, v));
          m = x > m ? x : m;
        }
      }
    }
    first = blockIdx.x == 0 ? 4 * vecs + threadIdx.x : n;
    stride = blockDim.x;
  }
  for (int64_t i = first; i < n; i += stride) {
    const uint32_t b = abs_bits(Ef ? in[i] + residual[i] : in[i]);
    m = b > m ? b : m;
  }
  m = block_max_u32<kStreamThreads>(m);
  if (threadIdx.x == 0 && m > 0) {
    atomicMax(max_bits, m);
    if (m >= kNonFinite) atomicOr(&status->non_finite, 1u);
  }
}
}  // namespace minifloat_kernels

// Launches span_max_bits_kernel into a zeroed max_bits on ctx's stream.
inline void launch_span_max_bits(Context& ctx, const float* in, const float* residual, int64_t n, uint32_t* max_bits,
                                 EncodeStatus* status) {
  CUDA_CHECK(cudaMemsetAsync(max_bits, 0, sizeof(uint32_t), stream_of(ctx)));
  if (n == 0) return;
  constexpr int kThreads = kStreamThreads;
  cudaStream_t s = stream_of(ctx);
  using namespace minifloat_kernels;
  if (aligned_to(in, 16) && aligned_to(residual, 16)) {
    const int grid = stream_grid(n / 4);
    if (residual)
      span_max_bits_kernel<true, true><<<grid, kThreads, 0, s>>>(in, residual, n, max_bits, status);
    else
      span_max_bits_kernel<false, true><<<grid, kThreads, 0, s>>>(in, residual, n, max_bits, status);
  } else if (residual) {
    span_max_bits_kernel<true, false><<<grid_for(n, kThreads), kThreads, 0, s>>>(in, residual, n, max_bits, status);
  } else {
    span_max_bits_kernel<false, false><<<grid_for(n, kThreads), kThreads, 0, s>>>(in, residual, n, max_bits, status);
  }
  CUDA_CHECK(cudaGetLastError());
}

// float_round_word (quant/minifloat.h) of values 4v .. 4v + 3: the four words of one Philox block, so
// a thread that encodes a float4 computes one block instead of four.
__device__ __forceinline__ PhiloxBlock float_round_words(PhiloxKey key, int64_t v) {
  static_assert(kWordsPerBlock == 4, "a float4 takes one Philox block");
  const auto block = static_cast<uint64_t>(v);
  return philox4x32_10(static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), 0u, kTagFloat, key);
}

}  // namespace qtrain::quant_detail
