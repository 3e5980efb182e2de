// efsign kernels: the span's max |v| (integer max of float bits, order-free), the sum of |v| / max in
// the deterministic order (quant/cuda_common.cuh's group sums over one group, the span), the scale
// written into the header's b field, then one warp per 32-value word (a ballot packs the bits LSB
// first) updating the residual as efsign.cpp does.
#include "quant/cuda_common.cuh"
#include "quant/efsign_cuda.h"

namespace qtrain::quant_detail {
namespace {

__global__ void span_max_kernel(const float* __restrict__ in, const float* __restrict__ residual, int64_t n,
                                uint32_t* max_bits, EncodeStatus* status) {
  uint32_t m = 0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint32_t x = abs_bits(residual ? in[i] + residual[i] : in[i]);
    m = x > m ? x : m;
  }
  m = warp_max_u32(m);
  if (threadIdx.x % kWarp == 0 && m > 0) {
    atomicMax(max_bits, m);
    if (m >= kNonFinite) atomicOr(&status->non_finite, 1u);
  }
}

struct MagnitudesOverMax {
  const float* in;
  const float* residual;
  const uint32_t* max_bits;
  __device__ Contribution operator()(int64_t, int64_t i) const {
    const float v = residual ? in[i] + residual[i] : in[i];
    return {fabsf(v) * efsign_inverse_max(*max_bits), 0.0f, 0, 0, 0u};
  }
};

struct StoreScale {
  const uint32_t* max_bits;
  int64_t n;
  uint8_t* out;
  __device__ void operator()(int64_t, float sum, float, long long, long long) const {
    *reinterpret_cast<float*>(out + 24) = efsign_scale(*max_bits, sum, n);
  }
};

// One warp per word of 32 values.
__global__ void pack_kernel(const float* __restrict__ in, float* __restrict__ residual, int64_t n,
                            uint8_t* __restrict__ out) {
  const int64_t warps_per_block = blockDim.x / kWarp;
  const int64_t stride = warps_per_block * gridDim.x;
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  const float scale = *reinterpret_cast<const float*>(out + 24);
  auto* words = reinterpret_cast<uint32_t*>(out + wire::kHeaderBytes);
  for (int64_t w = blockIdx.x * warps_per_block + threadIdx.x / kWarp; 32 * w < n; w += stride) {
    const int64_t i = 32 * w + lane;
    const bool valid = i < n;
    const float v = valid ? (residual ? in[i] + residual[i] : in[i]) : 0.0f;
    const bool pos = valid && !(v < 0.0f);
    const unsigned bits = __ballot_sync(kFullMask, pos);
    if (lane == 0) words[w] = bits;
    if (valid && residual) residual[i] = v - (pos ? scale : -scale);
  }
}

}  // namespace

void efsign_encode_cuda(Context& ctx, const EncodeArgs& a, const WireHeader& h) {
  cuda_write_header(ctx, a.out, h);  // b (the scale) is 0 here; StoreScale writes it
  if (a.n == 0) return;
  const size_t need = 256 + Carver::bytes<uint32_t>(1) + group_sums_bytes(a.n, a.n);
  Carver carver(a.state->workspace(ctx.device(), need));
  EncodeStatus* status = fresh_status(ctx, carver);
  auto* max_bits = carver.take<uint32_t>(1);
  cudaStream_t s = stream_of(ctx);
  constexpr int kThreads = 256;
  CUDA_CHECK(cudaMemsetAsync(max_bits, 0, sizeof(uint32_t), s));
  span_max_kernel<<<grid_for(a.n, kThreads), kThreads, 0, s>>>(a.in, a.residual, a.n, max_bits, status);
  CUDA_CHECK(cudaGetLastError());
  const GroupSumsPlan plan = make_group_sums_plan(carver, a.n, a.n, status);
  launch_group_sums(ctx, plan, MagnitudesOverMax{a.in, a.residual, max_bits}, StoreScale{max_bits, a.n, a.out});
  const int64_t words = (a.n + 31) / 32;
  pack_kernel<<<grid_for(words * kWarp, kThreads), kThreads, 0, s>>>(a.in, a.residual, a.n, a.out);
  CUDA_CHECK(cudaGetLastError());
  check_status(ctx, status, [n = a.n](const EncodeStatus& done) {
    if (done.non_finite)
      throw NonFiniteInputError(fmt::format("efsign encode: the input of {} values holds NaN or Inf", n));
  });
}

}  // namespace qtrain::quant_detail
