// CUDA helpers shared by the quantizers (zeroing, header writes, status readback, the per-bucket
// max of qsgd and terngrad) and the fp32 /
// fp16 / bf16 casts, with the arithmetic of cast.cpp (quant/numerics.h on both sides). Every launcher
// runs on the context's stream and checks cudaGetLastError() after the launch.
#include <type_traits>

#include "quant/cuda_common.cuh"
#include "quant/cast_cuda.h"

namespace qtrain::quant_detail {
namespace {

// The payload is 8-byte aligned (checked on entry), so the header's fields are aligned stores.
__global__ void write_header_kernel(uint8_t* out, WireHeaderFields h) {
  if (threadIdx.x == 0 && blockIdx.x == 0) store_header(out, h);
}

// A header check no decode kernel took (HeaderCheck: a kernel argument).
__global__ void check_header_kernel(HeaderCheck check) { check_header_in_kernel(check); }

// One value of a cast (Kind: 0 fp32, 1 fp16, 2 bf16): its body entry and residual.
template <int Kind, bool Ef>
__device__ __forceinline__ void cast_encode_value(const float* __restrict__ in, float* __restrict__ residual,
                                                  uint8_t* __restrict__ body, int64_t i) {
  const float v = Ef ? in[i] + residual[i] : in[i];
  if (Kind == 0) {
    reinterpret_cast<float*>(body)[i] = v;
  } else {
    const uint16_t h = Kind == 2 ? float_to_bf16(v) : float_to_half(v);
    reinterpret_cast<uint16_t*>(body)[i] = h;
    if (Ef) residual[i] = v - (Kind == 2 ? bf16_to_float(h) : half_to_float(h));
  }
}

template <int Kind>
__device__ __forceinline__ float cast_decode_value(const uint8_t* __restrict__ body, int64_t i) {
  if (Kind == 0) return reinterpret_cast<const float*>(body)[i];
  if (Kind == 2) return bf16_to_float(reinterpret_cast<const uint16_t*>(body)[i]);
  return half_to_float(reinterpret_cast<const uint16_t*>(body)[i]);
}

// Reads 4 bytes per value (8 with a residual), writes 4 (fp32) or 2 (6 with a residual): one thread
// per value, for spans and bodies not aligned for the vector kernel.
template <int Kind, bool Ef>
__global__ void cast_encode_kernel(const float* __restrict__ in, float* __restrict__ residual,
                                   uint8_t* __restrict__ body, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    cast_encode_value<Kind, Ef>(in, residual, body, i);
}

// The same bytes, streamed (cuda_common.cuh): float4 v of the input -> float4 v of an fp32 body, or
// the 8-byte word v of four halves; the n % 4 last values in block 0.
template <int Kind, bool Ef>
__global__ void __launch_bounds__(kStreamThreads)
    cast_encode_vec_kernel(const float* __restrict__ in, float* __restrict__ residual, uint8_t* __restrict__ body,
                           int64_t n) {
  const int64_t vecs = n / 4;
  for (int64_t tile = blockIdx.x; tile * kTileVecs < vecs; tile += gridDim.x) {
    const int64_t v0 = tile * kTileVecs + threadIdx.x;
    float4 x[kStreamUnroll];
    load_tile<Ef>(in, residual, v0, vecs, x);
    QT_UNROLL
    for (int k = 0; k < kStreamUnroll; ++k) {
      const int64_t v = v0 + k * kStreamThreads;
      if (v >= vecs) break;
      if (Kind == 0) {
        store4(reinterpret_cast<float*>(body), v, x[k]);
      } else {
        const float a[4] = {x[k].x, x[k].y, x[k].z, x[k].w};
        uint32_t h[4];
        float res[4];
        QT_UNROLL
        for (int j = 0; j < 4; ++j) {
          h[j] = Kind == 2 ? float_to_bf16(a[j]) : float_to_half(a[j]);
          res[j] = a[j] - (Kind == 2 ? bf16_to_float(static_cast<uint16_t>(h[j]))
                                     : half_to_float(static_cast<uint16_t>(h[j])));
        }
        reinterpret_cast<uint2*>(body)[v] = make_uint2(h[0] | (h[1] << 16), h[2] | (h[3] << 16));
        if (Ef) store4(residual, v, make_float4(res[0], res[1], res[2], res[3]));
      }
    }
  }
  if (blockIdx.x == 0)
    for (int64_t i = 4 * vecs + threadIdx.x; i < n; i += blockDim.x) cast_encode_value<Kind, Ef>(in, residual, body, i);
}

// Reads 4 or 2 bytes per value (8 or 6 with Add), writes 4: one thread per value.
template <int Kind, bool Add>
__global__ void cast_decode_kernel(const uint8_t* __restrict__ body, float* __restrict__ out, int64_t n,
                                   HeaderCheck header) {
  check_header_in_kernel(header);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = cast_decode_value<Kind>(body, i);
    out[i] = Add ? out[i] + v : v;
  }
}

// The same values, streamed: float4 or 8-byte word v of the body -> float4 v of the output.
template <int Kind, bool Add>
__global__ void __launch_bounds__(kStreamThreads)
    cast_decode_vec_kernel(const uint8_t* __restrict__ body, float* __restrict__ out, int64_t n, HeaderCheck header) {
  check_header_in_kernel(header);
  const int64_t vecs = n / 4;
  for (int64_t tile = blockIdx.x; tile * kTileVecs < vecs; tile += gridDim.x) {
    const int64_t v0 = tile * kTileVecs + threadIdx.x;
    float4 y[kStreamUnroll], acc[kStreamUnroll];
    QT_UNROLL
    for (int k = 0; k < kStreamUnroll; ++k) {
      const int64_t v = v0 + k * kStreamThreads;
      y[k] = acc[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (v >= vecs) continue;
      if (Kind == 0) {
        y[k] = load4(reinterpret_cast<const float*>(body), v);
      } else {
        const uint2 w = reinterpret_cast<const uint2*>(body)[v];
        const auto lo = [](uint32_t x) { return static_cast<uint16_t>(x & 0xffffu); };
        const auto hi = [](uint32_t x) { return static_cast<uint16_t>(x >> 16); };
        y[k] = Kind == 2 ? make_float4(bf16_to_float(lo(w.x)), bf16_to_float(hi(w.x)), bf16_to_float(lo(w.y)),
                                       bf16_to_float(hi(w.y)))
                         : make_float4(half_to_float(lo(w.x)), half_to_float(hi(w.x)), half_to_float(lo(w.y)),
                                       half_to_float(hi(w.y)));
      }
      if (Add) acc[k] = load4(out, v);
    }
    QT_UNROLL
    for (int k = 0; k < kStreamUnroll; ++k) {
      const int64_t v = v0 + k * kStreamThreads;
      if (v >= vecs) break;
      store4(out, v, Add ? add4(acc[k], y[k]) : y[k]);
    }
  }
  if (blockIdx.x == 0)
    for (int64_t i = 4 * vecs + threadIdx.x; i < n; i += blockDim.x) {
      const float v = cast_decode_value<Kind>(body, i);
      out[i] = Add ? out[i] + v : v;
    }
}

// MaxPassExtras (cuda_common.cuh), in thread 0 of block 0.
__device__ __forceinline__ void run_extras(const MaxPassExtras& x) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  if (x.header_out != nullptr) store_header(x.header_out, x.header);
  for (int i = 0; i < x.zero_count; ++i) x.zero[i] = 0u;
}

// One warp per (bucket, chunk of kSumChunk values): the bucket's max |v| bits. Spans not 16-byte
// aligned and buckets no multiple of 4 (more than one).
__global__ void bucket_max_kernel(const float* __restrict__ in, const float* __restrict__ residual, int64_t n,
                                  int64_t bucket, int64_t buckets, int64_t chunks_per_bucket, uint32_t* max_bits,
                                  EncodeStatus* status, MaxPassExtras extras) {
  run_extras(extras);
  const int64_t warps_per_block = blockDim.x / kWarp;
  const int64_t stride = warps_per_block * gridDim.x;
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  for (int64_t w = blockIdx.x * warps_per_block + threadIdx.x / kWarp; w < buckets * chunks_per_bucket; w += stride) {
    const int64_t b = w / chunks_per_bucket, c = w % chunks_per_bucket;
    const int64_t start = b * bucket + c * kSumChunk;
    const int64_t end_bucket = (b + 1) * bucket < n ? (b + 1) * bucket : n;
    if (start >= end_bucket) continue;
    const int64_t end = start + kSumChunk < end_bucket ? start + kSumChunk : end_bucket;
    uint32_t m = 0;
    for (int64_t i = start + lane; i < end; i += kWarp) {
      const uint32_t x = abs_bits(residual ? in[i] + residual[i] : in[i]);
      m = x > m ? x : m;
    }
    m = warp_max_u32(m);
    if (lane == 0 && m > 0) {
      atomicMax(&max_bits[b], m);
      if (m >= kNonFinite) atomicOr(&status->non_finite, 1u);
    }
  }
}

// The same maxima, streamed (bucket % 4 == 0, or one bucket: a float4 lies in one bucket): tiles of
// 256 x 4 float4s, each bucket the tile touches a slot in shared memory. A warp whose 32 float4s share
// a bucket folds them by shuffles and one lane takes the slot; otherwise each lane takes its own
// bucket's slot (atomicMax in shared memory). Then one global atomicMax per (tile, bucket): 4096
// values per atomic on a bucket larger than a tile, instead of one per warp chunk. The n % 4 last
// values in block 0.
constexpr int64_t kMaxSlots = kTileVecs + 1;  // buckets of >= 4 values: a tile touches at most this many

__global__ void __launch_bounds__(kStreamThreads)
    bucket_max_vec_kernel(const float* __restrict__ in, const float* __restrict__ residual, int64_t n, int64_t bucket,
                          uint32_t* max_bits, EncodeStatus* status, MaxPassExtras extras) {
  __shared__ uint32_t slot[kMaxSlots];
  run_extras(extras);
  const int64_t vecs = n / 4;
  bool bad = false;
  for (int64_t tile = blockIdx.x; tile * kTileVecs < vecs; tile += gridDim.x) {
    const int64_t v0 = tile * kTileVecs + threadIdx.x;
    const int64_t last_v = (tile + 1) * kTileVecs < vecs ? (tile + 1) * kTileVecs - 1 : vecs - 1;
    const int64_t first_b = 4 * tile * kTileVecs / bucket, slots = 4 * last_v / bucket - first_b + 1;
    for (int64_t t = threadIdx.x; t < slots; t += kStreamThreads) slot[t] = 0;
    float4 x[kStreamUnroll];
    if (residual)
      load_tile<true>(in, residual, v0, vecs, x);
    else
      load_tile<false>(in, residual, v0, vecs, x);
    __syncthreads();  // the slots are zero
    tile_bucket_maxima(x, v0, vecs, bucket, first_b, slot);
    __syncthreads();  // the slots are complete
    for (int64_t t = threadIdx.x; t < slots; t += kStreamThreads) {
      const uint32_t m = slot[t];
      if (m > 0) atomicMax(&max_bits[first_b + t], m);
      bad |= m >= kNonFinite;
    }
    __syncthreads();  // the slots are read before the next tile clears them
  }
  if (blockIdx.x == 0)
    for (int64_t i = 4 * vecs + threadIdx.x; i < n; i += blockDim.x) {
      const uint32_t x = abs_bits(residual ? in[i] + residual[i] : in[i]);
      if (x > 0) atomicMax(&max_bits[i / bucket], x);
      bad |= x >= kNonFinite;
    }
  if (bad) atomicOr(&status->non_finite, 1u);
}

__global__ void max_scales_kernel(const uint32_t* max_bits, int64_t buckets, float* scales) {
  for (int64_t b = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; b < buckets;
       b += static_cast<int64_t>(gridDim.x) * blockDim.x)
    scales[b] = bits_float(max_bits[b]);
}

int kind_of(QuantMethod method) {
  QT_CHECK(method == QuantMethod::fp32 || method == QuantMethod::fp16 || method == QuantMethod::bf16,
           "cast kernels serve fp32/fp16/bf16, not {}", quant_method_name(method));
  return method == QuantMethod::fp32 ? 0 : (method == QuantMethod::fp16 ? 1 : 2);
}

// Calls f(kind, flag) with both as compile-time constants (a cast kernel template's arguments): the
// kind of kind_of, and the kernel's bool (encode: error feedback; decode: add).
template <typename F>
void with_cast_kind(int kind, bool flag, F&& f) {
  const auto with_flag = [&](auto k) {
    if (flag)
      f(k, std::true_type{});
    else
      f(k, std::false_type{});
  };
  switch (kind) {
    case 0: with_flag(std::integral_constant<int, 0>{}); break;
    case 1: with_flag(std::integral_constant<int, 1>{}); break;
    default: with_flag(std::integral_constant<int, 2>{}); break;
  }
}

}  // namespace

