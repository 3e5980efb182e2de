// mx kernels: the block's max, E8M0 scale, codes, residual and packed bytes with mx.cpp's arithmetic
// (quant/minifloat.h), in one pass over the input. The header is known on the host. Streamed
// (cuda_common.cuh): eight consecutive lanes take a block of 32 values, a float4 each; their max is
// three shuffles, and the packed codes leave as 32-bit words (4 per lane at 8 bits, lanes 0-3 at 4
// bits, lanes 0-5 at 6 bits, the codes gathered by shuffles). A last block shorter than 32 values, and
// spans not 16-byte aligned, take one thread per block. Decode checks scales, elements and the last
// byte's unused bits in a kernel before the decoding kernel writes.
#include "quant/cuda_common.cuh"
#include "quant/minifloat.cuh"
#include "quant/minifloat.h"
#include "quant/mx_cuda.h"
#include "quant/mx_wire.h"

namespace qtrain::quant_detail {
namespace {

constexpr int64_t kBlock = wire::kMxBlock;

// Block b by one thread (its 128 contiguous input bytes): reads 4 bytes per value (8 with a
// residual), writes bits/8 + 1/32 (+ 4).
template <class F, bool Sr>
__device__ __forceinline__ void encode_block(const float* __restrict__ in, float* __restrict__ residual,
                                             const wire::MxLayout& l, int64_t b, PhiloxKey key,
                                             uint8_t* __restrict__ out, EncodeStatus* status) {
  constexpr int kBits = code_bits<F>();
  const int64_t len = l.len(b), first = b * kBlock;
  uint32_t m = 0;
  for (int64_t t = 0; t < len; ++t) {
    const uint32_t x = abs_bits(residual ? in[first + t] + residual[first + t] : in[first + t]);
    m = x > m ? x : m;
  }
  if (m >= kNonFinite) {
    atomicOr(&status->non_finite, 1u);
    return;
  }
  const uint32_t sc = mx_scale_code<F>(m);
  out[l.scales_offset + b] = static_cast<uint8_t>(sc);
  const int32_t x = static_cast<int32_t>(sc) - 127;
  const float inv = bits_float(static_cast<uint32_t>(127 - x) << 23);
  const float scale = pow2_float(x);
  uint8_t codes[kBlock];
  for (int64_t t = 0; t < kBlock; ++t) codes[t] = 0;
  for (int64_t t = 0; t < len; ++t) {
    const int64_t i = first + t;
    const float v = residual ? in[i] + residual[i] : in[i];
    const uint32_t code = minifloat_code<F, Sr>(v, inv, Sr ? float_round_word(key, static_cast<uint64_t>(i)) : 0u);
    codes[t] = static_cast<uint8_t>(code);
    if (residual) residual[i] = v - minifloat_value<F>(code) * scale;
  }
  pack_block<kBits, kBlock>(codes, len, out + l.elements_offset(b));  // codes past the end are zero
}

// One thread per block, blocks [first_block, l.blocks): every block of a span not 16-byte aligned.
template <class F, bool Sr>
__global__ void encode_kernel(const float* __restrict__ in, float* __restrict__ residual, wire::MxLayout l,
                              int64_t first_block, PhiloxKey key, uint8_t* __restrict__ out, EncodeStatus* status) {
  for (int64_t b = first_block + blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; b < l.blocks;
       b += static_cast<int64_t>(gridDim.x) * blockDim.x)
    encode_block<F, Sr>(in, residual, l, b, key, out, status);
}

// The whole blocks, streamed: lane group of 8 = one block, float4 v = values 4v .. 4v + 3 of block
// v / 8. Every lane runs every shuffle (a group past the end or with NaN/Inf only skips its stores).
// The last block, if shorter than 32 values, by thread 0 of block 0 afterwards.
template <class F, bool Sr, bool Ef>
__global__ void __launch_bounds__(kStreamThreads)
    encode_vec_kernel(const float* __restrict__ in, float* __restrict__ residual, wire::MxLayout l, PhiloxKey key,
                      uint8_t* __restrict__ out, EncodeStatus* status) {
  constexpr int kBits = code_bits<F>();
  static_assert(kStreamThreads % 8 == 0, "a block's 8 lanes stay in one warp");
  const int64_t full = l.n / kBlock, vecs = full * (kBlock / 4);
  const int sub = static_cast<int>(threadIdx.x % 8);  // which float4 of its block
  const int base = static_cast<int>(threadIdx.x % kWarp) - sub;
  bool bad = false;
  for (int64_t tile = blockIdx.x; tile * kTileVecs < vecs; tile += gridDim.x) {
    const int64_t v0 = tile * kTileVecs + threadIdx.x;
    float4 x[kStreamUnroll];
    load_tile<Ef>(in, residual, v0, vecs, x);
    QT_UNROLL
    for (int k = 0; k < kStreamUnroll; ++k) {
      const int64_t v = v0 + k * kStreamThreads, b = v / 8;
      uint32_t m = max4_abs_bits(x[k]);
      for (int off = 4; off >= 1; off /= 2) {
        const uint32_t y = __shfl_xor_sync(kFullMask, m, off);
        m = y > m ? y : m;
      }
      const bool finite = m < kNonFinite;
      bad |= v < vecs && !finite;
      const bool store = v < vecs && finite;
      const uint32_t sc = mx_scale_code<F>(finite ? m : 0u);
      const int32_t e = static_cast<int32_t>(sc) - 127;
      const float inv = bits_float(static_cast<uint32_t>(127 - e) << 23);
      const float scale = pow2_float(e);
      const float a[4] = {x[k].x, x[k].y, x[k].z, x[k].w};
      const PhiloxBlock r = Sr ? float_round_words(key, v) : PhiloxBlock{};
      uint32_t bytes = 0, w24 = 0;  // the four codes as bytes (8 and 4 bits), or 24 bits (6 bits)
      float res[4];
      QT_UNROLL
      for (int j = 0; j < 4; ++j) {
        const uint32_t code = minifloat_code<F, Sr>(a[j], inv, Sr ? r.v[j] : 0u);
        bytes |= code << (8 * j);
        w24 |= code << (6 * j);
        res[j] = a[j] - minifloat_value<F>(code) * scale;
      }
      uint8_t* elements = out + l.elements_offset(store ? b : 0);
      if (kBits == 8) {
        if (store) reinterpret_cast<uint32_t*>(elements)[sub] = bytes;
      } else if (kBits == 4) {
        // Byte j of the block = code j | code j + 16 << 4: lane sub < 4 joins lane sub + 4's codes.
        const uint32_t high = __shfl_down_sync(kFullMask, bytes, 4);
        if (store && sub < 4) reinterpret_cast<uint32_t*>(elements)[sub] = bytes | (high << 4);
      } else {
        // Code c at bits 6c of the block's 24 bytes: word q (q < 6) is bits 32q .. 32q + 31, which
        // start at bit o of lane a's 24 and end in lane a + 1's.
        const int a_lane = sub < 6 ? 4 * sub / 3 : 6, o = sub < 6 ? 32 * sub - 24 * a_lane : 0;
        const uint32_t lo = __shfl_sync(kFullMask, w24, base + a_lane);
        const uint32_t hi = __shfl_sync(kFullMask, w24, base + a_lane + 1);
        if (store && sub < 6) reinterpret_cast<uint32_t*>(elements)[sub] = (lo >> o) | (hi << (24 - o));
      }
      if (store && sub == 0) out[l.scales_offset + b] = static_cast<uint8_t>(sc);
      if (Ef && store) store4(residual, v, make_float4(res[0], res[1], res[2], res[3]));
    }
  }
  if (bad) atomicOr(&status->non_finite, 1u);
  if (blockIdx.x == 0 && threadIdx.x == 0 && full < l.blocks)
    encode_block<F, Sr>(in, Ef ? residual : nullptr, l, full, key, out, status);
}

// mx.cpp's check_values: scales at most 254 - emax (0xff is NaN), no NaN/Inf element, zero bits after
// the last element. Reads 1/32 byte per value (+ 1 at 8 bits: 32-bit words of four codes, whose
// offset 32 in a 4-byte aligned payload keeps them aligned).
template <class F>
__global__ void __launch_bounds__(kStreamThreads)
    check_kernel(const uint8_t* __restrict__ payload, wire::MxLayout l, EncodeStatus* status) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  bool bad = false;
  for (int64_t b = first; b < l.blocks; b += stride) bad |= payload[l.scales_offset + b] > 254 - F::kEmax;
  if (code_bits<F>() == 8) {
    const auto* words = reinterpret_cast<const uint32_t*>(payload + wire::kHeaderBytes);
    for (int64_t w = first; w < l.n / 4; w += stride) {
      QT_UNROLL
      for (int j = 0; j < 4; ++j) bad |= invalid_magnitude<F>((words[w] >> (8 * j)) & 0x7fu);
    }
    for (int64_t i = l.n / 4 * 4 + first; i < l.n; i += stride)
      bad |= invalid_magnitude<F>(payload[wire::kHeaderBytes + i] & 0x7fu);
  }
  const int64_t used_bits = l.n * l.bits % 8;
  if (first == 0 && used_bits != 0 && (payload[l.scales_offset - 1] >> used_bits) != 0) bad = true;
  if (bad) atomicOr(&status->bad, 1u);
}

// One value: block b's code t times the block's scale.
template <class F>
__device__ __forceinline__ float decode_value(const uint8_t* __restrict__ payload, const wire::MxLayout& l, int64_t i) {
  const int64_t b = i / kBlock;
  const uint32_t code = packed_code_at<code_bits<F>()>(payload + l.elements_offset(b), l.len(b), i - b * kBlock);
  const float scale = pow2_float(static_cast<int32_t>(payload[l.scales_offset + b]) - 127);
  return minifloat_value<F>(code) * scale;
}

// One thread per value (reads bits/8 + 1/32 bytes per value, + 4 with Add; writes 4): outputs not
// 16-byte aligned.
template <class F, bool Add>
__global__ void decode_kernel(const uint8_t* __restrict__ payload, wire::MxLayout l, float* __restrict__ out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < l.n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float y = decode_value<F>(payload, l, i);
    out[i] = Add ? out[i] + y : y;
  }
}

