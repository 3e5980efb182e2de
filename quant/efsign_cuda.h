// The CUDA launchers of efsign (efsign.cu), called from efsign.cpp where the build has them
// (QTRAIN_QUANT_CUDA, quant/kernels.h). efsign: header (given; the kernels write its scale field) and sign words;
// decoded by sign_decode_cuda (quant/sign_words.h). They follow the CPU loops' arithmetic exactly. Internal to quant/.
#pragma once

#include "quant/kernels.h"

namespace qtrain::quant_detail {

void efsign_encode_cuda(Context& ctx, const EncodeArgs& a, const WireHeader& h);

}  // namespace qtrain::quant_detail