void cuda_zero_bytes(Context& ctx, uint8_t* ptr, size_t bytes) {
  if (bytes == 0) return;
  CUDA_CHECK(cudaMemsetAsync(ptr, 0, bytes, stream_of(ctx)));
}

void cuda_copy_to_host(Context& ctx, void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_of(ctx)));
  CUDA_CHECK(cudaStreamSynchronize(stream_of(ctx)));
}

void cuda_check_header(Context& ctx, const HeaderCheck& check) {
  if (check.slot == nullptr) return;
  check_header_kernel<<<1, 1, 0, stream_of(ctx)>>>(check);
  CUDA_CHECK(cudaGetLastError());
}

EncodeStatus* cuda_status_area_allocate(Context& ctx, size_t count, EncodeStatus** host) {
  EncodeStatus* device = nullptr;
  CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&device), count * sizeof(EncodeStatus)));
  CUDA_CHECK(cudaMemsetAsync(device, 0, count * sizeof(EncodeStatus), stream_of(ctx)));
  CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(host), count * sizeof(EncodeStatus)));
  return device;
}

void cuda_status_area_free(Context& ctx, EncodeStatus* device, EncodeStatus* host) {
  // Teardown: the stream's work that may still write the area ends first (cudaFree waits for the
  // device anyway); errors are not actionable here.
  if (device != nullptr) {
    cudaStreamSynchronize(stream_of(ctx));
    cudaFree(device);
  }
  if (host != nullptr) cudaFreeHost(host);
}

