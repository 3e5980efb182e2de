// The CUDA launchers of topk (sparse.cu), called from topk.cpp where the build has them
// (QTRAIN_QUANT_CUDA, quant/kernels.h). topk: k values (k = count_for_proportion(fraction, n)).
// They follow the CPU loops' arithmetic exactly. Internal to quant/.
#pragma once

#include "quant/kernels.h"

namespace qtrain::quant_detail {

void topk_encode_cuda(Context& ctx, const EncodeArgs& a, int64_t k, const WireHeader& h);
void topk_decode_cuda(Context& ctx, const uint8_t* payload, int64_t n, int64_t k, float* out, bool add);

}  // namespace qtrain::quant_detail
