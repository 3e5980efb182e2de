// The CUDA launchers of fp8 (fp8.cu), called from fp8.cpp where the build has them
// (QTRAIN_QUANT_CUDA, quant/kernels.h). fp8: header (given; the encoder fills the scale field on the device) and body;
// `payload` points at the header, whose scale the decoder reads and checks on the device. They follow the CPU loops'
// arithmetic exactly. Internal to quant/.
#pragma once

#include "quant/kernels.h"

namespace qtrain::quant_detail {

void fp8_encode_cuda(Context& ctx, const EncodeArgs& a, Fp8Format format, bool stochastic, const WireHeader& h);
void fp8_decode_cuda(Context& ctx, Fp8Format format, const uint8_t* payload, float* out, int64_t n, bool add);

}  // namespace qtrain::quant_detail
