// CUDA paths of the exchange's elementwise helpers: grid-stride kernels on the context's stream.
#include "comm/buffer_ops.h"
#include "framework/core/check.h"
#include "framework/core/cuda_context.h"
#include "framework/core/float16.h"

namespace qtrain::cuda_ops {
namespace {

__global__ void scale_kernel(float* x, long long n, float factor) {
  for (long long i = blockIdx.x * 1LL * blockDim.x + threadIdx.x; i < n; i += 1LL * gridDim.x * blockDim.x)
    x[i] *= factor;
}

__global__ void vote_kernel(float* x, long long n) {
  for (long long i = blockIdx.x * 1LL * blockDim.x + threadIdx.x; i < n; i += 1LL * gridDim.x * blockDim.x)
    x[i] = x[i] >= 0.0f ? 1.0f : -1.0f;
}

__global__ void pack_kernel(const float* x, uint16_t* out, long long n, bool bf16) {
  for (long long i = blockIdx.x * 1LL * blockDim.x + threadIdx.x; i < n; i += 1LL * gridDim.x * blockDim.x)
    out[i] = bf16 ? float_to_bf16(x[i]) : float_to_half(x[i]);
}

__global__ void unpack_kernel(const uint16_t* in, float* x, long long n, bool bf16, float factor) {
  for (long long i = blockIdx.x * 1LL * blockDim.x + threadIdx.x; i < n; i += 1LL * gridDim.x * blockDim.x)
    x[i] = (bf16 ? bf16_to_float(in[i]) : half_to_float(in[i])) * factor;
}

}  // namespace

void copy_buffer(Context& ctx, void* dst, const void* src, size_t bytes) {
  if (bytes > 0) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, ctx.cuda().stream));
}

void copy_to_host(Context& ctx, void* host, const void* src, size_t bytes) {
  if (bytes == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, ctx.cuda().stream));
  // A wait the host cannot avoid: the caller hands `host` to MPI (or reads it) as soon as we return.
  // Only the host path calls this (MPI, or communication.payload_path host); NCCL keeps payloads on the
  // device.
  CUDA_CHECK(cudaStreamSynchronize(ctx.cuda().stream));
}

void copy_from_host(Context& ctx, void* dst, const void* host, size_t bytes) {
  if (bytes == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, ctx.cuda().stream));
  // The host buffer may be reused as soon as we return.
  CUDA_CHECK(cudaStreamSynchronize(ctx.cuda().stream));
}

void scale_buffer(Context& ctx, float* x, int64_t n, float factor) {
  QT_CHECK(n >= 0, "scale_buffer: negative length {}", n);
  if (n == 0) return;
  scale_kernel<<<blocks_for(n), 256, 0, ctx.cuda().stream>>>(x, n, factor);
  CUDA_CHECK(cudaGetLastError());
}

void vote_buffer(Context& ctx, float* x, int64_t n) {
  QT_CHECK(n >= 0, "vote_buffer: negative length {}", n);
  if (n == 0) return;
  vote_kernel<<<blocks_for(n), 256, 0, ctx.cuda().stream>>>(x, n);
  CUDA_CHECK(cudaGetLastError());
}

void pack_16bit(Context& ctx, const float* x, uint16_t* out16, int64_t n, bool bf16) {
  QT_CHECK(n >= 0, "pack_16bit: negative length {}", n);
  if (n == 0) return;
  pack_kernel<<<blocks_for(n), 256, 0, ctx.cuda().stream>>>(x, out16, n, bf16);
  CUDA_CHECK(cudaGetLastError());
}

void unpack_16bit(Context& ctx, const uint16_t* in16, float* x, int64_t n, bool bf16, float factor) {
  QT_CHECK(n >= 0, "unpack_16bit: negative length {}", n);
  if (n == 0) return;
  unpack_kernel<<<blocks_for(n), 256, 0, ctx.cuda().stream>>>(in16, x, n, bf16, factor);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace qtrain::cuda_ops
