// nvfp4 kernels: max|v| (an integer max of the float bits), then one thread per block of 16 values
// (its 64 contiguous input bytes): the block's max, E4M3 scale, E2M1 codes, residual and 8 packed bytes
// with nvfp4.cpp's arithmetic (quant/minifloat.h); thread 0 writes the header with the tensor scale.
// Decode checks the block scales and the last nibble in a kernel before the decoding kernel writes.
#include <cfloat>

#include "quant/minifloat.cuh"
#include "quant/minifloat.h"
#include "quant/nvfp4_cuda.h"
#include "quant/nvfp4_wire.h"

namespace qtrain::quant_detail {
namespace {

constexpr int64_t kBlock = wire::kNvfp4Block;

template <bool Sr>
__global__ void encode_kernel(const float* __restrict__ in, float* __restrict__ residual, wire::Nvfp4Layout l,
                              const uint32_t* max_bits_ptr, PhiloxKey key, uint8_t* __restrict__ out,
                              WireHeaderFields h, EncodeStatus* status) {
  const float t = bits_float(*max_bits_ptr) / kNvfp4TensorDivisor;
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    h.b = float_bits(t);
    store_header(out, h);
    if (!(6.0f * nvfp4_decode_scale(FloatE4M3::kMaxCode, t) <= FLT_MAX)) atomicOr(&status->overflow, 1u);
  }
  for (int64_t b = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; b < l.blocks;
       b += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t len = l.len(b), first = b * kBlock;
    uint32_t m = 0;
    for (int64_t j = 0; j < len; ++j) {
      const uint32_t x = abs_bits(residual ? in[first + j] + residual[first + j] : in[first + j]);
      m = x > m ? x : m;
    }
    const uint32_t sc = nvfp4_block_scale_code(m, t);
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
}

__global__ void check_kernel(const uint8_t* __restrict__ payload, wire::Nvfp4Layout l, EncodeStatus* status) {
  const int64_t first = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  for (int64_t b = first; b < l.blocks; b += static_cast<int64_t>(gridDim.x) * blockDim.x)
    if (payload[l.scales_offset + b] > FloatE4M3::kMaxCode) atomicOr(&status->bad, 1u);
  if (first == 0 && l.n % 2 == 1 && (payload[l.scales_offset - 1] >> 4) != 0) atomicOr(&status->bad, 1u);
}

template <bool Add>
__global__ void decode_kernel(const uint8_t* __restrict__ payload, wire::Nvfp4Layout l, float t,
                              float* __restrict__ out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < l.n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t b = i / kBlock;
    const uint32_t code = packed_code_at<4>(payload + wire::kHeaderBytes + b * kBlock / 2, l.len(b), i - b * kBlock);
    const float d = nvfp4_decode_scale(payload[l.scales_offset + b], t);
    const float y = minifloat_value<FloatE2M1>(code) * d;
    out[i] = Add ? out[i] + y : y;
  }
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
  // At least one thread runs, for the header.
  const int grid = grid_for(l.blocks > 0 ? l.blocks : 1, kThreads);
  if (stochastic)
    encode_kernel<true><<<grid, kThreads, 0, s>>>(a.in, a.residual, l, max_bits, a.key, a.out, fields_of(h), status);
  else
    encode_kernel<false><<<grid, kThreads, 0, s>>>(a.in, a.residual, l, max_bits, a.key, a.out, fields_of(h), status);
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

void nvfp4_decode_cuda(Context& ctx, const wire::Nvfp4Layout& l, float tensor_scale, const uint8_t* payload, float* out,
                       bool add) {
  if (l.n == 0) return;
  constexpr int kThreads = 256;
  DecodeStatus status(ctx);
  check_kernel<<<grid_for(l.blocks, kThreads), kThreads, 0, stream_of(ctx)>>>(payload, l, status.get());
  CUDA_CHECK(cudaGetLastError());
  check_status(ctx, status.get(), [](const EncodeStatus& done) {
    if (done.bad)
      wire::bad_payload(QuantMethod::nvfp4,
                        "a block scale is not a positive E4M3 value (sign 0, not NaN), or the "
                        "nibble after the last element is set");
  });
  if (add)
    decode_kernel<true><<<grid_for(l.n, kThreads), kThreads, 0, stream_of(ctx)>>>(payload, l, tensor_scale, out);
  else
    decode_kernel<false><<<grid_for(l.n, kThreads), kThreads, 0, stream_of(ctx)>>>(payload, l, tensor_scale, out);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace qtrain::quant_detail
