// The CUDA launchers of nvfp4 (nvfp4.cu), called from nvfp4.cpp where the build has them
// (QTRAIN_QUANT_CUDA, quant/kernels.h). nvfp4: header (given; the encoder fills the tensor scale on the device) and
// body; `payload` points at the header, whose tensor scale the decoder reads and checks on the device. They follow the
// CPU loops' arithmetic exactly. Internal to quant/.
#pragma once

#include "quant/kernels.h"
#include "quant/nvfp4_wire.h"

namespace qtrain::quant_detail {

void nvfp4_encode_cuda(Context& ctx, const EncodeArgs& a, bool stochastic, const wire::Nvfp4Layout& l,
                       const WireHeader& h);
void nvfp4_decode_cuda(Context& ctx, const wire::Nvfp4Layout& l, const uint8_t* payload, float* out, bool add);

}  // namespace qtrain::quant_detail
