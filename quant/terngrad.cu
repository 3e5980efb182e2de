// terngrad kernels: per-bucket max (integer max of float bits, order-free; the header written by the
// same launch); with clipping, the mean and the sum of squares of v / max in the deterministic order
// (quant/cuda_common.cuh's group sums, two passes, each one launch) and the scale of
// quant/numerics.h; then one thread per 32-bit word of 16 codes, each drawn with terngrad_code
// exactly as terngrad.cpp does, updating the residual. 2 launches per encode without clipping, 4 with
// (each pass needs the previous one's result over the whole bucket: max, mean, squares, codes).
// Decode: one launch under DeferredChecks (the kernel tests the words and scales it reads).
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

// One thread per word of 16 codes. With max_bits (no clipping) the scales are the maxima, which the
// thread of each bucket's first word writes into the payload (no kernel of their own); else they are
// in the payload already.
__global__ void encode_words_kernel(const float* __restrict__ in, float* __restrict__ residual, wire::QsgdLayout l,
                                    PhiloxKey key, const uint32_t* max_bits, uint8_t* __restrict__ out) {
  float* scales = reinterpret_cast<float*>(out + wire::kHeaderBytes);
  const int64_t words = l.buckets * l.words_full;
  for (int64_t w = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; w < words;
       w += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t b = w / l.words_full, word = w % l.words_full;
    const int64_t len = l.len(b);
    if (word * 16 >= len) continue;  // the last bucket has fewer words
    const float s = max_bits != nullptr ? bits_float(max_bits[b]) : scales[b];
    if (max_bits != nullptr && word == 0) scales[b] = s;
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

// What the decoders check (terngrad.cpp's decode_cpu): a bucket's scale finite and >= 0, and no code
// 2 in a word of its codes.
__device__ __forceinline__ bool bad_scale(float scale) { return float_bits(scale) >= kNonFinite; }

// The checks in a kernel of their own, before the decode (decoder_checks: no DeferredChecks scope).
__global__ void check_kernel(const uint8_t* __restrict__ payload, wire::QsgdLayout l, EncodeStatus* status) {
  const float* scales = reinterpret_cast<const float*>(payload + wire::kHeaderBytes);
  const int64_t words = l.buckets * l.words_full;
  for (int64_t w = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; w < words;
       w += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t b = w / l.words_full, word = w % l.words_full;
    if (word == 0 && bad_scale(scales[b])) atomicOr(&status->bad, 1u);
    if (word * 16 >= l.len(b)) continue;
    if (terngrad_bad_codes(reinterpret_cast<const uint32_t*>(payload + l.words_offset(b))[word]))
      atomicOr(&status->bad, 1u);
  }
}

// With a status (decoder_checks, under DeferredChecks), the thread of each word's first value tests
// the word and its bucket's scale: every word that holds a value, every bucket, as check_kernel.
template <bool Add>
__global__ void decode_kernel(const uint8_t* __restrict__ payload, wire::QsgdLayout l, float* __restrict__ out,
                              EncodeStatus* status, HeaderCheck header) {
  check_header_in_kernel(header);
  const float* scales = reinterpret_cast<const float*>(payload + wire::kHeaderBytes);
  bool bad = false;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < l.n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t b = i / l.bucket, o = i - b * l.bucket;
    const uint32_t word = reinterpret_cast<const uint32_t*>(payload + l.words_offset(b))[o / 16];
    if (o % 16 == 0) bad |= bad_scale(scales[b]) || terngrad_bad_codes(word);
    const uint32_t code = (word >> (2 * (o % 16))) & 3u;
    const float v = code == 0 ? 0.0f : (code == 1 ? scales[b] : -scales[b]);
    out[i] = Add ? out[i] + v : v;
  }
  if (status && bad) atomicOr(&status->bad, 1u);
}

}  // namespace

void terngrad_encode_cuda(Context& ctx, const EncodeArgs& a, const wire::QsgdLayout& l, float clip,
                          const WireHeader& h) {
  const size_t need = 256 + 2 * Carver::bytes<uint32_t>(static_cast<size_t>(l.buckets)) +
                      Carver::bytes<unsigned int>(1) + group_sums_bytes(l.n, l.bucket);
  Carver carver(a.state->workspace(ctx.device(), need));
  EncodeStatus* status = fresh_status(ctx, carver);
  auto* max_bits = carver.take<uint32_t>(static_cast<size_t>(l.buckets));
  auto* means = carver.take<float>(static_cast<size_t>(l.buckets));
  auto* arrived = carver.take<unsigned int>(1);
  cudaStream_t s = stream_of(ctx);
  if (l.buckets > 0 && l.n > 0) {
    // The max pass writes the header and zeroes the sums' arrival counter; with clipping the mean
    // and the centered squares are one launch each (their chunk sums folded by the last block, where
    // the buckets are few), and StoreScale writes the scales; without, the code kernel writes them.
    constexpr int kThreads = 256;
    MaxPassExtras extras;
    extras.header_out = a.out;
    extras.header = fields_of(h);
    extras.zero = arrived;
    extras.zero_count = 1;
    cuda_bucket_max_bits(ctx, a.in, a.residual, l.n, l.bucket, l.buckets, max_bits, status, extras);
    auto* scales = reinterpret_cast<float*>(a.out + wire::kHeaderBytes);
    if (clip != 0.0f) {
      // Buckets whose max is below FLT_MIN sum zeros here; terngrad_scale gives them their max.
      const GroupSumsPlan plan = with_arrival_counter(make_group_sums_plan(carver, l.n, l.bucket, status), arrived);
      launch_group_sums(ctx, plan, ScaledValues{a.in, a.residual, max_bits}, StoreMean{l.n, l.bucket, means});
      launch_group_sums(ctx, plan, CenteredSquares{a.in, a.residual, max_bits, means},
                        StoreScale{l.n, l.bucket, clip, max_bits, scales});
    }
    const int64_t words = l.buckets * l.words_full;
    encode_words_kernel<<<grid_for(words, kThreads), kThreads, 0, s>>>(a.in, a.residual, l, a.key,
                                                                       clip != 0.0f ? nullptr : max_bits, a.out);
    CUDA_CHECK(cudaGetLastError());
  } else {
    cuda_write_header(ctx, a.out, h);
  }
  check_status(ctx, status, [n = a.n](const EncodeStatus& done) {
    if (done.non_finite)
      throw NonFiniteInputError(fmt::format("terngrad encode: the input of {} values holds NaN or Inf", n));
  });
}

void terngrad_decode_cuda(Context& ctx, const wire::QsgdLayout& l, const uint8_t* payload, float* out, bool add) {
  if (l.n == 0) return;
  constexpr int kThreads = 256;
  cudaStream_t s = stream_of(ctx);
  DecodeStatus status(ctx);
  EncodeStatus* in_decoder = decoder_checks(
      ctx, status,
      [&](EncodeStatus* st) {
        check_kernel<<<grid_for(l.buckets * l.words_full, kThreads), kThreads, 0, s>>>(payload, l, st);
      },
      [](const EncodeStatus& done) {
        if (done.bad)
          wire::bad_payload(QuantMethod::terngrad, "a bucket scale is not a finite value >= 0, or a word holds code 2");
      });
  const HeaderCheck header = take_header_check(ctx);  // made by the decode kernel
  if (add)
    decode_kernel<true><<<grid_for(l.n, kThreads), kThreads, 0, s>>>(payload, l, out, in_decoder, header);
  else
    decode_kernel<false><<<grid_for(l.n, kThreads), kThreads, 0, s>>>(payload, l, out, in_decoder, header);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace qtrain::quant_detail