// The same values, streamed: float4 v of the output from its block's codes (8 bits: one 32-bit word;
// 4 bits: the low or high nibbles of one; 6 bits: three bytes), the values of a last block shorter
// than 32 one per thread of block 0.
template <class F, bool Add>
__global__ void __launch_bounds__(kStreamThreads)
    decode_vec_kernel(const uint8_t* __restrict__ payload, wire::MxLayout l, float* __restrict__ out) {
  constexpr int kBits = code_bits<F>();
  const int64_t full = l.n / kBlock, vecs = full * (kBlock / 4);
  const int sub = static_cast<int>(threadIdx.x % 8);
  for (int64_t tile = blockIdx.x; tile * kTileVecs < vecs; tile += gridDim.x) {
    const int64_t v0 = tile * kTileVecs + threadIdx.x;
    uint32_t c[kStreamUnroll];  // the float4's four codes as bytes
    float scale[kStreamUnroll];
    float4 acc[kStreamUnroll];
    QT_UNROLL
    for (int k = 0; k < kStreamUnroll; ++k) {
      const int64_t v = v0 + k * kStreamThreads, b = v / 8;
      c[k] = 0;
      scale[k] = 0.0f;
      acc[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (v >= vecs) continue;
      const uint8_t* elements = payload + l.elements_offset(b);
      if (kBits == 8) {
        c[k] = reinterpret_cast<const uint32_t*>(elements)[sub];
      } else if (kBits == 4) {
        c[k] = (reinterpret_cast<const uint32_t*>(elements)[sub % 4] >> (sub < 4 ? 0 : 4)) & 0x0f0f0f0fu;
      } else {
        const uint32_t w24 = uint32_t{elements[3 * sub]} | (uint32_t{elements[3 * sub + 1]} << 8) |
                             (uint32_t{elements[3 * sub + 2]} << 16);
        QT_UNROLL
        for (int j = 0; j < 4; ++j) c[k] |= ((w24 >> (6 * j)) & 0x3fu) << (8 * j);
      }
      scale[k] = pow2_float(static_cast<int32_t>(payload[l.scales_offset + b]) - 127);
      if (Add) acc[k] = load4(out, v);
    }
    QT_UNROLL
    for (int k = 0; k < kStreamUnroll; ++k) {
      const int64_t v = v0 + k * kStreamThreads;
      if (v >= vecs) break;
      float y[4];
      QT_UNROLL
      for (int j = 0; j < 4; ++j) y[j] = minifloat_value<F>((c[k] >> (8 * j)) & 0xffu) * scale[k];
      store_decoded<Add>(out, v, acc[k], y);
    }
  }
  if (blockIdx.x == 0)
    for (int64_t i = full * kBlock + threadIdx.x; i < l.n; i += blockDim.x) {
      const float y = decode_value<F>(payload, l, i);
      out[i] = Add ? out[i] + y : y;
    }
}

}  // namespace

