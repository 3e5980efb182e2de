// efsign kernels: the span's max |v| (integer max of float bits, order-free: quant/minifloat.cuh's
// block-reduced pass), the sum of |v| / max in the deterministic order (quant/cuda_common.cuh's group
// sums over one group, the span), the scale written into the header's b field, then per 32-value word
// the bits (LSB first) and the residual update of efsign.cpp. Three passes are inherent: the scale
// needs the max, the residual the scale. The pack streams float4s (eight lanes per word, their
// nibbles joined by shuffles; reads 8 bytes per value, writes 1/8 + 4); the last word, if partial, by
// one warp's ballot, and spans not 16-byte aligned by one warp per word.
#include "quant/cuda_common.cuh"
#include "quant/minifloat.cuh"
#include "quant/efsign_cuda.h"

namespace qtrain::quant_detail {
namespace {

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

// Word w of 32 values by warp lanes (the ballot).
__device__ __forceinline__ void pack_word(const float* __restrict__ in, float* __restrict__ residual, int64_t n,
                                          float scale, uint32_t* __restrict__ words, int64_t w) {
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  const int64_t i = 32 * w + lane;
  const bool valid = i < n;
  const float v = valid ? (residual ? in[i] + residual[i] : in[i]) : 0.0f;
  const bool pos = valid && !(v < 0.0f);
  const unsigned bits = __ballot_sync(kFullMask, pos);
  if (lane == 0) words[w] = bits;
  if (valid && residual) residual[i] = v - (pos ? scale : -scale);
}

// One warp per word of 32 values.
__global__ void pack_kernel(const float* __restrict__ in, float* __restrict__ residual, int64_t n,
                            uint8_t* __restrict__ out) {
  const int64_t warps_per_block = blockDim.x / kWarp;
  const int64_t stride = warps_per_block * gridDim.x;
  const float scale = *reinterpret_cast<const float*>(out + 24);
  auto* words = reinterpret_cast<uint32_t*>(out + wire::kHeaderBytes);
  for (int64_t w = blockIdx.x * warps_per_block + threadIdx.x / kWarp; 32 * w < n; w += stride)
    pack_word(in, residual, n, scale, words, w);
}

// The whole words, streamed: float4 v = values 4v .. 4v + 3 of word v / 8. The last word, if partial,
// by warp 0 of block 0.
template <bool Ef>
__global__ void __launch_bounds__(kStreamThreads)
    pack_vec_kernel(const float* __restrict__ in, float* __restrict__ residual, int64_t n, uint8_t* __restrict__ out) {
  const float scale = *reinterpret_cast<const float*>(out + 24);
  auto* words = reinterpret_cast<uint32_t*>(out + wire::kHeaderBytes);
  const int64_t full = n / 32, vecs = full * 8;
  for (int64_t tile = blockIdx.x; tile * kTileVecs < vecs; tile += gridDim.x) {
    const int64_t v0 = tile * kTileVecs + threadIdx.x;
    float4 x[kStreamUnroll];
    load_tile<Ef>(in, residual, v0, vecs, x);
    QT_UNROLL
    for (int k = 0; k < kStreamUnroll; ++k) {  // every lane runs the shuffles
      const int64_t v = v0 + k * kStreamThreads;
      const uint32_t nib = nonnegative_bits4(x[k]);
      const uint32_t word = sign_word_of_group(nib);
      if (v >= vecs) continue;
      if (threadIdx.x % 8 == 0) words[v / 8] = word;
      if (Ef)
        store4(residual, v,
               make_float4(x[k].x - (nib & 1u ? scale : -scale), x[k].y - (nib & 2u ? scale : -scale),
                           x[k].z - (nib & 4u ? scale : -scale), x[k].w - (nib & 8u ? scale : -scale)));
    }
  }
  if (blockIdx.x == 0 && threadIdx.x < kWarp && 32 * full < n)
    pack_word(in, Ef ? residual : nullptr, n, scale, words, full);
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
  launch_span_max_bits(ctx, a.in, a.residual, a.n, max_bits, status);
  const GroupSumsPlan plan = make_group_sums_plan(carver, a.n, a.n, status);
  launch_group_sums(ctx, plan, MagnitudesOverMax{a.in, a.residual, max_bits}, StoreScale{max_bits, a.n, a.out});
  if (aligned_to(a.in, 16) && aligned_to(a.residual, 16)) {
    const int grid = stream_grid(a.n / 32 * 8);
    if (a.residual)
      pack_vec_kernel<true><<<grid, kStreamThreads, 0, s>>>(a.in, a.residual, a.n, a.out);
    else
      pack_vec_kernel<false><<<grid, kStreamThreads, 0, s>>>(a.in, a.residual, a.n, a.out);
  } else {
    const int64_t words = (a.n + 31) / 32;
    pack_kernel<<<grid_for(words * kWarp, kThreads), kThreads, 0, s>>>(a.in, a.residual, a.n, a.out);
  }
  CUDA_CHECK(cudaGetLastError());
  check_status(ctx, status, [n = a.n](const EncodeStatus& done) {
    if (done.non_finite)
      throw NonFiniteInputError(fmt::format("efsign encode: the input of {} values holds NaN or Inf", n));
  });
}

}  // namespace qtrain::quant_detail
