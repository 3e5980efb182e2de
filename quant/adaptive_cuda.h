// The CUDA launchers of adaptive (sparse.cu), called from adaptive.cpp where the build has them
// (QTRAIN_QUANT_CUDA, quant/kernels.h). adaptive: returns the number of entries sent; `bound` is the layout with the
// entry cap. They follow the CPU loops' arithmetic exactly. Internal to quant/.
#pragma once

#include "quant/adaptive_wire.h"
#include "quant/kernels.h"

namespace qtrain::quant_detail {

int64_t adaptive_encode_cuda(Context& ctx, const EncodeArgs& a, const wire::AdaptiveLayout& bound, double proportion,
                             int64_t sample, int64_t cap, size_t workspace_hint);
void adaptive_decode_cuda(Context& ctx, const wire::AdaptiveLayout& l, const uint8_t* payload, float* out, bool add);

}  // namespace qtrain::quant_detail
