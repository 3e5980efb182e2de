// Elementwise helpers of the gradient exchange on CPU or CUDA buffers: scaling by 1/P, the vote, and the
// fp32 <-> fp16/bf16 conversions of the native 16-bit allreduce (round to nearest even, the same
// bits on both devices: quant/numerics.h is the one implementation).
#pragma once

#include <cstdint>

#include "framework/core/context.h"

namespace qtrain {

// x[i] *= factor for n values in ctx.device()'s memory.
void scale_buffer(Context& ctx, float* x, int64_t n, float factor);
// x[i] = x[i] >= 0 ? 1 : -1: the majority vote of a sum of +-1 decodes (ties, a sum of 0, vote +1).
void vote_buffer(Context& ctx, float* x, int64_t n);
// out16[i] = round(x[i]) as fp16 (bf16 when `bf16`).
void pack_16bit(Context& ctx, const float* x, uint16_t* out16, int64_t n, bool bf16);
// x[i] = float(in16[i]) * factor.
void unpack_16bit(Context& ctx, const uint16_t* in16, float* x, int64_t n, bool bf16, float factor);

// dst <- src, `bytes` bytes, both in ctx.device()'s memory (asynchronous on CUDA, ordered on ctx's stream).
void copy_buffer(Context& ctx, void* dst, const void* src, size_t bytes);
// Host <-> device copies on ctx's stream, complete when they return (CPU contexts: memcpy).
void copy_to_host(Context& ctx, void* host, const void* src, size_t bytes);
void copy_from_host(Context& ctx, void* dst, const void* host, size_t bytes);

namespace cuda_ops {  // buffer_ops.cu (or buffer_ops_nocuda.cpp)
void copy_buffer(Context& ctx, void* dst, const void* src, size_t bytes);
void copy_to_host(Context& ctx, void* host, const void* src, size_t bytes);
void copy_from_host(Context& ctx, void* dst, const void* host, size_t bytes);
void scale_buffer(Context& ctx, float* x, int64_t n, float factor);
void vote_buffer(Context& ctx, float* x, int64_t n);
void pack_16bit(Context& ctx, const float* x, uint16_t* out16, int64_t n, bool bf16);
void unpack_16bit(Context& ctx, const uint16_t* in16, float* x, int64_t n, bool bf16, float factor);
}  // namespace cuda_ops

}  // namespace qtrain
