// The CUDA launchers of randomk (randomk.cu), called from randomk.cpp where the build has them
// (QTRAIN_QUANT_CUDA, quant/kernels.h). randomk: k values at the indices of the key in the payload's
// header, which the decode kernel reads on the device. They follow the CPU loops' arithmetic exactly.
// Internal to quant/.
#pragma once

#include "quant/kernels.h"

namespace qtrain::quant_detail {

void randomk_encode_cuda(Context& ctx, const EncodeArgs& a, int64_t k, const WireHeader& h);
void randomk_decode_cuda(Context& ctx, const uint8_t* payload, int64_t n, int64_t k, float* out, bool add);

}  // namespace qtrain::quant_detail
