// The CUDA launchers of terngrad (terngrad.cu), called from terngrad.cpp where the build has them
// (QTRAIN_QUANT_CUDA, quant/kernels.h). terngrad: header (given) and body; `clip` 0 means no clipping.
// They follow the CPU loops' arithmetic exactly. Internal to quant/.
#pragma once

#include "quant/kernels.h"
#include "quant/qsgd_wire.h"

namespace qtrain::quant_detail {

void terngrad_encode_cuda(Context& ctx, const EncodeArgs& a, const wire::QsgdLayout& l, float clip,
                          const WireHeader& h);
void terngrad_decode_cuda(Context& ctx, const wire::QsgdLayout& l, const uint8_t* payload, float* out, bool add);

}  // namespace qtrain::quant_detail
