// signsgd kernels: a check pass (NaN/Inf, read back before the momentum is touched, as signsgd.cpp),
// then one warp per 32-value word: the momentum update of quant/numerics.h (signum) and a ballot of
// the signs, LSB first.
#include "quant/cuda_common.cuh"
#include "quant/signsgd_cuda.h"

namespace qtrain::quant_detail {
namespace {

__global__ void check_kernel(const float* __restrict__ in, int64_t n, EncodeStatus* status) {
  uint32_t bad = 0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    bad |= abs_bits(in[i]) >= kNonFinite ? 1u : 0u;
  if (bad) atomicOr(&status->non_finite, 1u);
}

__global__ void pack_kernel(const float* __restrict__ in, float* __restrict__ momentum, int64_t n, float beta,
                            float one_minus_beta, uint32_t* __restrict__ words) {
  const int64_t warps_per_block = blockDim.x / kWarp;
  const int64_t stride = warps_per_block * gridDim.x;
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  for (int64_t w = blockIdx.x * warps_per_block + threadIdx.x / kWarp; 32 * w < n; w += stride) {
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
}

}  // namespace

void signsgd_encode_cuda(Context& ctx, const EncodeArgs& a, float beta, float one_minus_beta, const WireHeader& h) {
  if (a.n > 0) {
    Carver carver(a.state->workspace(ctx.device(), 256));
    EncodeStatus* status = fresh_status(ctx, carver);
    constexpr int kThreads = 256;
    check_kernel<<<grid_for(a.n, kThreads), kThreads, 0, stream_of(ctx)>>>(a.in, a.n, status);
    CUDA_CHECK(cudaGetLastError());
    check_status(ctx, status, [n = a.n](const EncodeStatus& done) {
      if (done.non_finite)
        throw NonFiniteInputError(fmt::format("signsgd encode: the input of {} values holds NaN or Inf", n));
    });
  }
  cuda_write_header(ctx, a.out, h);
  if (a.n == 0) return;
  constexpr int kThreads = 256;
  const int64_t words = (a.n + 31) / 32;
  pack_kernel<<<grid_for(words * kWarp, kThreads), kThreads, 0, stream_of(ctx)>>>(
      a.in, a.momentum, a.n, beta, one_minus_beta, reinterpret_cast<uint32_t*>(a.out + wire::kHeaderBytes));
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace qtrain::quant_detail
