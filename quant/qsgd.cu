// qsgd kernels: per-bucket max (integer max of float bits, order-free) and, for l2, the deterministic
// sum of squares; then one thread per 32-bit word of codes, each value rounded with the Philox stream
// of quant/numerics.h exactly as qsgd.cpp's chunk loop and tie fix-up do.
#include "quant/cuda_common.cuh"
#include "quant/qsgd_cuda.h"
#include "quant/qsgd_wire.h"

namespace qtrain::quant_detail {
namespace {

// ||v||_2 = max * sqrt(sum((v / max)^2)) per bucket, as qsgd.cpp's Bucket::l2().
struct SquaresOverMax {
  const float* in;
  const float* residual;
  const uint32_t* max_bits;
  __device__ Contribution operator()(int64_t b, int64_t i) const {
    const uint32_t m = max_bits[b];
    if (m < 0x00800000u) return {0.0f, 0.0f, 0, 0, 0u};
    const float r = 1.0f / bits_float(m);
    const float x = (residual ? in[i] + residual[i] : in[i]) * r;
    return {x * x, 0.0f, 0, 0, 0u};
  }
};

struct L2Scale {
  const uint32_t* max_bits;
  float* scales;
  EncodeStatus* status;
  __device__ void operator()(int64_t b, float sum, float, long long, long long) const {
    const uint32_t m = max_bits[b];
    scales[b] = m < 0x00800000u ? bits_float(m) : bits_float(m) * sqrtf(sum);
    if (float_bits(scales[b]) >= kNonFinite) atomicOr(&status->overflow, 1u);  // as qsgd.cpp's check
  }
};

// One thread per word of codes.
template <int Bits>
__global__ void encode_words_kernel(const float* __restrict__ in, float* __restrict__ residual, wire::QsgdLayout l,
                                    PhiloxKey key, uint8_t* __restrict__ out) {
  constexpr int kPer = 32 / Bits;
  constexpr int32_t kLevels = (1 << (Bits - 1)) - 1;
  constexpr uint32_t kSign = 1u << (Bits - 1);
  const float* scales = reinterpret_cast<const float*>(out + wire::kHeaderBytes);
  const int64_t words = l.buckets * l.words_full;
  for (int64_t w = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; w < words;
       w += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t b = w / l.words_full, word = w % l.words_full;
    const int64_t len = l.len(b);
    if (word * kPer >= len) continue;  // the last bucket has fewer words
    const float scale = scales[b];
    const float inv = inverse_scale(float_bits(scale), static_cast<float>(kLevels));
    const float step = scale / static_cast<float>(kLevels);
    uint32_t packed = 0;
    uint64_t block_index = ~uint64_t{0};
    PhiloxBlock block{};
    for (int j = 0; j < kPer; ++j) {
      const int64_t o = word * kPer + j;
      if (o >= len) break;
      const int64_t i = b * l.bucket + o;
      const float v = residual ? in[i] + residual[i] : in[i];
      const QsgdLevel lv = qsgd_level(v, inv);
      const uint64_t bi = static_cast<uint64_t>(i) / kValuesPerBlock;
      if (bi != block_index) {
        block = stage1_block(key, bi, kTagQsgd);
        block_index = bi;
      }
      const auto r = static_cast<int32_t>(stage1_u16(block, static_cast<uint64_t>(i)));
      bool up = r < lv.cut;
      if (r == lv.cut) up = stage2_up(key, static_cast<uint64_t>(i), kTagQsgd, lv.rest);
      int32_t k = lv.floor + (up ? 1 : 0);
      k = k > kLevels ? kLevels : k;
      const bool neg = v < 0.0f;
      packed |= (static_cast<uint32_t>(k) | (neg ? kSign : 0u)) << (j * Bits);
      if (residual) {
        const float mag = static_cast<float>(k) * step;
        residual[i] = v - (neg ? -mag : mag);
      }
    }
    reinterpret_cast<uint32_t*>(out + l.words_offset(b))[word] = packed;
  }
}

__global__ void check_scales_kernel(const float* __restrict__ scales, int64_t buckets, EncodeStatus* status) {
  for (int64_t b = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; b < buckets;
       b += static_cast<int64_t>(gridDim.x) * blockDim.x)
    if (float_bits(scales[b]) >= kNonFinite) atomicOr(&status->bad, 1u);
}

template <int Bits, bool Add>
__global__ void decode_kernel(const uint8_t* __restrict__ payload, wire::QsgdLayout l, float* __restrict__ out) {
  constexpr int kPer = 32 / Bits;
  constexpr uint32_t kMask = (1u << Bits) - 1;
  constexpr uint32_t kSign = 1u << (Bits - 1);
  constexpr int32_t kLevels = (1 << (Bits - 1)) - 1;
  const float* scales = reinterpret_cast<const float*>(payload + wire::kHeaderBytes);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < l.n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t b = i / l.bucket, o = i - b * l.bucket;
    const uint32_t word = reinterpret_cast<const uint32_t*>(payload + l.words_offset(b))[o / kPer];
    const uint32_t code = (word >> ((o % kPer) * Bits)) & kMask;
    const float step = scales[b] / static_cast<float>(kLevels);
    const float mag = static_cast<float>(static_cast<int32_t>(code & (kSign - 1))) * step;
    const float v = code & kSign ? -mag : mag;
    out[i] = Add ? out[i] + v : v;
  }
}

template <typename F>
void with_bits(int bits, F&& f) {
  switch (bits) {
    case 2: f(std::integral_constant<int, 2>{}); break;
    case 4: f(std::integral_constant<int, 4>{}); break;
    case 8: f(std::integral_constant<int, 8>{}); break;
    default: f(std::integral_constant<int, 16>{}); break;
  }
}

}  // namespace

