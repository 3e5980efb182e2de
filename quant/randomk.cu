// randomk kernels: one pass over the span (v = g + e into the residual, and the NaN/Inf check, as
// randomk.cpp), then one thread per sent value j at wire::randomk_index(key, j, n, k): the value, and
// e = 0 there. Decode scatters the k values to the same indices (computed from the header's key, read
// on the device; its kernel makes the deferred header check, quant/header_check.h).
#include "quant/cuda_common.cuh"
#include "quant/randomk_cuda.h"
#include "quant/randomk_wire.h"

namespace qtrain::quant_detail {
namespace {

__global__ void accumulate_kernel(const float* __restrict__ in, float* __restrict__ residual, int64_t n,
                                  EncodeStatus* status) {
  uint32_t bad = 0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = residual ? in[i] + residual[i] : in[i];
    if (residual) residual[i] = v;
    bad |= abs_bits(v) >= kNonFinite ? 1u : 0u;
  }
  if (bad) atomicOr(&status->non_finite, 1u);
}

__global__ void gather_kernel(const float* __restrict__ in, float* __restrict__ residual, int64_t n, int64_t k,
                              PhiloxKey key, float* __restrict__ values) {
  for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < k;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = wire::randomk_index(key, j, n, k);
    if (residual) {
      values[j] = residual[i];
      residual[i] = 0.0f;
    } else {
      values[j] = in[i];
    }
  }
}

template <bool Add>
__global__ void scatter_kernel(const uint8_t* __restrict__ payload, int64_t n, int64_t k, float* __restrict__ out,
                               HeaderCheck header) {
  check_header_in_kernel(header);
  const PhiloxKey key{header_field_b(payload), header_field_c(payload)};
  const auto* values = reinterpret_cast<const float*>(payload + wire::kHeaderBytes);
  for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < k;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = wire::randomk_index(key, j, n, k);
    out[i] = Add ? out[i] + values[j] : values[j];
  }
}

}  // namespace

void randomk_encode_cuda(Context& ctx, const EncodeArgs& a, int64_t k, const WireHeader& h) {
  cuda_write_header(ctx, a.out, h);
  if (a.n == 0) return;
  Carver carver(a.state->workspace(ctx.device(), 256));
  EncodeStatus* status = fresh_status(ctx, carver);
  constexpr int kThreads = 256;
  cudaStream_t s = stream_of(ctx);
  accumulate_kernel<<<grid_for(a.n, kThreads), kThreads, 0, s>>>(a.in, a.residual, a.n, status);
  CUDA_CHECK(cudaGetLastError());
  check_status(ctx, status, [n = a.n](const EncodeStatus& done) {
    if (done.non_finite)
      throw NonFiniteInputError(fmt::format("randomk encode: the input of {} values holds NaN or Inf", n));
  });
  gather_kernel<<<grid_for(k, kThreads), kThreads, 0, s>>>(a.in, a.residual, a.n, k, a.shared_key,
                                                           reinterpret_cast<float*>(a.out + wire::kHeaderBytes));
  CUDA_CHECK(cudaGetLastError());
}

void randomk_decode_cuda(Context& ctx, const uint8_t* payload, int64_t n, int64_t k, float* out, bool add) {
  if (!add && n > 0) CUDA_CHECK(cudaMemsetAsync(out, 0, sizeof(float) * static_cast<size_t>(n), stream_of(ctx)));
  if (k == 0) return;  // the header check, if any, is left to Quantizer's decode
  constexpr int kThreads = 256;
  const HeaderCheck header = take_header_check(ctx);  // made by the decode kernel
  if (add)
    scatter_kernel<true><<<grid_for(k, kThreads), kThreads, 0, stream_of(ctx)>>>(payload, n, k, out, header);
  else
    scatter_kernel<false><<<grid_for(k, kThreads), kThreads, 0, stream_of(ctx)>>>(payload, n, k, out, header);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace qtrain::quant_detail
