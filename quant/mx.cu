// mx kernels: one thread per block of 32 values (its 128 contiguous input bytes): the block's max,
// E8M0 scale, codes, residual and packed bytes with mx.cpp's arithmetic (quant/minifloat.h). The
// header is known on the host. Decode checks scales, elements and the last byte's unused bits in a
// kernel before the decoding kernel writes.
#include "quant/cuda_common.cuh"
#include "quant/minifloat.h"
#include "quant/mx_cuda.h"
#include "quant/mx_wire.h"

namespace qtrain::quant_detail {
namespace {

constexpr int64_t kBlock = wire::kMxBlock;

template <class F, bool Sr>
__global__ void encode_kernel(const float* __restrict__ in, float* __restrict__ residual, wire::MxLayout l,
                              PhiloxKey key, uint8_t* __restrict__ out, EncodeStatus* status) {
  constexpr int kBits = code_bits<F>();
  for (int64_t b = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; b < l.blocks;
       b += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t len = l.len(b), first = b * kBlock;
    uint32_t m = 0;
    for (int64_t t = 0; t < len; ++t) {
      const uint32_t x = abs_bits(residual ? in[first + t] + residual[first + t] : in[first + t]);
      m = x > m ? x : m;
    }
    if (m >= kNonFinite) {
      atomicOr(&status->non_finite, 1u);
      continue;
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
}

// mx.cpp's check_values: scales at most 254 - emax (0xff is NaN), no NaN/Inf element, zero bits after
// the last element.
template <class F>
__global__ void check_kernel(const uint8_t* __restrict__ payload, wire::MxLayout l, EncodeStatus* status) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  for (int64_t b = first; b < l.blocks; b += stride)
    if (payload[l.scales_offset + b] > 254 - F::kEmax) atomicOr(&status->bad, 1u);
  if (code_bits<F>() == 8)
    for (int64_t i = first; i < l.n; i += stride)
      if (invalid_magnitude<F>(payload[wire::kHeaderBytes + i] & 0x7fu)) atomicOr(&status->bad, 1u);
  const int64_t used_bits = l.n * l.bits % 8;
  if (first == 0 && used_bits != 0 && (payload[l.scales_offset - 1] >> used_bits) != 0) atomicOr(&status->bad, 1u);
}

// One thread per value.
template <class F, bool Add>
__global__ void decode_kernel(const uint8_t* __restrict__ payload, wire::MxLayout l, float* __restrict__ out) {
  constexpr int kBits = code_bits<F>();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < l.n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t b = i / kBlock;
    const uint32_t code = packed_code_at<kBits>(payload + l.elements_offset(b), l.len(b), i - b * kBlock);
    const float scale = pow2_float(static_cast<int32_t>(payload[l.scales_offset + b]) - 127);
    const float y = minifloat_value<F>(code) * scale;
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
    with_mx_element(static_cast<uint32_t>(element), [&](auto f) {
      using F = decltype(f);
      if (stochastic)
        encode_kernel<F, true>
            <<<grid_for(l.blocks, kThreads), kThreads, 0, s>>>(a.in, a.residual, l, a.key, a.out, status);
      else
        encode_kernel<F, false>
            <<<grid_for(l.blocks, kThreads), kThreads, 0, s>>>(a.in, a.residual, l, a.key, a.out, status);
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
    check_kernel<F><<<grid_for(l.n, kThreads), kThreads, 0, stream_of(ctx)>>>(payload, l, status.get());
    CUDA_CHECK(cudaGetLastError());
    check_status(ctx, status.get(), [](const EncodeStatus& done) {
      if (done.bad)
        wire::bad_payload(QuantMethod::mx,
                          "a block scale is NaN or above what a finite block has, an element is a NaN "
                          "or Inf code, or bits after the last element are set");
    });
    if (add)
      decode_kernel<F, true><<<grid_for(l.n, kThreads), kThreads, 0, stream_of(ctx)>>>(payload, l, out);
    else
      decode_kernel<F, false><<<grid_for(l.n, kThreads), kThreads, 0, stream_of(ctx)>>>(payload, l, out);
    CUDA_CHECK(cudaGetLastError());
  });
}

}  // namespace qtrain::quant_detail
