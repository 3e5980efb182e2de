// The CUDA launchers of qsgd (qsgd.cu), called from qsgd.cpp where the build has them
// (QTRAIN_QUANT_CUDA, quant/kernels.h). qsgd: header (given) and body; `payload` points at the header.
// They follow the CPU loops' arithmetic exactly. Internal to quant/.
#pragma once

#include "quant/kernels.h"
#include "quant/qsgd_wire.h"

namespace qtrain::quant_detail {

void qsgd_encode_cuda(Context& ctx, const EncodeArgs& a, const wire::QsgdLayout& l, QsgdNorm norm, const WireHeader& h);
void qsgd_decode_cuda(Context& ctx, const wire::QsgdLayout& l, const uint8_t* payload, float* out, bool add);

}  // namespace qtrain::quant_detail
