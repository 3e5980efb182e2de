// onebit kernels: per-group masked sums in the deterministic order (quant/cuda_common.cuh), the two
// means written straight into the payload, then one warp per 32-value word (a ballot packs the bits
// LSB first) updating the residual as onebit.cpp does.
#include "quant/cuda_common.cuh"
#include "quant/onebit_cuda.h"
#include "quant/onebit_wire.h"

namespace qtrain::quant_detail {
namespace {

struct OnebitValues {
  const float* in;
  const float* residual;
  __device__ Contribution operator()(int64_t, int64_t i) const {
    const float v = residual ? in[i] + residual[i] : in[i];
    const bool neg = v < 0.0f;
    return {masked(v, neg), masked(v, !neg), neg ? 1 : 0, neg ? 0 : 1, abs_bits(v) >= kNonFinite ? 1u : 0u};
  }
};

struct OnebitMeans {
  uint8_t* out;
  size_t group_bytes;
  EncodeStatus* status;
  __device__ void operator()(int64_t g, float negatives, float positives, long long count_neg,
                             long long count_pos) const {
    float* means = reinterpret_cast<float*>(out + wire::kHeaderBytes + static_cast<size_t>(g) * group_bytes);
    means[0] = count_neg > 0 ? negatives / static_cast<float>(count_neg) : 0.0f;
    means[1] = count_pos > 0 ? positives / static_cast<float>(count_pos) : 0.0f;
    if (abs_bits(means[0]) >= kNonFinite || abs_bits(means[1]) >= kNonFinite)  // as onebit.cpp's check
      atomicOr(&status->overflow, 1u);
  }
};

// One warp per word of 32 values of a group.
__global__ void pack_kernel(const float* __restrict__ in, float* __restrict__ residual, int64_t n, int64_t group,
                            int64_t groups, int64_t words_full, size_t group_bytes, uint8_t* __restrict__ out) {
  const int64_t warps_per_block = blockDim.x / kWarp;
  const int64_t stride = warps_per_block * gridDim.x;
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  for (int64_t w = blockIdx.x * warps_per_block + threadIdx.x / kWarp; w < groups * words_full; w += stride) {
    const int64_t g = w / words_full, word = w % words_full;
    const int64_t start = g * group;
    const int64_t len = n - start < group ? n - start : group;
    if (32 * word >= len) continue;  // the last group has fewer words (warp-uniform)
    uint8_t* p = out + wire::kHeaderBytes + static_cast<size_t>(g) * group_bytes;
    const float m0 = reinterpret_cast<const float*>(p)[0], m1 = reinterpret_cast<const float*>(p)[1];
    const int64_t o = 32 * word + lane;
    const bool valid = o < len;
    const int64_t i = start + o;
    const float v = valid ? (residual ? in[i] + residual[i] : in[i]) : 0.0f;
    const bool pos = valid && !(v < 0.0f);
    const unsigned bits = __ballot_sync(kFullMask, pos);
    if (lane == 0) reinterpret_cast<uint32_t*>(p + 8)[word] = bits;
    if (valid && residual) residual[i] = v - (pos ? m1 : m0);
  }
}

__global__ void check_means_kernel(const uint8_t* __restrict__ payload, int64_t groups, size_t group_bytes,
                                   EncodeStatus* status) {
  for (int64_t g = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; g < groups;
       g += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float* means =
        reinterpret_cast<const float*>(payload + wire::kHeaderBytes + static_cast<size_t>(g) * group_bytes);
    if (abs_bits(means[0]) >= kNonFinite || abs_bits(means[1]) >= kNonFinite) atomicOr(&status->bad, 1u);
  }
}

template <bool Add>
__global__ void decode_kernel(const uint8_t* __restrict__ payload, int64_t n, int64_t group, size_t group_bytes,
                              float* __restrict__ out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t g = i / group, o = i - g * group;
    const uint8_t* p = payload + wire::kHeaderBytes + static_cast<size_t>(g) * group_bytes;
    const float* means = reinterpret_cast<const float*>(p);
    const uint32_t word = reinterpret_cast<const uint32_t*>(p + 8)[o / 32];
    const float v = (word >> (o % 32)) & 1u ? means[1] : means[0];
    out[i] = Add ? out[i] + v : v;
  }
}

}  // namespace

void onebit_encode_cuda(Context& ctx, const EncodeArgs& a, const wire::OnebitLayout& l, const WireHeader& h) {
  void* ws = a.state->workspace(ctx.device(), 256 + group_sums_bytes(l.n, l.group));
  Carver carver(ws);
  EncodeStatus* status = fresh_status(ctx, carver);
  cuda_write_header(ctx, a.out, h);
  const GroupSumsPlan plan = make_group_sums_plan(carver, l.n, l.group, status);
  launch_group_sums(ctx, plan, OnebitValues{a.in, a.residual}, OnebitMeans{a.out, l.group_bytes, status});
  if (l.groups > 0) {
    constexpr int kThreads = 256;
    const int64_t words = l.groups * l.words_full;
    pack_kernel<<<grid_for(words * kWarp, kThreads), kThreads, 0, stream_of(ctx)>>>(
        a.in, a.residual, l.n, l.group, l.groups, l.words_full, l.group_bytes, a.out);
    CUDA_CHECK(cudaGetLastError());
  }
  check_status(ctx, status, [n = a.n](const EncodeStatus& done) {
    if (done.non_finite)
      throw NonFiniteInputError(fmt::format("onebit encode: the input of {} values holds NaN or Inf", n));
    if (done.overflow)
      throw NonFiniteInputError(
          fmt::format("onebit encode: the sum of a group of the {} values exceeds the float range", n));
  });
}

void onebit_decode_cuda(Context& ctx, const wire::OnebitLayout& l, const uint8_t* payload, float* out, bool add) {
  if (l.n == 0) return;
  constexpr int kThreads = 256;
  DecodeStatus status(ctx);
  check_means_kernel<<<grid_for(l.groups, kThreads), kThreads, 0, stream_of(ctx)>>>(payload, l.groups, l.group_bytes,
                                                                                    status.get());
  CUDA_CHECK(cudaGetLastError());
  check_status(ctx, status.get(), [](const EncodeStatus& done) {
    if (done.bad) wire::bad_payload(QuantMethod::onebit, "a group has a non-finite mean");
  });
  if (add)
    decode_kernel<true>
        <<<grid_for(l.n, kThreads), kThreads, 0, stream_of(ctx)>>>(payload, l.n, l.group, l.group_bytes, out);
  else
    decode_kernel<false>
        <<<grid_for(l.n, kThreads), kThreads, 0, stream_of(ctx)>>>(payload, l.n, l.group, l.group_bytes, out);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace qtrain::quant_detail
