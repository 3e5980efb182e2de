// terngrad kernels: per-bucket max (integer max of float bits, order-free); with clipping, the mean
// and the sum of squares of v / max in the deterministic order (quant/cuda_common.cuh's group sums,
// two passes) and the scale of quant/numerics.h; then one thread per 32-bit word of 16 codes, each
// drawn with terngrad_code exactly as terngrad.cpp does, updating the residual.
#include "quant/cuda_common.cuh"
#include "quant/qsgd_wire.h"
#include "quant/terngrad_cuda.h"

namespace qtrain::quant_detail {
namespace {

struct ScaledValues {
  const float* in;
  const float* residual;
  const uint32_t* max_bits;
  __device__ Contribution operator()(int64_t b, int64_t i) const {
    const float v = residual ? in[i] + residual[i] : in[i];
    return {v * terngrad_inverse_max(max_bits[b]), 0.0f, 0, 0, 0u};
  }
};

struct StoreMean {
  int64_t n, bucket;
  float* means;
  __device__ void operator()(int64_t b, float sum, float, long long, long long) const {
    const int64_t len = n - b * bucket < bucket ? n - b * bucket : bucket;
    means[b] = sum / static_cast<float>(len);
  }
};

struct CenteredSquares {
  const float* in;
  const float* residual;
  const uint32_t* max_bits;
  const float* means;
  __device__ Contribution operator()(int64_t b, int64_t i) const {
    const float v = residual ? in[i] + residual[i] : in[i];
    const float x = v * terngrad_inverse_max(max_bits[b]) - means[b];
    return {x * x, 0.0f, 0, 0, 0u};
  }
};

struct StoreScale {
  int64_t n, bucket;
  float clip;
  const uint32_t* max_bits;
  float* scales;
  __device__ void operator()(int64_t b, float squares, float, long long, long long) const {
    const int64_t len = n - b * bucket < bucket ? n - b * bucket : bucket;
    scales[b] = terngrad_scale(max_bits[b], squares, len, clip);
  }
};

// One thread per word of 16 codes.
__global__ void encode_words_kernel(const float* __restrict__ in, float* __restrict__ residual, wire::QsgdLayout l,
                                    PhiloxKey key, uint8_t* __restrict__ out) {
  const float* scales = reinterpret_cast<const float*>(out + wire::kHeaderBytes);
  const int64_t words = l.buckets * l.words_full;
  for (int64_t w = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; w < words;
       w += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t b = w / l.words_full, word = w % l.words_full;
    const int64_t len = l.len(b);
    if (word * 16 >= len) continue;  // the last bucket has fewer words
    const float s = scales[b];
    const float inv = inverse_scale(float_bits(s), 1.0f);
    uint32_t packed = 0;
    uint64_t block_index = ~uint64_t{0};
    PhiloxBlock block{};
    for (int j = 0; j < 16; ++j) {
      const int64_t o = word * 16 + j;
      if (o >= len) break;
      const int64_t i = b * l.bucket + o;
      const float v = residual ? in[i] + residual[i] : in[i];
      const uint64_t bi = static_cast<uint64_t>(i) / kValuesPerBlock;
      if (bi != block_index) {
        block = stage1_block(key, bi, kTagTerngrad);
        block_index = bi;
      }
      const uint32_t code =
          terngrad_code(v, s, inv, key, static_cast<uint64_t>(i), stage1_u16(block, static_cast<uint64_t>(i)));
      packed |= code << (2 * j);
      if (residual) residual[i] = v - (code == 0 ? 0.0f : (code == 1 ? s : -s));
    }
    reinterpret_cast<uint32_t*>(out + l.words_offset(b))[word] = packed;
  }
}

// Scales finite and >= 0, and no code 2, in every bucket.
__global__ void check_kernel(const uint8_t* __restrict__ payload, wire::QsgdLayout l, EncodeStatus* status) {
  const float* scales = reinterpret_cast<const float*>(payload + wire::kHeaderBytes);
  const int64_t words = l.buckets * l.words_full;
  for (int64_t w = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; w < words;
       w += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t b = w / l.words_full, word = w % l.words_full;
    if (word == 0 && float_bits(scales[b]) >= kNonFinite) atomicOr(&status->bad, 1u);
    if (word * 16 >= l.len(b)) continue;
    if (terngrad_bad_codes(reinterpret_cast<const uint32_t*>(payload + l.words_offset(b))[word]))
      atomicOr(&status->bad, 1u);
  }
}

template <bool Add>
__global__ void decode_kernel(const uint8_t* __restrict__ payload, wire::QsgdLayout l, float* __restrict__ out) {
  const float* scales = reinterpret_cast<const float*>(payload + wire::kHeaderBytes);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < l.n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t b = i / l.bucket, o = i - b * l.bucket;
    const uint32_t code =
        (reinterpret_cast<const uint32_t*>(payload + l.words_offset(b))[o / 16] >> (2 * (o % 16))) & 3u;
    const float v = code == 0 ? 0.0f : (code == 1 ? scales[b] : -scales[b]);
    out[i] = Add ? out[i] + v : v;
  }
}

}  // namespace

