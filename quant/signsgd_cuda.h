// The CUDA launchers of signsgd (signsgd.cu), called from signsgd.cpp where the build has them
// (QTRAIN_QUANT_CUDA, quant/kernels.h). signsgd: header (given) and sign words; decoded by sign_decode_cuda
// (quant/sign_words.h). They follow the CPU loops' arithmetic exactly. Internal to quant/.
#pragma once

#include "quant/kernels.h"

namespace qtrain::quant_detail {

void signsgd_encode_cuda(Context& ctx, const EncodeArgs& a, float beta, float one_minus_beta, const WireHeader& h);

}  // namespace qtrain::quant_detail
