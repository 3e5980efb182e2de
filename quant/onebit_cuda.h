// The CUDA launchers of onebit (onebit.cu), called from onebit.cpp where the build has them
// (QTRAIN_QUANT_CUDA, quant/kernels.h). onebit: header (given) and body; `payload` points at the header.
// They follow the CPU loops' arithmetic exactly. Internal to quant/.
#pragma once

#include "quant/kernels.h"
#include "quant/onebit_wire.h"

namespace qtrain::quant_detail {

void onebit_encode_cuda(Context& ctx, const EncodeArgs& a, const wire::OnebitLayout& l, const WireHeader& h);
void onebit_decode_cuda(Context& ctx, const wire::OnebitLayout& l, const uint8_t* payload, float* out, bool add);

}  // namespace qtrain::quant_detail