void cuda_status_area_read(Context& ctx, EncodeStatus* host, EncodeStatus* device, size_t count) {
  const size_t bytes = count * sizeof(EncodeStatus);
  CUDA_CHECK(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream_of(ctx)));
  CUDA_CHECK(cudaMemsetAsync(device, 0, bytes, stream_of(ctx)));
  CUDA_CHECK(cudaStreamSynchronize(stream_of(ctx)));
}

void cuda_bucket_max_bits(Context& ctx, const float* in, const float* residual, int64_t n, int64_t bucket,
                          int64_t buckets, uint32_t* max_bits, EncodeStatus* status, const MaxPassExtras& extras) {
  if (buckets == 0) return;
  constexpr int kThreads = 256;
  cudaStream_t s = stream_of(ctx);
  CUDA_CHECK(cudaMemsetAsync(max_bits, 0, sizeof(uint32_t) * static_cast<size_t>(buckets), s));
  if (aligned_to(in, 16) && aligned_to(residual, 16) && (bucket % 4 == 0 || buckets == 1)) {
    bucket_max_vec_kernel<<<stream_grid(n / 4), kStreamThreads, 0, s>>>(in, residual, n, bucket, max_bits, status,
                                                                        extras);
  } else {
    const int64_t cpb = (bucket + kSumChunk - 1) / kSumChunk;
    bucket_max_kernel<<<grid_for(buckets * cpb * kWarp, kThreads), kThreads, 0, s>>>(in, residual, n, bucket, buckets,
                                                                                     cpb, max_bits, status, extras);
  }
  CUDA_CHECK(cudaGetLastError());
}

