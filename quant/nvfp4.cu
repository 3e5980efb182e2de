// nvfp4 kernels: max|v| (an integer max of the float bits, quant/minifloat.cuh), then per block of 16
// values the block's max, E4M3 scale, E2M1 codes, residual and 8 packed bytes with nvfp4.cpp's
// arithmetic (quant/minifloat.h); thread 0 writes the header with the tensor scale. The second pass
// streams (cuda_common.cuh): four consecutive lanes take a block, a float4 each; their max is two
// shuffles, and lanes 0-1 store its packed bytes as two 32-bit words. A last block shorter than 16
// values, and spans not 16-byte aligned, take one thread per block. Decode checks the block scales
// and the last nibble in a kernel before the decoding kernel writes.
#include <cfloat>

#include "quant/minifloat.cuh"
#include "quant/minifloat.h"
#include "quant/nvfp4_cuda.h"
#include "quant/nvfp4_wire.h"

namespace qtrain::quant_detail {
namespace {

constexpr int64_t kBlock = wire::kNvfp4Block;

// The tensor scale of max_bits, and the header (with it) from thread 0 of block 0.
__device__ __forceinline__ float tensor_scale_and_header(uint32_t max_bits, uint8_t* out, WireHeaderFields h,
                                                         EncodeStatus* status) {
  const float t = bits_float(max_bits) / kNvfp4TensorDivisor;
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    h.b = float_bits(t);
    store_header(out, h);
    if (!(6.0f * nvfp4_decode_scale(FloatE4M3::kMaxCode, t) <= FLT_MAX)) atomicOr(&status->overflow, 1u);
  }
  return t;
}

// Block b by one thread (its 64 contiguous input bytes): reads 4 bytes per value (8 with a residual),
// writes 1/2 + 1/16 (+ 4).
template <bool Sr>
__device__ __forceinline__ void encode_block(const float* __restrict__ in, float* __restrict__ residual,
                                             const wire::Nvfp4Layout& l, int64_t b, uint32_t tensor_max, float t,
                                             PhiloxKey key, uint8_t* __restrict__ out) {
  const int64_t len = l.len(b), first = b * kBlock;
  uint32_t m = 0;
  for (int64_t j = 0; j < len; ++j) {
    const uint32_t x = abs_bits(residual ? in[first + j] + residual[first + j] : in[first + j]);
    m = x > m ? x : m;
  }
  const uint32_t sc = nvfp4_block_scale_code(m, tensor_max);
  out[l.scales_offset + b] = static_cast<uint8_t>(sc);
  const float d = nvfp4_decode_scale(sc, t);
  const float inv = inverse_scale(float_bits(d), 1.0f);
  uint8_t codes[kBlock];
  for (int64_t j = 0; j < kBlock; ++j) codes[j] = 0;
  for (int64_t j = 0; j < len; ++j) {
    const int64_t i = first + j;
    const float v = residual ? in[i] + residual[i] : in[i];
    const uint32_t code =
        minifloat_code<FloatE2M1, Sr>(v, inv, Sr ? float_round_word(key, static_cast<uint64_t>(i)) : 0u);
    codes[j] = static_cast<uint8_t>(code);
    if (residual) residual[i] = v - minifloat_value<FloatE2M1>(code) * d;
  }
  pack_block<4, kBlock>(codes, len, out + wire::kHeaderBytes + first / 2);  // codes past the end are zero
}

// One thread per block: spans not 16-byte aligned.
template <bool Sr>
__global__ void encode_kernel(const float* __restrict__ in, float* __restrict__ residual, wire::Nvfp4Layout l,
                              const uint32_t* max_bits_ptr, PhiloxKey key, uint8_t* __restrict__ out,
                              WireHeaderFields h, EncodeStatus* status) {
  const uint32_t tensor_max = *max_bits_ptr;
  const float t = tensor_scale_and_header(tensor_max, out, h, status);
  for (int64_t b = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; b < l.blocks;
       b += static_cast<int64_t>(gridDim.x) * blockDim.x)
    encode_block<Sr>(in, residual, l, b, tensor_max, t, key, out);
}

// The whole blocks, streamed: lane group of 4 = one block, float4 v = values 4v .. 4v + 3 of block
// v / 4 (every lane runs the shuffles; lanes past the end only skip their stores). The last block, if
// shorter than 16 values, by thread 0 of block 0 afterwards.
template <bool Sr, bool Ef>
__global__ void __launch_bounds__(kStreamThreads)
    encode_vec_kernel(const float* __restrict__ in, float* __restrict__ residual, wire::Nvfp4Layout l,
                      const uint32_t* max_bits_ptr, PhiloxKey key, uint8_t* __restrict__ out, WireHeaderFields h,
                      EncodeStatus* status) {
  const uint32_t tensor_max = *max_bits_ptr;
  const float t = tensor_scale_and_header(tensor_max, out, h, status);
  const int64_t full = l.n / kBlock, vecs = full * (kBlock / 4);
  const int sub = static_cast<int>(threadIdx.x % 4);                    // which float4 of its block
  auto* words = reinterpret_cast<uint32_t*>(out + wire::kHeaderBytes);  // two per block
  for (int64_t tile = blockIdx.x; tile * kTileVecs < vecs; tile += gridDim.x) {
    const int64_t v0 = tile * kTileVecs + threadIdx.x;
    float4 x[kStreamUnroll];
    load_tile<Ef>(in, residual, v0, vecs, x);
    QT_UNROLL
    for (int k = 0; k < kStreamUnroll; ++k) {
      const int64_t v = v0 + k * kStreamThreads, b = v / 4;
      uint32_t m = max4_abs_bits(x[k]);
      for (int off = 2; off >= 1; off /= 2) {
        const uint32_t y = __shfl_xor_sync(kFullMask, m, off);
        m = y > m ? y : m;
      }
      const uint32_t sc = nvfp4_block_scale_code(m, tensor_max);
      const float d = nvfp4_decode_scale(sc, t);
      const float inv = inverse_scale(float_bits(d), 1.0f);
      const float a[4] = {x[k].x, x[k].y, x[k].z, x[k].w};
      const PhiloxBlock r = Sr ? float_round_words(key, v) : PhiloxBlock{};
      uint32_t bytes = 0;
      float res[4];
      QT_UNROLL
      for (int j = 0; j < 4; ++j) {
        const uint32_t code = minifloat_code<FloatE2M1, Sr>(a[j], inv, Sr ? r.v[j] : 0u);
        bytes |= code << (8 * j);
        res[j] = a[j] - minifloat_value<FloatE2M1>(code) * d;
      }
      // Byte j of the block = code j | code j + 8 << 4: lane sub < 2 joins lane sub + 2's codes.
      const uint32_t high = __shfl_down_sync(kFullMask, bytes, 2);
      if (v < vecs) {
        if (sub < 2) words[2 * b + sub] = bytes | (high << 4);
        if (sub == 0) out[l.scales_offset + b] = static_cast<uint8_t>(sc);
        if (Ef) store4(residual, v, make_float4(res[0], res[1], res[2], res[3]));
      }
    }
  }
  if (blockIdx.x == 0 && threadIdx.x == 0 && full < l.blocks)
    encode_block<Sr>(in, Ef ? residual : nullptr, l, full, tensor_max, t, key, out);
}

// The block scales (positive E4M3), the nibble after an odd last element, and the tensor scale of
// header field b (read on the device, Quantizer::header_b_from_data(); nvfp4.cpp's check_body on the
// host): finite, >= 0, and small enough that the largest value is a float.
__device__ __forceinline__ bool bad_tensor_scale_or_pad(const uint8_t* __restrict__ payload,
                                                        const wire::Nvfp4Layout& l) {
  const uint32_t t = header_field_b(payload);
  return t >= kNonFinite || !(6.0f * nvfp4_decode_scale(FloatE4M3::kMaxCode, bits_float(t)) <= FLT_MAX) ||
         (l.n % 2 == 1 && (payload[l.scales_offset - 1] >> 4) != 0);
}
__device__ __forceinline__ bool bad_block_scale(uint8_t code) { return code > FloatE4M3::kMaxCode; }

__global__ void check_kernel(const uint8_t* __restrict__ payload, wire::Nvfp4Layout l, EncodeStatus* status) {
  const int64_t first = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (first == 0 && bad_tensor_scale_or_pad(payload, l)) atomicOr(&status->bad, 1u);
  for (int64_t b = first; b < l.blocks; b += static_cast<int64_t>(gridDim.x) * blockDim.x)
    if (bad_block_scale(payload[l.scales_offset + b])) atomicOr(&status->bad, 1u);
}

// `bad` collects check_kernel's test of the block scale read (with a status, see decode_kernel).
__device__ __forceinline__ float decode_value(const uint8_t* __restrict__ payload, const wire::Nvfp4Layout& l, float t,
                                              int64_t i, bool& bad) {
  const int64_t b = i / kBlock;
  const uint32_t code = packed_code_at<4>(payload + wire::kHeaderBytes + b * kBlock / 2, l.len(b), i - b * kBlock);
  bad |= bad_block_scale(payload[l.scales_offset + b]);
  return minifloat_value<FloatE2M1>(code) * nvfp4_decode_scale(payload[l.scales_offset + b], t);
}

// One thread per value (reads 1/2 + 1/16 bytes per value, + 4 with Add; writes 4): outputs not
// 16-byte aligned. With a status (decoder_checks: under DeferredChecks) the decoders make
// check_kernel's tests on what they read instead of a launch of their own.
template <bool Add>
__global__ void decode_kernel(const uint8_t* __restrict__ payload, wire::Nvfp4Layout l, float* __restrict__ out,
                              EncodeStatus* status, HeaderCheck header) {
  check_header_in_kernel(header);
  const float t = bits_float(header_field_b(payload));
  const int64_t first = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  bool bad = status && first == 0 && bad_tensor_scale_or_pad(payload, l);
  for (int64_t i = first; i < l.n; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float y = decode_value(payload, l, t, i, bad);
    out[i] = Add ? out[i] + y : y;
  }
  if (status && bad) atomicOr(&status->bad, 1u);
}

// The same values, streamed: float4 v of the output from the low (sub < 2) or high nibbles of one
// 32-bit word of its block; a last block shorter than 16 values one value per thread of block 0.
template <bool Add>
__global__ void __launch_bounds__(kStreamThreads)
    decode_vec_kernel(const uint8_t* __restrict__ payload, wire::Nvfp4Layout l, float* __restrict__ out,
                      EncodeStatus* status, HeaderCheck header) {
  check_header_in_kernel(header);
  const float t = bits_float(header_field_b(payload));
  bool bad = status && blockIdx.x == 0 && threadIdx.x == 0 && bad_tensor_scale_or_pad(payload, l);
  const int64_t full = l.n / kBlock, vecs = full * (kBlock / 4);
  const int sub = static_cast<int>(threadIdx.x % 4);
  const auto* words = reinterpret_cast<const uint32_t*>(payload + wire::kHeaderBytes);
  for (int64_t tile = blockIdx.x; tile * kTileVecs < vecs; tile += gridDim.x) {
    const int64_t v0 = tile * kTileVecs + threadIdx.x;
    uint32_t c[kStreamUnroll];
    float d[kStreamUnroll];
    float4 acc[kStreamUnroll];
    QT_UNROLL
    for (int k = 0; k < kStreamUnroll; ++k) {
      const int64_t v = v0 + k * kStreamThreads, b = v / 4;
      c[k] = 0;
      d[k] = 0.0f;
      acc[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (v >= vecs) continue;
      c[k] = (words[2 * b + sub % 2] >> (sub < 2 ? 0 : 4)) & 0x0f0f0f0fu;
      bad |= bad_block_scale(payload[l.scales_offset + b]);
      d[k] = nvfp4_decode_scale(payload[l.scales_offset + b], t);
      if (Add) acc[k] = load4(out, v);
    }
    QT_UNROLL
    for (int k = 0; k < kStreamUnroll; ++k) {
      const int64_t v = v0 + k * kStreamThreads;
      if (v >= vecs) break;
      float y[4];
      QT_UNROLL
      for (int j = 0; j < 4; ++j) y[j] = minifloat_value<FloatE2M1>((c[k] >> (8 * j)) & 0xfu) * d[k];
      store_decoded<Add>(out, v, acc[k], y);
    }
  }
  if (blockIdx.x == 0)
    for (int64_t i = full * kBlock + threadIdx.x; i < l.n; i += blockDim.x) {
      const float y = decode_value(payload, l, t, i, bad);
      out[i] = Add ? out[i] + y : y;
    }
  if (status && bad) atomicOr(&status->bad, 1u);
}

}  // namespace

void nvfp4_encode_cuda(Context& ctx, const EncodeArgs& a, bool stochastic, const wire::Nvfp4Layout& l,
                       const WireHeader& h) {
  Carver carver(a.state->workspace(ctx.device(), 1024));
  EncodeStatus* status = fresh_status(ctx, carver);
  auto* max_bits = carver.take<uint32_t>(1);
  launch_span_max_bits(ctx, a.in, a.residual, a.n, max_bits, status);
  constexpr int kThreads = 128;
  cudaStream_t s = stream_of(ctx);
  if (aligned_to(a.in, 16) && aligned_to(a.residual, 16)) {
    const int grid = stream_grid(l.n / kBlock * (kBlock / 4));  // at least one block, for the header
    if (stochastic && a.residual)
      encode_vec_kernel<true, true>
          <<<grid, kStreamThreads, 0, s>>>(a.in, a.residual, l, max_bits, a.key, a.out, fields_of(h), status);
    else if (stochastic)
      encode_vec_kernel<true, false>
          <<<grid, kStreamThreads, 0, s>>>(a.in, a.residual, l, max_bits, a.key, a.out, fields_of(h), status);
    else if (a.residual)
      encode_vec_kernel<false, true>
          <<<grid, kStreamThreads, 0, s>>>(a.in, a.residual, l, max_bits, a.key, a.out, fields_of(h), status);
    else
      encode_vec_kernel<false, false>
          <<<grid, kStreamThreads, 0, s>>>(a.in, a.residual, l, max_bits, a.key, a.out, fields_of(h), status);
  } else {
    // At least one thread runs, for the header.
    const int grid = grid_for(l.blocks > 0 ? l.blocks : 1, kThreads);
    if (stochastic)
      encode_kernel<true><<<grid, kThreads, 0, s>>>(a.in, a.residual, l, max_bits, a.key, a.out, fields_of(h), status);
    else
      encode_kernel<false><<<grid, kThreads, 0, s>>>(a.in, a.residual, l, max_bits, a.key, a.out, fields_of(h), status);
  }
  CUDA_CHECK(cudaGetLastError());
  check_status(ctx, status, [n = a.n](const EncodeStatus& done) {
    if (done.non_finite)
      throw NonFiniteInputError(fmt::format("nvfp4 encode: the input of {} values holds NaN or Inf", n));
    if (done.overflow)
      throw NonFiniteInputError(
          "nvfp4 encode: the largest |value| is too close to the float maximum to scale (its "
          "decoded value would be beyond the float range)");
  });
}

void nvfp4_decode_cuda(Context& ctx, const wire::Nvfp4Layout& l, const uint8_t* payload, float* out, bool add) {
  if (l.n == 0) return;
  constexpr int kThreads = 256;
  DecodeStatus status(ctx);
  EncodeStatus* in_decoder = decoder_checks(
      ctx, status,
      [&](EncodeStatus* st) {
        check_kernel<<<grid_for(l.blocks, kThreads), kThreads, 0, stream_of(ctx)>>>(payload, l, st);
      },
      [](const EncodeStatus& done) {
        if (done.bad)
          wire::bad_payload(QuantMethod::nvfp4,
                            "a block scale is not a positive E4M3 value (sign 0, not NaN), the nibble "
                            "after the last element is set, or the tensor scale is not a finite float >= 0 "
                            "that keeps the largest value finite");
      });
  const HeaderCheck header = take_header_check(ctx);  // made by the decode kernel
  cudaStream_t s = stream_of(ctx);
  if (aligned_to(out, 16)) {
    const int grid = stream_grid(l.n / kBlock * (kBlock / 4));
    if (add)
      decode_vec_kernel<true><<<grid, kStreamThreads, 0, s>>>(payload, l, out, in_decoder, header);
    else
      decode_vec_kernel<false><<<grid, kStreamThreads, 0, s>>>(payload, l, out, in_decoder, header);
  } else if (add) {
    decode_kernel<true><<<grid_for(l.n, kThreads), kThreads, 0, s>>>(payload, l, out, in_decoder, header);
  } else {
    decode_kernel<false><<<grid_for(l.n, kThreads), kThreads, 0, s>>>(payload, l, out, in_decoder, header);
  }
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace qtrain::quant_detail