void mx_encode_cuda(Context& ctx, const EncodeArgs& a, MxElement element, bool stochastic, const wire::MxLayout& l,
                    const WireHeader& h) {
  Carver carver(a.state->workspace(ctx.device(), 512));
  EncodeStatus* status = fresh_status(ctx, carver);
  cudaStream_t s = stream_of(ctx);
  cuda_write_header(ctx, a.out, h);
  if (l.blocks > 0) {
    constexpr int kThreads = 128;
    const bool vec = aligned_to(a.in, 16) && aligned_to(a.residual, 16);
    const int grid = stream_grid(l.n / kBlock * (kBlock / 4));
    with_mx_element(static_cast<uint32_t>(element), [&](auto f) {
      using F = decltype(f);
      if (vec && stochastic && a.residual)
        encode_vec_kernel<F, true, true><<<grid, kStreamThreads, 0, s>>>(a.in, a.residual, l, a.key, a.out, status);
      else if (vec && stochastic)
        encode_vec_kernel<F, true, false><<<grid, kStreamThreads, 0, s>>>(a.in, a.residual, l, a.key, a.out, status);
      else if (vec && a.residual)
        encode_vec_kernel<F, false, true><<<grid, kStreamThreads, 0, s>>>(a.in, a.residual, l, a.key, a.out, status);
      else if (vec)
        encode_vec_kernel<F, false, false><<<grid, kStreamThreads, 0, s>>>(a.in, a.residual, l, a.key, a.out, status);
      else if (stochastic)
        encode_kernel<F, true>
            <<<grid_for(l.blocks, kThreads), kThreads, 0, s>>>(a.in, a.residual, l, 0, a.key, a.out, status);
      else
        encode_kernel<F, false>
            <<<grid_for(l.blocks, kThreads), kThreads, 0, s>>>(a.in, a.residual, l, 0, a.key, a.out, status);
    });
    CUDA_CHECK(cudaGetLastError());
  }
  check_status(ctx, status, [n = a.n](const EncodeStatus& done) {
    if (done.non_finite)
      throw NonFiniteInputError(fmt::format("mx encode: the input of {} values holds NaN or Inf", n));
  });
}