void terngrad_encode_cuda(Context& ctx, const EncodeArgs& a, const wire::QsgdLayout& l, float clip,
                          const WireHeader& h) {
  const size_t need =
      256 + 2 * Carver::bytes<uint32_t>(static_cast<size_t>(l.buckets)) + group_sums_bytes(l.n, l.bucket);
  Carver carver(a.state->workspace(ctx.device(), need));
  EncodeStatus* status = fresh_status(ctx, carver);
  auto* max_bits = carver.take<uint32_t>(static_cast<size_t>(l.buckets));
  auto* means = carver.take<float>(static_cast<size_t>(l.buckets));
  cudaStream_t s = stream_of(ctx);
  cuda_write_header(ctx, a.out, h);
  if (l.buckets > 0 && l.n > 0) {
    constexpr int kThreads = 256;
    cuda_bucket_max_bits(ctx, a.in, a.residual, l.n, l.bucket, l.buckets, max_bits, status);
    auto* scales = reinterpret_cast<float*>(a.out + wire::kHeaderBytes);
    if (clip != 0.0f) {
      // Buckets whose max is below FLT_MIN sum zeros here; terngrad_scale gives them their max.
      const GroupSumsPlan plan = make_group_sums_plan(carver, l.n, l.bucket, status);
      launch_group_sums(ctx, plan, ScaledValues{a.in, a.residual, max_bits}, StoreMean{l.n, l.bucket, means});
      launch_group_sums(ctx, plan, CenteredSquares{a.in, a.residual, max_bits, means},
                        StoreScale{l.n, l.bucket, clip, max_bits, scales});
    } else {
      cuda_max_scales(ctx, max_bits, l.buckets, scales);
    }
    const int64_t words = l.buckets * l.words_full;
    encode_words_kernel<<<grid_for(words, kThreads), kThreads, 0, s>>>(a.in, a.residual, l, a.key, a.out);
    CUDA_CHECK(cudaGetLastError());
  }
  check_status(ctx, status, [n = a.n](const EncodeStatus& done) {
    if (done.non_finite)
      throw NonFiniteInputError(fmt::format("terngrad encode: the input of {} values holds NaN or Inf", n));
  });
}

void terngrad_decode_cuda(Context& ctx, const wire::QsgdLayout& l, const uint8_t* payload, float* out, bool add) {
  if (l.n == 0) return;
  constexpr int kThreads = 256;
  DecodeStatus status(ctx);
  check_kernel<<<grid_for(l.buckets * l.words_full, kThreads), kThreads, 0, stream_of(ctx)>>>(payload, l, status.get());
  CUDA_CHECK(cudaGetLastError());
  check_status(ctx, status.get(), [](const EncodeStatus& done) {
    if (done.bad)
      wire::bad_payload(QuantMethod::terngrad, "a bucket scale is not a finite value >= 0, or a word holds code 2");
  });
  if (add)
    decode_kernel<true><<<grid_for(l.n, kThreads), kThreads, 0, stream_of(ctx)>>>(payload, l, out);
  else
    decode_kernel<false><<<grid_for(l.n, kThreads), kThreads, 0, stream_of(ctx)>>>(payload, l, out);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace qtrain::quant_detail
