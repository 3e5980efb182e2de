// fp8 kernels: max|v| (an integer max of the float bits, quant/minifloat.cuh), then the codes with
// fp8.cpp's arithmetic (quant/minifloat.h); thread 0 writes the header with the scale. Decode checks
// every code in a kernel before the decoding kernel writes. The max pass cannot merge into the encode
// (every code needs the global scale), so each pass streams: float4 loads of the input (and residual),
// one 32-bit word of four codes per float4, the n % 4 last values one by one in block 0. A span or
// payload not aligned for that takes the one-value-per-thread kernels (the host checks the pointers).
// What each pass moves per value: docs/performance.md, "What each kernel must move".
#include <cfloat>

#include "quant/fp8_cuda.h"
#include "quant/minifloat.cuh"
#include "quant/minifloat.h"

namespace qtrain::quant_detail {
namespace {

// One value: its code (written) and residual.
template <class F, bool Sr>
__device__ __forceinline__ void encode_value(const float* __restrict__ in, float* __restrict__ residual, int64_t i,
                                             float inv, float scale, PhiloxKey key, uint8_t* __restrict__ codes) {
  const float v = residual ? in[i] + residual[i] : in[i];
  const uint32_t code = minifloat_code<F, Sr>(v, inv, Sr ? float_round_word(key, static_cast<uint64_t>(i)) : 0u);
  codes[i] = static_cast<uint8_t>(code);
  if (residual) residual[i] = v - minifloat_value<F>(code) * scale;
}

// The scale of max_bits, and the header (with it) from thread 0 of block 0.
template <class F>
__device__ __forceinline__ void scale_and_header(uint32_t m, float& scale, float& inv, uint8_t* out, WireHeaderFields h,
                                                 EncodeStatus* status) {
  const float max_value = minifloat_abs_value<F>(F::kMaxCode);
  scale = bits_float(m) / max_value;
  inv = inverse_scale(m, max_value);
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    h.b = float_bits(scale);
    store_header(out, h);
    if (!(max_value * scale <= FLT_MAX)) atomicOr(&status->overflow, 1u);  // fp8.cpp's check_scale_range
  }
}

// Reads 4 bytes per value (8 with a residual), writes 1 (5): one thread per value, for spans that are
// not 16-byte aligned.
template <class F, bool Sr>
__global__ void encode_kernel(const float* __restrict__ in, float* __restrict__ residual, int64_t n,
                              const uint32_t* max_bits_ptr, PhiloxKey key, uint8_t* __restrict__ out,
                              WireHeaderFields h, EncodeStatus* status) {
  float scale, inv;
  scale_and_header<F>(*max_bits_ptr, scale, inv, out, h, status);
  uint8_t* codes = out + wire::kHeaderBytes;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    encode_value<F, Sr>(in, residual, i, inv, scale, key, codes);
}

// The same bytes, streamed (cuda_common.cuh): float4 v of the input -> 32-bit word v of the codes
// (the codes start at offset 32 of an 8-byte aligned payload, so words are aligned).
template <class F, bool Sr, bool Ef>
__global__ void __launch_bounds__(kStreamThreads)
    encode_vec_kernel(const float* __restrict__ in, float* __restrict__ residual, int64_t n,
                      const uint32_t* max_bits_ptr, PhiloxKey key, uint8_t* __restrict__ out, WireHeaderFields h,
                      EncodeStatus* status) {
  float scale, inv;
  scale_and_header<F>(*max_bits_ptr, scale, inv, out, h, status);
  uint8_t* codes = out + wire::kHeaderBytes;
  auto* words = reinterpret_cast<uint32_t*>(codes);
  const int64_t vecs = n / 4;
  for (int64_t tile = blockIdx.x; tile * kTileVecs < vecs; tile += gridDim.x) {
    const int64_t v0 = tile * kTileVecs + threadIdx.x;
    float4 x[kStreamUnroll];
    load_tile<Ef>(in, residual, v0, vecs, x);
    QT_UNROLL
    for (int k = 0; k < kStreamUnroll; ++k) {
      const int64_t v = v0 + k * kStreamThreads;
      if (v >= vecs) break;
      const float a[4] = {x[k].x, x[k].y, x[k].z, x[k].w};
      const PhiloxBlock r = Sr ? float_round_words(key, v) : PhiloxBlock{};
      uint32_t word = 0;
      float res[4];
      QT_UNROLL
      for (int j = 0; j < 4; ++j) {
        const uint32_t code = minifloat_code<F, Sr>(a[j], inv, Sr ? r.v[j] : 0u);
        word |= code << (8 * j);
        res[j] = a[j] - minifloat_value<F>(code) * scale;
      }
      words[v] = word;
      if (Ef) store4(residual, v, make_float4(res[0], res[1], res[2], res[3]));
    }
  }
  if (blockIdx.x == 0)
    for (int64_t i = 4 * vecs + threadIdx.x; i < n; i += blockDim.x)
      encode_value<F, Sr>(in, Ef ? residual : nullptr, i, inv, scale, key, codes);
}

// The scale of header field b (read on the device, Quantizer::header_b_from_data()): finite, >= 0, and
// small enough that the largest code's value is a float, as fp8.cpp's check_body on the host.
template <class F>
__device__ __forceinline__ bool scale_is_valid(uint32_t bits) {
  return bits < kNonFinite && minifloat_abs_value<F>(F::kMaxCode) * bits_float(bits) <= FLT_MAX;
}

// Reads 1 byte per value: 32-bit words of four codes (the payload is 4-byte aligned), the n % 4 last
// codes in block 0, which also checks the scale.
template <class F>
__global__ void __launch_bounds__(kStreamThreads)
    check_kernel(const uint8_t* __restrict__ payload, int64_t n, EncodeStatus* status) {
  const uint8_t* codes = payload + wire::kHeaderBytes;
  const auto* words = reinterpret_cast<const uint32_t*>(codes);
  const int64_t vecs = n / 4;
  bool bad = blockIdx.x == 0 && threadIdx.x == 0 && !scale_is_valid<F>(header_field_b(payload));
  for (int64_t tile = blockIdx.x; tile * kTileVecs < vecs; tile += gridDim.x) {
    const int64_t v0 = tile * kTileVecs + threadIdx.x;
    QT_UNROLL
    for (int k = 0; k < kStreamUnroll; ++k) {
      const int64_t v = v0 + k * kStreamThreads;
      if (v >= vecs) break;
      const uint32_t w = words[v];
      QT_UNROLL
      for (int j = 0; j < 4; ++j) bad |= invalid_magnitude<F>((w >> (8 * j)) & 0x7fu);
    }
  }
  if (blockIdx.x == 0)
    for (int64_t i = 4 * vecs + threadIdx.x; i < n; i += blockDim.x) bad |= invalid_magnitude<F>(codes[i] & 0x7fu);
  if (bad) atomicOr(&status->bad, 1u);
}

// Reads 1 byte per value (5 with Add), writes 4: one thread per value, for outputs that are not
// 16-byte aligned. With a status (decoder_checks: under DeferredChecks) the decoders make
// check_kernel's tests on what they read instead of a launch of their own.
template <class F, bool Add>
__global__ void decode_kernel(const uint8_t* __restrict__ payload, float* __restrict__ out, int64_t n,
                              EncodeStatus* status, HeaderCheck header) {
  check_header_in_kernel(header);
  const uint8_t* codes = payload + wire::kHeaderBytes;
  const float scale = bits_float(header_field_b(payload));
  bool bad = status && blockIdx.x == 0 && threadIdx.x == 0 && !scale_is_valid<F>(header_field_b(payload));
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (status) bad |= invalid_magnitude<F>(codes[i] & 0x7fu);
    const float y = minifloat_value<F>(codes[i]) * scale;
    out[i] = Add ? out[i] + y : y;
  }
  if (bad) atomicOr(&status->bad, 1u);
}

