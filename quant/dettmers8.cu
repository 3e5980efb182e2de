// dettmers8 kernels: max|v| (minifloat.cuh's streamed span max: an integer max of the float bits, so
// any order gives the CPU's value), then one thread per value; the dynamic-tree index is the binary search that defines
// the CPU's lookup table (tests/quant checks the two agree everywhere), the rest (the linear level, clusterNet's
// search) quant/dettmers8_codes.h's, as on the CPU.
#include "quant/cuda_common.cuh"
#include "quant/dettmers8_codes.h"
#include "quant/dettmers8_cuda.h"
#include "quant/dettmers8_wire.h"
#include "quant/dettmers_table.h"
#include "quant/minifloat.cuh"

namespace qtrain::quant_detail {
namespace {

struct DeviceTables {
  float value[DettmersTables::kEntries];
  uint32_t mid_bits[DettmersTables::kEntries];
  uint32_t zero_bits, sat_bits;
};

DeviceTables device_tables() {
  const DettmersTables& t = dettmers_tables();
  DeviceTables d{};
  for (int i = 0; i < DettmersTables::kEntries; ++i) {
    d.value[i] = t.value[i];
    d.mid_bits[i] = t.mid_bits[i];
  }
  d.zero_bits = t.zero_bits;
  d.sat_bits = t.sat_bits;
  return d;
}

__device__ __forceinline__ float span_value(const float* in, const float* residual, int64_t i) {
  return residual ? in[i] + residual[i] : in[i];
}

// The value of code c under scale m: dettmers8.cpp's decode_table() entry c.
__device__ __forceinline__ float decoded(const float* value, bool linear, float m, float step, uint32_t c) {
  const uint32_t idx = c & 127u;
  float mag;
  if (linear)
    mag = static_cast<float>(idx) * step;
  else
    mag = idx < DettmersTables::kZeroCode ? value[idx] * m : (idx == DettmersTables::kZeroCode ? 0.0f : m);
  return c & 128u ? -mag : mag;
}

__global__ void encode_kernel(DeviceTables tables, bool linear, bool clusternet, const float* __restrict__ in,
                              float* __restrict__ residual, int64_t n, const uint32_t* max_bits_ptr,
                              uint8_t* __restrict__ out, WireHeaderFields h) {
  __shared__ float value[DettmersTables::kEntries];
  __shared__ uint32_t mid[DettmersTables::kEntries];
  for (int i = threadIdx.x; i < DettmersTables::kEntries; i += blockDim.x) {
    value[i] = tables.value[i];
    mid[i] = tables.mid_bits[i];
  }
  __syncthreads();
  const uint32_t max_bits = *max_bits_ptr;
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    h.b = max_bits;
    store_header(out, h);
  }
  const float m = bits_float(max_bits);
  // dettmers8.cpp's reciprocals: 0 (all zero codes) for a max of 0, below FLT_MIN or too small to invert.
  const float r = inverse_scale(max_bits, 1.0f);
  const float r127 = inverse_scale(max_bits, 127.0f);
  const float step = m / 127.0f;
  uint8_t* codes = out + wire::kHeaderBytes;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = span_value(in, residual, i);
    uint32_t code;
    if (linear) {
      // NaN or Inf input reaches here before the status check refuses it: the helper converts only
      // finite estimates below 128 to int (a C++ cast of the others is undefined; UBSan reported it).
      code = dettmers8_linear_level(fabsf(v), m, r127);
    } else if (clusternet) {
      code = dettmers8_clusternet_index(fabsf(v), m, value);
    } else {
      const uint32_t a = float_bits(fabsf(v) * r);
      // Number of midpoints below a: DettmersTables::nearest_by_search.
      int lo = 0, hi = DettmersTables::kEntries - 1;
      while (lo < hi) {
        const int mm = (lo + hi) / 2;
        if (mid[mm] < a)
          lo = mm + 1;
        else
          hi = mm;
      }
      code = a < tables.zero_bits ? DettmersTables::kZeroCode
                                  : (a > tables.sat_bits ? DettmersTables::kSatCode : static_cast<uint32_t>(lo));
    }
    code |= (float_bits(v) >> 31) << 7;
    codes[i] = static_cast<uint8_t>(code);
    if (residual) residual[i] = v - decoded(value, linear, m, step, code);
  }
}

// The scale M is header field b, read here (under deferred checks the host has not read the header):
// with a status, block 0 reports a field that is not a finite float >= 0 (dettmers8.cpp's check_body).
template <bool Add>
__global__ void decode_kernel(DeviceTables tables, bool linear, const uint8_t* __restrict__ payload,
                              float* __restrict__ out, int64_t n, EncodeStatus* status, HeaderCheck header) {
  check_header_in_kernel(header);
  __shared__ float d[256];
  const float m = checked_field_b_scale(payload, status);
  const uint8_t* codes = payload + wire::kHeaderBytes;
  const float step = m / 127.0f;
  for (int c = threadIdx.x; c < 256; c += blockDim.x)
    d[c] = decoded(tables.value, linear, m, step, static_cast<uint32_t>(c));
  __syncthreads();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = Add ? out[i] + d[codes[i]] : d[codes[i]];
}

}  // namespace

void dettmers8_encode_cuda(Context& ctx, Dettmers8Variant variant, bool clusternet, const EncodeArgs& a) {
  Carver carver(a.state->workspace(ctx.device(), 1024));
  EncodeStatus* status = fresh_status(ctx, carver);
  auto* max_bits = carver.take<uint32_t>(1);
  cudaStream_t s = stream_of(ctx);
  constexpr int kThreads = 256;
  // The streamed max with one atomic per block (its former kernel's atomic per warp, all on one word,
  // ran at 5% of DRAM's peak on the H100).
  launch_span_max_bits(ctx, a.in, a.residual, a.n, max_bits, status);
  WireHeader h;
  h.method = QuantMethod::dettmers8;
  h.a = static_cast<uint32_t>(variant);
  h.n = static_cast<uint64_t>(a.n);
  h.total = wire::pad8(wire::kHeaderBytes + static_cast<size_t>(a.n));
  encode_kernel<<<grid_for(a.n, kThreads), kThreads, 0, s>>>(device_tables(), variant == Dettmers8Variant::linear,
                                                             clusternet, a.in, a.residual, a.n, max_bits, a.out,
                                                             fields_of(h));
  CUDA_CHECK(cudaGetLastError());
  check_status(ctx, status, [n = a.n](const EncodeStatus& done) {
    if (done.non_finite)
      throw NonFiniteInputError(fmt::format("dettmers8 encode: the input of {} values holds NaN or Inf", n));
  });
}

void dettmers8_decode_cuda(Context& ctx, Dettmers8Variant variant, const uint8_t* payload, float* out, int64_t n,
                           bool add) {
  if (n == 0) return;
  constexpr int kThreads = 256;
  const bool linear = variant == Dettmers8Variant::linear;
  std::optional<DecodeStatus> status;
  EncodeStatus* in_decoder = field_b_scale_status(ctx, status, QuantMethod::dettmers8);
  const HeaderCheck header = take_header_check(ctx);  // made by the decode kernel
  const int grid = grid_for(n, kThreads);
  cudaStream_t s = stream_of(ctx);
  if (add)
    decode_kernel<true><<<grid, kThreads, 0, s>>>(device_tables(), linear, payload, out, n, in_decoder, header);
  else
    decode_kernel<false><<<grid, kThreads, 0, s>>>(device_tables(), linear, payload, out, n, in_decoder, header);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace qtrain::quant_detail
