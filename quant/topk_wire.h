// The topk payload's body (quant/wire.h has the header every method shares; docs/quantizers.md,
// "Wire format"). Offsets are from the payload's start; the accessors also run in kernels.
#pragma once

#include <cstddef>
#include <cstdint>

#include "quant/wire.h"

namespace qtrain {

namespace wire {

// topk: a = 0, b = k, c = 0. Body: k u32 indices (strictly increasing), then k f32 values.
inline size_t topk_body_end(int64_t k) { return kHeaderBytes + 8 * static_cast<size_t>(k); }

}  // namespace wire
}  // namespace qtrain