// The same values, streamed: 32-bit word v of the codes -> float4 v of the output.
template <class F, bool Add>
__global__ void __launch_bounds__(kStreamThreads)
    decode_vec_kernel(const uint8_t* __restrict__ payload, float* __restrict__ out, int64_t n, EncodeStatus* status,
                      HeaderCheck header) {
  check_header_in_kernel(header);
  const uint8_t* codes = payload + wire::kHeaderBytes;
  const float scale = bits_float(header_field_b(payload));
  const auto* words = reinterpret_cast<const uint32_t*>(codes);
  const int64_t vecs = n / 4;
  bool bad = status && blockIdx.x == 0 && threadIdx.x == 0 && !scale_is_valid<F>(header_field_b(payload));
  for (int64_t tile = blockIdx.x; tile * kTileVecs < vecs; tile += gridDim.x) {
    const int64_t v0 = tile * kTileVecs + threadIdx.x;
    uint32_t w[kStreamUnroll];
    float4 acc[kStreamUnroll];
    QT_UNROLL
    for (int k = 0; k < kStreamUnroll; ++k) {
      const int64_t v = v0 + k * kStreamThreads;
      w[k] = 0;
      acc[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (v < vecs) {
        w[k] = words[v];
        if (Add) acc[k] = load4(out, v);
      }
    }
    QT_UNROLL
    for (int k = 0; k < kStreamUnroll; ++k) {
      const int64_t v = v0 + k * kStreamThreads;
      if (v >= vecs) break;
      float y[4];
      QT_UNROLL
      for (int j = 0; j < 4; ++j) {
        if (status) bad |= invalid_magnitude<F>((w[k] >> (8 * j)) & 0x7fu);
        y[j] = minifloat_value<F>((w[k] >> (8 * j)) & 0xffu) * scale;
      }
      store_decoded<Add>(out, v, acc[k], y);
    }
  }
  if (blockIdx.x == 0)
    for (int64_t i = 4 * vecs + threadIdx.x; i < n; i += blockDim.x) {
      if (status) bad |= invalid_magnitude<F>(codes[i] & 0x7fu);
      const float y = minifloat_value<F>(codes[i]) * scale;
      out[i] = Add ? out[i] + y : y;
    }
  if (bad) atomicOr(&status->bad, 1u);
}

template <typename Fn>
void with_format(Fp8Format format, Fn&& f) {
  if (format == Fp8Format::e4m3)
    f(FloatE4M3{});
  else
    f(FloatE5M2{});
}

}  // namespace

