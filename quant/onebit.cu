// onebit kernels: per-group masked sums in the deterministic order (quant/cuda_common.cuh), the two
// means written straight into the payload, then the sign words (bit j = value 32w + j >= 0, LSB first)
// and the residual as onebit.cpp updates it. Pack and decode stream (cuda_common.cuh): float4 loads
// of input and residual, eight lanes per word joined by shuffles, float4 stores of decoded values;
// spans not 16-byte aligned and groups that split a word (pack: no multiple of 32) or a float4
// (decode: no multiple of 4) take one warp per word (a ballot) or one thread per value. Per value the
// pack reads 4 bytes (8 with a residual) and writes 1/8 (+ 4); decode reads 1/8 (+ 4) and writes 4.
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

// Word `word` of group g by one warp (a ballot packs the bits, LSB first), its residuals updated.
__device__ __forceinline__ void pack_word(const float* __restrict__ in, float* __restrict__ residual, int64_t n,
                                          int64_t group, size_t group_bytes, uint8_t* __restrict__ out, int64_t g,
                                          int64_t word) {
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  const int64_t start = g * group;
  const int64_t len = n - start < group ? n - start : group;
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

// One warp per word of 32 values of a group: spans not 16-byte aligned, groups no multiple of 32.
__global__ void pack_kernel(const float* __restrict__ in, float* __restrict__ residual, int64_t n, int64_t group,
                            int64_t groups, int64_t words_full, size_t group_bytes, uint8_t* __restrict__ out) {
  const int64_t warps_per_block = blockDim.x / kWarp;
  const int64_t stride = warps_per_block * gridDim.x;
  for (int64_t w = blockIdx.x * warps_per_block + threadIdx.x / kWarp; w < groups * words_full; w += stride) {
    const int64_t g = w / words_full, word = w % words_full;
    const int64_t len = n - g * group < group ? n - g * group : group;
    if (32 * word >= len) continue;  // the last group has fewer words (warp-uniform)
    pack_word(in, residual, n, group, group_bytes, out, g, word);
  }
}

// The vector kernels' words (pack) and float4s (decode) stay in one group.
inline bool pack_vec_fits(const wire::OnebitLayout& l) { return l.group % 32 == 0 || l.groups == 1; }
inline bool decode_vec_fits(const wire::OnebitLayout& l) { return l.group % 4 == 0 || l.groups == 1; }

// The whole words, streamed: float4 v = values 4v .. 4v + 3 of the span's word v / 8 (groups are whole
// words), eight lanes per word (their nibbles joined by shuffles), the group's means read per float4.
// The last word, if partial, by warp 0 of block 0.
template <bool Ef>
__global__ void __launch_bounds__(kStreamThreads)
    pack_vec_kernel(const float* __restrict__ in, float* __restrict__ residual, int64_t n, int64_t group,
                    size_t group_bytes, uint8_t* __restrict__ out) {
  const int64_t full = n / 32, vecs = full * 8;
  for (int64_t tile = blockIdx.x; tile * kTileVecs < vecs; tile += gridDim.x) {
    const int64_t v0 = tile * kTileVecs + threadIdx.x;
    float4 x[kStreamUnroll];
    load_tile<Ef>(in, residual, v0, vecs, x);
    QT_UNROLL
    for (int k = 0; k < kStreamUnroll; ++k) {  // every lane runs the shuffles
      const int64_t v = v0 + k * kStreamThreads;
      const bool valid = v < vecs;
      const int64_t i0 = valid ? 4 * v : 0;
      const int64_t g = i0 / group, o = i0 - g * group;
      uint8_t* p = out + wire::kHeaderBytes + static_cast<size_t>(g) * group_bytes;
      const uint32_t word = sign_word_of_group(nonnegative_bits4(x[k]));
      if (valid && threadIdx.x % 8 == 0) reinterpret_cast<uint32_t*>(p + 8)[o / 32] = word;
      if (Ef && valid) {
        const float m0 = reinterpret_cast<const float*>(p)[0], m1 = reinterpret_cast<const float*>(p)[1];
        const float4 y = x[k];
        store4(residual, v,
               make_float4(y.x - (y.x < 0.0f ? m0 : m1), y.y - (y.y < 0.0f ? m0 : m1), y.z - (y.z < 0.0f ? m0 : m1),
                           y.w - (y.w < 0.0f ? m0 : m1)));
      }
    }
  }
  if (blockIdx.x == 0 && threadIdx.x < kWarp && 32 * full < n) {
    const int64_t g = 32 * full / group;
    pack_word(in, Ef ? residual : nullptr, n, group, group_bytes, out, g, (32 * full - g * group) / 32);
  }
}

// Whether group g's means are not finite (onebit.cpp's check on the host).
__device__ __forceinline__ bool bad_means(const uint8_t* __restrict__ payload, int64_t g, size_t group_bytes) {
  const float* means =
      reinterpret_cast<const float*>(payload + wire::kHeaderBytes + static_cast<size_t>(g) * group_bytes);
  return abs_bits(means[0]) >= kNonFinite || abs_bits(means[1]) >= kNonFinite;
}

// The checks in a kernel of their own, before the decode (decoder_checks: no DeferredChecks scope).
__global__ void check_means_kernel(const uint8_t* __restrict__ payload, int64_t groups, size_t group_bytes,
                                   EncodeStatus* status) {
  for (int64_t g = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; g < groups;
       g += static_cast<int64_t>(gridDim.x) * blockDim.x)
    if (bad_means(payload, g, group_bytes)) atomicOr(&status->bad, 1u);
}

// Value i: its group's mean of its sign.
__device__ __forceinline__ float decode_value(const uint8_t* __restrict__ payload, int64_t group, size_t group_bytes,
                                              int64_t i) {
  const int64_t g = i / group, o = i - g * group;
  const uint8_t* p = payload + wire::kHeaderBytes + static_cast<size_t>(g) * group_bytes;
  const float* means = reinterpret_cast<const float*>(p);
  const uint32_t word = reinterpret_cast<const uint32_t*>(p + 8)[o / 32];
  return (word >> (o % 32)) & 1u ? means[1] : means[0];
}

// One thread per value: outputs not 16-byte aligned, groups no multiple of 4.
template <bool Add>
// With a status (decoder_checks, under DeferredChecks) the thread of each group's first value checks
// the group's means.
__global__ void decode_kernel(const uint8_t* __restrict__ payload, int64_t n, int64_t group, size_t group_bytes,
                              float* __restrict__ out, EncodeStatus* status, HeaderCheck header) {
  check_header_in_kernel(header);
  bool bad = false;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = decode_value(payload, group, group_bytes, i);
    if (status != nullptr && i % group == 0) bad = bad || bad_means(payload, i / group, group_bytes);
    out[i] = Add ? out[i] + v : v;
  }
  if (bad) atomicOr(&status->bad, 1u);
}

