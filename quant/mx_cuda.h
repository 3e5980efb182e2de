// The CUDA launchers of mx (mx.cu), called from mx.cpp where the build has them
// (QTRAIN_QUANT_CUDA, quant/kernels.h). mx: header (given) and body; `payload` points at the header.
// They follow the CPU loops' arithmetic exactly. Internal to quant/.
#pragma once

#include "quant/kernels.h"
#include "quant/mx_wire.h"

namespace qtrain::quant_detail {

void mx_encode_cuda(Context& ctx, const EncodeArgs& a, MxElement element, bool stochastic, const wire::MxLayout& l,
                    const WireHeader& h);
void mx_decode_cuda(Context& ctx, MxElement element, const wire::MxLayout& l, const uint8_t* payload, float* out,
                    bool add);

}  // namespace qtrain::quant_detail