void fp8_encode_cuda(Context& ctx, const EncodeArgs& a, Fp8Format format, bool stochastic, const WireHeader& h) {
  Carver carver(a.state->workspace(ctx.device(), 1024));
  EncodeStatus* status = fresh_status(ctx, carver);
  auto* max_bits = carver.take<uint32_t>(1);
  launch_span_max_bits(ctx, a.in, a.residual, a.n, max_bits, status);
  cudaStream_t s = stream_of(ctx);
  const bool vec = aligned_to(a.in, 16) && aligned_to(a.residual, 16);
  with_format(format, [&](auto f) {
    using F = decltype(f);
    const int grid = stream_grid(a.n / 4);  // at least one block, for the header
    const int scalar_grid = grid_for(a.n, 256);
    if (vec && stochastic && a.residual)
      encode_vec_kernel<F, true, true>
          <<<grid, kStreamThreads, 0, s>>>(a.in, a.residual, a.n, max_bits, a.key, a.out, fields_of(h), status);
    else if (vec && stochastic)
      encode_vec_kernel<F, true, false>
          <<<grid, kStreamThreads, 0, s>>>(a.in, a.residual, a.n, max_bits, a.key, a.out, fields_of(h), status);
    else if (vec && a.residual)
      encode_vec_kernel<F, false, true>
          <<<grid, kStreamThreads, 0, s>>>(a.in, a.residual, a.n, max_bits, a.key, a.out, fields_of(h), status);
    else if (vec)
      encode_vec_kernel<F, false, false>
          <<<grid, kStreamThreads, 0, s>>>(a.in, a.residual, a.n, max_bits, a.key, a.out, fields_of(h), status);
    else if (stochastic)
      encode_kernel<F, true>
          <<<scalar_grid, 256, 0, s>>>(a.in, a.residual, a.n, max_bits, a.key, a.out, fields_of(h), status);
    else
      encode_kernel<F, false>
          <<<scalar_grid, 256, 0, s>>>(a.in, a.residual, a.n, max_bits, a.key, a.out, fields_of(h), status);
  });
  CUDA_CHECK(cudaGetLastError());
  check_status(ctx, status, [n = a.n](const EncodeStatus& done) {
    if (done.non_finite)
      throw NonFiniteInputError(fmt::format("fp8 encode: the input of {} values holds NaN or Inf", n));
    if (done.overflow)
      throw NonFiniteInputError(
          "fp8 encode: the largest |value| is too close to the float maximum to scale (its "
          "decoded value would be beyond the float range)");
  });
}

void fp8_decode_cuda(Context& ctx, Fp8Format format, const uint8_t* payload, float* out, int64_t n, bool add) {
  if (n == 0) return;
  constexpr int kThreads = 256;
  with_format(format, [&](auto f) {
    using F = decltype(f);
    DecodeStatus status(ctx);
    EncodeStatus* in_decoder = decoder_checks(
        ctx, status,
        [&](EncodeStatus* st) {
          check_kernel<F><<<stream_grid(n / 4), kStreamThreads, 0, stream_of(ctx)>>>(payload, n, st);
        },
        [format](const EncodeStatus& done) {
          if (done.bad)
            wire::bad_payload(QuantMethod::fp8,
                              format == Fp8Format::e4m3
                                  ? "a code is E4M3's NaN (S.1111.111), which the encoder never writes, or the scale "
                                    "is not a finite float >= 0 that keeps the largest code's value finite"
                                  : "a code is E5M2's Inf or NaN (exponent field 11111), which the encoder never "
                                    "writes, or the scale is not a finite float >= 0 that keeps the largest code's "
                                    "value finite");
        });
    const HeaderCheck header = take_header_check(ctx);  // made by the decode kernel
    cudaStream_t s = stream_of(ctx);
    if (aligned_to(out, 16)) {
      const int grid = stream_grid(n / 4);
      if (add)
        decode_vec_kernel<F, true><<<grid, kStreamThreads, 0, s>>>(payload, out, n, in_decoder, header);
      else
        decode_vec_kernel<F, false><<<grid, kStreamThreads, 0, s>>>(payload, out, n, in_decoder, header);
    } else if (add) {
      decode_kernel<F, true><<<grid_for(n, kThreads), kThreads, 0, s>>>(payload, out, n, in_decoder, header);
    } else {
      decode_kernel<F, false><<<grid_for(n, kThreads), kThreads, 0, s>>>(payload, out, n, in_decoder, header);
    }
    CUDA_CHECK(cudaGetLastError());
  });
}

}  // namespace qtrain::quant_detail