void mx_decode_cuda(Context& ctx, MxElement element, const wire::MxLayout& l, const uint8_t* payload, float* out,
                    bool add) {
  if (l.n == 0) return;
  constexpr int kThreads = 256;
  with_mx_element(static_cast<uint32_t>(element), [&](auto f) {
    using F = decltype(f);
    DecodeStatus status(ctx);
    check_kernel<F><<<stream_grid(l.n / 4), kStreamThreads, 0, stream_of(ctx)>>>(payload, l, status.get());
    CUDA_CHECK(cudaGetLastError());
    check_status(ctx, status.get(), [](const EncodeStatus& done) {
      if (done.bad)
        wire::bad_payload(QuantMethod::mx,
                          "a block scale is NaN or above what a finite block has, an element is a NaN "
                          "or Inf code, or bits after the last element are set");
    });
    cudaStream_t s = stream_of(ctx);
    if (aligned_to(out, 16)) {
      const int grid = stream_grid(l.n / kBlock * (kBlock / 4));
      if (add)
        decode_vec_kernel<F, true><<<grid, kStreamThreads, 0, s>>>(payload, l, out);
      else
        decode_vec_kernel<F, false><<<grid, kStreamThreads, 0, s>>>(payload, l, out);
    } else if (add) {
      decode_kernel<F, true><<<grid_for(l.n, kThreads), kThreads, 0, s>>>(payload, l, out);
    } else {
      decode_kernel<F, false><<<grid_for(l.n, kThreads), kThreads, 0, s>>>(payload, l, out);
    }
    CUDA_CHECK(cudaGetLastError());
  });
}

}  // namespace qtrain::quant_detail
