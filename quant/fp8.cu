// fp8 kernels: max|v| (an integer max of the float bits), then one thread per value with fp8.cpp's
// arithmetic (quant/minifloat.h); thread 0 writes the header with the scale. Decode checks every code
// in a kernel before the decoding kernel writes.
#include <cfloat>

#include "quant/fp8_cuda.h"
#include "quant/minifloat.cuh"
#include "quant/minifloat.h"

namespace qtrain::quant_detail {
namespace {

template <class F, bool Sr>
__global__ void encode_kernel(const float* __restrict__ in, float* __restrict__ residual, int64_t n,
                              const uint32_t* max_bits_ptr, PhiloxKey key, uint8_t* __restrict__ out,
                              WireHeaderFields h, EncodeStatus* status) {
  const uint32_t m = *max_bits_ptr;
  const float max_value = minifloat_abs_value<F>(F::kMaxCode);
  const float scale = bits_float(m) / max_value;
  const float inv = inverse_scale(m, max_value);
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    h.b = float_bits(scale);
    store_header(out, h);
    if (!(max_value * scale <= FLT_MAX)) atomicOr(&status->overflow, 1u);  // fp8.cpp's check_scale_range
  }
  uint8_t* codes = out + wire::kHeaderBytes;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = residual ? in[i] + residual[i] : in[i];
    const uint32_t code = minifloat_code<F, Sr>(v, inv, Sr ? float_round_word(key, static_cast<uint64_t>(i)) : 0u);
    codes[i] = static_cast<uint8_t>(code);
    if (residual) residual[i] = v - minifloat_value<F>(code) * scale;
  }
}

template <class F>
__global__ void check_kernel(const uint8_t* __restrict__ codes, int64_t n, EncodeStatus* status) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    if (invalid_magnitude<F>(codes[i] & 0x7fu)) atomicOr(&status->bad, 1u);
}

template <class F, bool Add>
__global__ void decode_kernel(const uint8_t* __restrict__ codes, float scale, float* __restrict__ out, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float y = minifloat_value<F>(codes[i]) * scale;
    out[i] = Add ? out[i] + y : y;
  }
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
  constexpr int kThreads = 256;
  cudaStream_t s = stream_of(ctx);
  with_format(format, [&](auto f) {
    using F = decltype(f);
    if (stochastic)
      encode_kernel<F, true><<<grid_for(a.n, kThreads), kThreads, 0, s>>>(a.in, a.residual, a.n, max_bits, a.key, a.out,
                                                                          fields_of(h), status);
    else
      encode_kernel<F, false><<<grid_for(a.n, kThreads), kThreads, 0, s>>>(a.in, a.residual, a.n, max_bits, a.key,
                                                                           a.out, fields_of(h), status);
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

void fp8_decode_cuda(Context& ctx, Fp8Format format, float scale, const uint8_t* payload, float* out, int64_t n,
                     bool add) {
  if (n == 0) return;
  constexpr int kThreads = 256;
  const uint8_t* codes = payload + wire::kHeaderBytes;
  with_format(format, [&](auto f) {
    using F = decltype(f);
    DecodeStatus status(ctx);
    check_kernel<F><<<grid_for(n, kThreads), kThreads, 0, stream_of(ctx)>>>(codes, n, status.get());
    CUDA_CHECK(cudaGetLastError());
    check_status(ctx, status.get(), [format](const EncodeStatus& done) {
      if (done.bad)
        wire::bad_payload(QuantMethod::fp8,
                          format == Fp8Format::e4m3
                              ? "a code is E4M3's NaN (S.1111.111), which the encoder never writes"
                              : "a code is E5M2's Inf or NaN (exponent field 11111), which the encoder never writes");
    });
    if (add)
      decode_kernel<F, true><<<grid_for(n, kThreads), kThreads, 0, stream_of(ctx)>>>(codes, scale, out, n);
    else
      decode_kernel<F, false><<<grid_for(n, kThreads), kThreads, 0, stream_of(ctx)>>>(codes, scale, out, n);
    CUDA_CHECK(cudaGetLastError());
  });
}

}  // namespace qtrain::quant_detail
