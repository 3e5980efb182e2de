// The CUDA launchers of topk (sparse.cu), called from topk.cpp where the build has them
// (QTRAIN_QUANT_CUDA, quant/kernels.h). `l` is the payload's layout (quant/topk_wire.h: k values, f32
// or codes). They follow the CPU loops' arithmetic exactly. Internal to quant/.
#pragma once

#include "quant/kernels.h"
#include "quant/topk_wire.h"

namespace qtrain::quant_detail {

void topk_encode_cuda(Context& ctx, const EncodeArgs& a, const wire::TopkLayout& l, const WireHeader& h);
void topk_decode_cuda(Context& ctx, const uint8_t* payload, int64_t n, const wire::TopkLayout& l, float* out, bool add);

}  // namespace qtrain::quant_detail
