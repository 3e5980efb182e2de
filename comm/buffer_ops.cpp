// CPU paths of the exchange's elementwise helpers; CUDA buffers go to buffer_ops.cu.
#include "comm/buffer_ops.h"

#include <cstring>

#include "framework/core/float16.h"

namespace qtrain {

void copy_buffer(Context& ctx, void* dst, const void* src, size_t bytes) {
  if (ctx.device().is_cuda()) return cuda_ops::copy_buffer(ctx, dst, src, bytes);
  if (bytes > 0) std::memcpy(dst, src, bytes);
}

void copy_to_host(Context& ctx, void* host, const void* src, size_t bytes) {
  if (ctx.device().is_cuda()) return cuda_ops::copy_to_host(ctx, host, src, bytes);
  if (bytes > 0) std::memcpy(host, src, bytes);
}

void copy_from_host(Context& ctx, void* dst, const void* host, size_t bytes) {
  if (ctx.device().is_cuda()) return cuda_ops::copy_from_host(ctx, dst, host, bytes);
  if (bytes > 0) std::memcpy(dst, host, bytes);
}

void scale_buffer(Context& ctx, float* x, int64_t n, float factor) {
  if (ctx.device().is_cuda()) return cuda_ops::scale_buffer(ctx, x, n, factor);
  for (int64_t i = 0; i < n; ++i) x[i] *= factor;
}

void vote_buffer(Context& ctx, float* x, int64_t n) {
  if (ctx.device().is_cuda()) return cuda_ops::vote_buffer(ctx, x, n);
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] >= 0.0f ? 1.0f : -1.0f;
}

void pack_16bit(Context& ctx, const float* x, uint16_t* out16, int64_t n, bool bf16) {
  if (ctx.device().is_cuda()) return cuda_ops::pack_16bit(ctx, x, out16, n, bf16);
  if (bf16) {
    for (int64_t i = 0; i < n; ++i) out16[i] = float_to_bf16(x[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) out16[i] = float_to_half(x[i]);
  }
}

void unpack_16bit(Context& ctx, const uint16_t* in16, float* x, int64_t n, bool bf16, float factor) {
  if (ctx.device().is_cuda()) return cuda_ops::unpack_16bit(ctx, in16, x, n, bf16, factor);
  if (bf16) {
    for (int64_t i = 0; i < n; ++i) x[i] = bf16_to_float(in16[i]) * factor;
  } else {
    for (int64_t i = 0; i < n; ++i) x[i] = half_to_float(in16[i]) * factor;
  }
}

}  // namespace qtrain