void cuda_max_scales(Context& ctx, const uint32_t* max_bits, int64_t buckets, float* scales) {
  if (buckets == 0) return;
  constexpr int kThreads = 256;
  max_scales_kernel<<<grid_for(buckets, kThreads), kThreads, 0, stream_of(ctx)>>>(max_bits, buckets, scales);
  CUDA_CHECK(cudaGetLastError());
}

void cuda_write_header(Context& ctx, uint8_t* out, const WireHeader& h) {
  QT_CHECK(reinterpret_cast<uintptr_t>(out) % 8 == 0, "payload must be 8-byte aligned");
  write_header_kernel<<<1, 32, 0, stream_of(ctx)>>>(out, fields_of(h));
  CUDA_CHECK(cudaGetLastError());
}

void cast_encode_cuda(Context& ctx, QuantMethod method, const float* in, float* residual, uint8_t* body, int64_t n) {
  if (n == 0) return;
  constexpr int kThreads = 256;
  const int grid = grid_for(n, kThreads);
  cudaStream_t s = stream_of(ctx);
  const int kind = kind_of(method);
  // The vector kernel stores float4s (fp32) or 8-byte words (halves) of the body.
  const bool streamed = aligned_to(in, 16) && aligned_to(residual, 16) && aligned_to(body, kind == 0 ? 16 : 8);
  // fp32 is exact: no residual to keep, whatever the caller passed.
  with_cast_kind(kind, kind != 0 && residual != nullptr, [&](auto k, auto ef) {
    if constexpr (k == 0 && ef) return;  // never called (see above); not instantiated
    float* r = ef ? residual : nullptr;
    if (streamed)
      cast_encode_vec_kernel<k, ef><<<stream_grid(n / 4), kStreamThreads, 0, s>>>(in, r, body, n);
    else
      cast_encode_kernel<k, ef><<<grid, kThreads, 0, s>>>(in, r, body, n);
  });
  CUDA_CHECK(cudaGetLastError());
}

void cast_decode_cuda(Context& ctx, QuantMethod method, const uint8_t* body, float* out, int64_t n, bool add) {
  if (n == 0) return;
  constexpr int kThreads = 256;
  const int grid = grid_for(n, kThreads);
  cudaStream_t s = stream_of(ctx);
  const int kind = kind_of(method);
  const HeaderCheck header = take_header_check(ctx);  // made by the decode kernel
  // A payload is only 4-byte aligned on decode (quantizer.cpp), so the body's alignment is checked too.
  const bool streamed = aligned_to(out, 16) && aligned_to(body, kind == 0 ? 16 : 8);
  with_cast_kind(kind, add, [&](auto k, auto a) {
    if (streamed)
      cast_decode_vec_kernel<k, a><<<stream_grid(n / 4), kStreamThreads, 0, s>>>(body, out, n, header);
    else
      cast_decode_kernel<k, a><<<grid, kThreads, 0, s>>>(body, out, n, header);
  });
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace qtrain::quant_detail