// The same values, streamed: float4 v of the output from four bits of one word and its group's means;
// the n % 4 last values one per thread of block 0.
template <bool Add>
__global__ void __launch_bounds__(kStreamThreads)
    decode_vec_kernel(const uint8_t* __restrict__ payload, int64_t n, int64_t group, size_t group_bytes,
                      float* __restrict__ out, EncodeStatus* status, HeaderCheck header) {
  check_header_in_kernel(header);
  bool bad = false;  // with a status: the means of the groups whose first value this thread decodes
  const int64_t vecs = n / 4;
  for (int64_t tile = blockIdx.x; tile * kTileVecs < vecs; tile += gridDim.x) {
    const int64_t v0 = tile * kTileVecs + threadIdx.x;
    uint32_t bits[kStreamUnroll];
    float m0[kStreamUnroll], m1[kStreamUnroll];
    float4 acc[kStreamUnroll];
    QT_UNROLL
    for (int k = 0; k < kStreamUnroll; ++k) {
      const int64_t v = v0 + k * kStreamThreads;
      bits[k] = 0;
      m0[k] = m1[k] = 0.0f;
      acc[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (v >= vecs) continue;
      const int64_t g = 4 * v / group, o = 4 * v - g * group;
      const uint8_t* p = payload + wire::kHeaderBytes + static_cast<size_t>(g) * group_bytes;
      bits[k] = reinterpret_cast<const uint32_t*>(p + 8)[o / 32] >> (o % 32);
      m0[k] = reinterpret_cast<const float*>(p)[0];
      m1[k] = reinterpret_cast<const float*>(p)[1];
      if (status != nullptr && o == 0) bad = bad || bad_means(payload, g, group_bytes);
      if (Add) acc[k] = load4(out, v);
    }
    QT_UNROLL
    for (int k = 0; k < kStreamUnroll; ++k) {
      const int64_t v = v0 + k * kStreamThreads;
      if (v >= vecs) break;
      const float y0 = bits[k] & 1u ? m1[k] : m0[k], y1 = bits[k] & 2u ? m1[k] : m0[k];
      const float y2 = bits[k] & 4u ? m1[k] : m0[k], y3 = bits[k] & 8u ? m1[k] : m0[k];
      store4(
          out, v,
          Add ? make_float4(acc[k].x + y0, acc[k].y + y1, acc[k].z + y2, acc[k].w + y3) : make_float4(y0, y1, y2, y3));
    }
  }
  if (blockIdx.x == 0)
    for (int64_t i = 4 * vecs + threadIdx.x; i < n; i += blockDim.x) {
      const float v = decode_value(payload, group, group_bytes, i);
      if (status != nullptr && i % group == 0) bad = bad || bad_means(payload, i / group, group_bytes);
      out[i] = Add ? out[i] + v : v;
    }
  if (bad) atomicOr(&status->bad, 1u);
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
    cudaStream_t s = stream_of(ctx);
    if (aligned_to(a.in, 16) && aligned_to(a.residual, 16) && pack_vec_fits(l)) {
      const int grid = stream_grid(l.n / 32 * 8);
      if (a.residual)
        pack_vec_kernel<true><<<grid, kStreamThreads, 0, s>>>(a.in, a.residual, l.n, l.group, l.group_bytes, a.out);
      else
        pack_vec_kernel<false><<<grid, kStreamThreads, 0, s>>>(a.in, nullptr, l.n, l.group, l.group_bytes, a.out);
    } else {
      pack_kernel<<<grid_for(words * kWarp, kThreads), kThreads, 0, s>>>(a.in, a.residual, l.n, l.group, l.groups,
                                                                         l.words_full, l.group_bytes, a.out);
    }
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
  EncodeStatus* in_decoder = decoder_checks(
      ctx, status,
      [&](EncodeStatus* st) {
        check_means_kernel<<<grid_for(l.groups, kThreads), kThreads, 0, stream_of(ctx)>>>(payload, l.groups,
                                                                                          l.group_bytes, st);
      },
      [](const EncodeStatus& done) {
        if (done.bad) wire::bad_payload(QuantMethod::onebit, "a group has a non-finite mean");
      });
  const HeaderCheck header = take_header_check(ctx);  // made by the decode kernel
  cudaStream_t s = stream_of(ctx);
  if (aligned_to(out, 16) && decode_vec_fits(l)) {
    const int grid = stream_grid(l.n / 4);
    if (add)
      decode_vec_kernel<true>
          <<<grid, kStreamThreads, 0, s>>>(payload, l.n, l.group, l.group_bytes, out, in_decoder, header);
    else
      decode_vec_kernel<false>
          <<<grid, kStreamThreads, 0, s>>>(payload, l.n, l.group, l.group_bytes, out, in_decoder, header);
  } else if (add) {
    decode_kernel<true>
        <<<grid_for(l.n, kThreads), kThreads, 0, s>>>(payload, l.n, l.group, l.group_bytes, out, in_decoder, header);
  } else {
    decode_kernel<false>
        <<<grid_for(l.n, kThreads), kThreads, 0, s>>>(payload, l.n, l.group, l.group_bytes, out, in_decoder, header);
  }
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace qtrain::quant_detail
