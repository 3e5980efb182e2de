// The CUDA launchers of adaptive (sparse.cu), called from adaptive.cpp where the build has them
// (QTRAIN_QUANT_CUDA, quant/kernels.h). They follow the CPU loops' arithmetic exactly. Internal to quant/.
#pragma once

#include <optional>

#include "quant/adaptive_wire.h"
#include "quant/kernels.h"

namespace qtrain::quant_detail {

// Writes the whole payload, padding included; `bound` is the layout with the entry cap. Returns the
// number of entries sent (read back: a wait), or for a slot (a.slot, Quantizer::encode_slot) nullopt:
// the count stays in the payload on the device, and the checks go through check_status (deferred
// under DeferredChecks).
std::optional<int64_t> adaptive_encode_cuda(Context& ctx, const EncodeArgs& a, const wire::AdaptiveLayout& bound,
                                            double proportion, int64_t sample, int64_t cap, size_t workspace_hint);
// `l` is the layout with the most entries the payload may hold (l.entries): the header's count where
// the host read it, else what the receive slot holds. The kernels read the count from the header
// (field c) and check it, with the length field and the body's count, against that.
void adaptive_decode_cuda(Context& ctx, const wire::AdaptiveLayout& l, const uint8_t* payload, float* out, bool add);

}  // namespace qtrain::quant_detail
