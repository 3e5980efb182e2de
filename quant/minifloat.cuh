// Device-side pieces the float-format kernels (fp8.cu, mx.cu, nvfp4.cu) share: the span's max|v| as
// float bits (an integer max, so any order gives the CPU's value). Internal to quant/; CUDA sources only.
#pragma once

#include "quant/cuda_common.cuh"

namespace qtrain::quant_detail {

namespace minifloat_kernels {
// max_bits (zeroed by the caller); a template so that every .cu file may include it = max over i of |in[i] (+
// residual[i])| as bits; NaN/Inf input sets status->non_finite.
template <int Unused = 0>
__global__ void span_max_bits_kernel(const float* __restrict__ in, const float* __restrict__ residual, int64_t n,
                                     uint32_t* max_bits, EncodeStatus* status) {
  uint32_t m = 0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint32_t b = abs_bits(residual ? in[i] + residual[i] : in[i]);
    m = b > m ? b : m;
  }
  m = warp_max_u32(m);
  if (threadIdx.x % kWarp == 0 && m > 0) {
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
  constexpr int kThreads = 256;
  minifloat_kernels::span_max_bits_kernel<<<grid_for(n, kThreads), kThreads, 0, stream_of(ctx)>>>(in, residual, n,
                                                                                                  max_bits, status);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace qtrain::quant_detail
