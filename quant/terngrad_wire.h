// The terngrad payload's body (quant/wire.h has the header every method shares; docs/quantizers.md,
// "Wire format"). Offsets are from the payload's start; the accessors also run in kernels.
#pragma once

#include <cstddef>
#include <cstdint>

#include "quant/qsgd_wire.h"
#include "quant/wire.h"

namespace qtrain {

namespace wire {

// terngrad: a = 0, b = bucket d (the span's length when it is one bucket), c = 0. The layout of qsgd
// with 2 bits: ceil(n/d) f32 scales s, then per bucket ceil(len/16) u32 words of 2-bit codes, LSB
// first, each bucket starting on a word. Code 0 = 0, 1 = +s, 3 = -s; 2 is never written (malformed).
inline QsgdLayout terngrad_layout(int64_t n, int64_t bucket) { return qsgd_layout(n, bucket, 2); }

}  // namespace wire
}  // namespace qtrain
