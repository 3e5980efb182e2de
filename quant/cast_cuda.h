// The CUDA launchers of the fp32 / fp16 / bf16 casts (common.cu), called from cast.cpp where the
// build has them (QTRAIN_QUANT_CUDA, quant/kernels.h): the body only (the caller writes the header),
// with the CPU loops' arithmetic. Internal to quant/.
#pragma once

#include "quant/kernels.h"

namespace qtrain::quant_detail {

void cast_encode_cuda(Context& ctx, QuantMethod method, const float* in, float* residual, uint8_t* body, int64_t n);
void cast_decode_cuda(Context& ctx, QuantMethod method, const uint8_t* body, float* out, int64_t n, bool add);

}  // namespace qtrain::quant_detail
