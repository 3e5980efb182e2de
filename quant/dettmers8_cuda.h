// The CUDA launchers of dettmers8 (dettmers8.cu), called from dettmers8.cpp where the build has them
// (QTRAIN_QUANT_CUDA, quant/kernels.h). dettmers8: the encoder writes header and body (the scale is computed on the
// device). They follow the CPU loops' arithmetic exactly. Internal to quant/.
#pragma once

#include "quant/dettmers8_wire.h"
#include "quant/kernels.h"

namespace qtrain::quant_detail {

// clusternet: dynamic_tree with clusterNet's search (quant/dettmers8_codes.h) instead of the nearest entry.
void dettmers8_encode_cuda(Context& ctx, Dettmers8Variant variant, bool clusternet, const EncodeArgs& a);
// The decoder reads the scale from the payload's header field b on the device (under DeferredChecks the
// receiver predicts the rest of the header and checks it there; the kernel checks the scale).
void dettmers8_decode_cuda(Context& ctx, Dettmers8Variant variant, const uint8_t* payload, float* out, int64_t n,
                           bool add);

}  // namespace qtrain::quant_detail
