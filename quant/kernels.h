// Internal to quant/: the CUDA launchers of every method (common.cu, dettmers8.cu, onebit.cu, qsgd.cu,
// sparse.cu, terngrad.cu, efsign.cu, signsgd.cu, sign_words.cu, randomk.cu; quant/cuda_disabled.cpp in builds without the toolkit, where each throws).
// They run on ctx's stream and follow the CPU loops' arithmetic exactly. Encoders that compute a
// scale, a count or a NaN check read a small status back, which synchronizes the stream; decoders
// validate everything (on the host for the header, in a checking kernel for the body) before writing.
#pragma once

#include <cstdint>

#include "framework/core/context.h"
#include "quant/quantizer.h"
#include "quant/wire.h"

namespace qtrain::quant_detail {

// Helpers (common.cu).
void cuda_zero_bytes(Context& ctx, uint8_t* ptr, size_t bytes);
// Copies device memory to host memory and waits for it.
void cuda_copy_to_host(Context& ctx, void* dst, const void* src, size_t bytes);
// Writes a header (the values are kernel arguments: no host memory involved).
void cuda_write_header(Context& ctx, uint8_t* out, const WireHeader& h);

// fp32 / fp16 / bf16: the body only (the header is written by the caller).
void cast_encode_cuda(Context& ctx, QuantMethod method, const float* in, float* residual, uint8_t* body, int64_t n);
void cast_decode_cuda(Context& ctx, QuantMethod method, const uint8_t* body, float* out, int64_t n, bool add);

// dettmers8: writes header and body (the scale is computed on the device).
void dettmers8_encode_cuda(Context& ctx, Dettmers8Variant variant, const EncodeArgs& a);
void dettmers8_decode_cuda(Context& ctx, Dettmers8Variant variant, float scale, const uint8_t* codes, float* out,
                           int64_t n, bool add);

// onebit / qsgd: header (given) and body. `payload` points at the header.
void onebit_encode_cuda(Context& ctx, const EncodeArgs& a, const wire::OnebitLayout& l, const WireHeader& h);
void onebit_decode_cuda(Context& ctx, const wire::OnebitLayout& l, const uint8_t* payload, float* out, bool add);
void qsgd_encode_cuda(Context& ctx, const EncodeArgs& a, const wire::QsgdLayout& l, QsgdNorm norm, const WireHeader& h);
void qsgd_decode_cuda(Context& ctx, const wire::QsgdLayout& l, const uint8_t* payload, float* out, bool add);

// adaptive: returns the number of entries sent; `bound` is the layout with the entry cap.
int64_t adaptive_encode_cuda(Context& ctx, const EncodeArgs& a, const wire::AdaptiveLayout& bound, double proportion,
                             int64_t sample, int64_t cap, size_t workspace_hint);
void adaptive_decode_cuda(Context& ctx, const wire::AdaptiveLayout& l, const uint8_t* payload, float* out, bool add);

// topk: k values (k = count_for_proportion(fraction, n)).
void topk_encode_cuda(Context& ctx, const EncodeArgs& a, int64_t k, const WireHeader& h);
void topk_decode_cuda(Context& ctx, const uint8_t* payload, int64_t n, int64_t k, float* out, bool add);

// fp8 / mx / nvfp4: header (given; the encoders fill the scale field on the device) and body.
// `payload` points at the header.
void fp8_encode_cuda(Context& ctx, const EncodeArgs& a, Fp8Format format, bool stochastic, const WireHeader& h);
void fp8_decode_cuda(Context& ctx, Fp8Format format, float scale, const uint8_t* payload, float* out, int64_t n,
                     bool add);
void mx_encode_cuda(Context& ctx, const EncodeArgs& a, MxElement element, bool stochastic, const wire::MxLayout& l,
                    const WireHeader& h);
void mx_decode_cuda(Context& ctx, MxElement element, const wire::MxLayout& l, const uint8_t* payload, float* out,
                    bool add);
void nvfp4_encode_cuda(Context& ctx, const EncodeArgs& a, bool stochastic, const wire::Nvfp4Layout& l,
                       const WireHeader& h);
void nvfp4_decode_cuda(Context& ctx, const wire::Nvfp4Layout& l, float tensor_scale, const uint8_t* payload,
                       float* out, bool add);

// terngrad: header (given) and body; `clip` 0 means no clipping.
void terngrad_encode_cuda(Context& ctx, const EncodeArgs& a, const wire::QsgdLayout& l, float clip, const WireHeader& h);
void terngrad_decode_cuda(Context& ctx, const wire::QsgdLayout& l, const uint8_t* payload, float* out, bool add);

// efsign / signsgd: header (given; efsign's kernels write its scale field) and sign words. The words
// (at payload + 32) decode to pos or neg (sign_words.cu).
void efsign_encode_cuda(Context& ctx, const EncodeArgs& a, const WireHeader& h);
void signsgd_encode_cuda(Context& ctx, const EncodeArgs& a, float beta, float one_minus_beta, const WireHeader& h);
void sign_decode_cuda(Context& ctx, const uint8_t* words, int64_t n, float pos, float neg, float* out, bool add);

// randomk: k values at the indices of `key` (the header's).
void randomk_encode_cuda(Context& ctx, const EncodeArgs& a, int64_t k, const WireHeader& h);
void randomk_decode_cuda(Context& ctx, const uint8_t* payload, int64_t n, int64_t k, PhiloxKey key, float* out, bool add);

}  // namespace qtrain::quant_detail