void qsgd_encode_cuda(Context& ctx, const EncodeArgs& a, const wire::QsgdLayout& l, QsgdNorm norm,
                      const WireHeader& h) {
  const size_t need = 256 + Carver::bytes<uint32_t>(static_cast<size_t>(l.buckets)) + group_sums_bytes(l.n, l.bucket);
  Carver carver(a.state->workspace(ctx.device(), need));
  EncodeStatus* status = fresh_status(ctx, carver);
  auto* max_bits = carver.take<uint32_t>(static_cast<size_t>(l.buckets));
  cudaStream_t s = stream_of(ctx);
  cuda_write_header(ctx, a.out, h);
  if (l.buckets > 0) {
    constexpr int kThreads = 256;
    cuda_bucket_max_bits(ctx, a.in, a.residual, l.n, l.bucket, l.buckets, max_bits, status);
    auto* scales = reinterpret_cast<float*>(a.out + wire::kHeaderBytes);
    if (norm == QsgdNorm::l2) {
      const GroupSumsPlan plan = make_group_sums_plan(carver, l.n, l.bucket, status);
      launch_group_sums(ctx, plan, SquaresOverMax{a.in, a.residual, max_bits}, L2Scale{max_bits, scales, status});
    } else {
      cuda_max_scales(ctx, max_bits, l.buckets, scales);
    }
    const int64_t words = l.buckets * l.words_full;
    with_bits(l.bits, [&](auto bits) {
      encode_words_kernel<bits()><<<grid_for(words, kThreads), kThreads, 0, s>>>(a.in, a.residual, l, a.key, a.out);
    });
    CUDA_CHECK(cudaGetLastError());
  }
  check_status(ctx, status, [n = a.n](const EncodeStatus& done) {
    if (done.non_finite)
      throw NonFiniteInputError(fmt::format("qsgd encode: the input of {} values holds NaN or Inf", n));
    if (done.overflow)
      throw NonFiniteInputError(
          fmt::format("qsgd encode: a bucket of the {} values has an l2 norm beyond the float range", n));
  });
}

void qsgd_decode_cuda(Context& ctx, const wire::QsgdLayout& l, const uint8_t* payload, float* out, bool add) {
  if (l.n == 0) return;
  constexpr int kThreads = 256;
  DecodeStatus status(ctx);
  check_scales_kernel<<<grid_for(l.buckets, kThreads), kThreads, 0, stream_of(ctx)>>>(
      reinterpret_cast<const float*>(payload + wire::kHeaderBytes), l.buckets, status.get());
  CUDA_CHECK(cudaGetLastError());
  check_status(ctx, status.get(), [](const EncodeStatus& done) {
    if (done.bad) wire::bad_payload(QuantMethod::qsgd, "a bucket scale is not a finite value >= 0");
  });
  with_bits(l.bits, [&](auto bits) {
    if (add)
      decode_kernel<bits(), true><<<grid_for(l.n, kThreads), kThreads, 0, stream_of(ctx)>>>(payload, l, out);
    else
      decode_kernel<bits(), false><<<grid_for(l.n, kThreads), kThreads, 0, stream_of(ctx)>>>(payload, l, out);
  });
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace qtrain::quant_detail
