// The fp8 payload's body (quant/wire.h has the header every method shares; docs/quantizers.md,
// "Wire format"). Offsets are from the payload's start; the accessors also run in kernels.
#pragma once

#include <cstddef>
#include <cstdint>

#include "quant/wire.h"

namespace qtrain {

namespace wire {

// fp8: a = format (0 e4m3, 1 e5m2), b = scale s as f32 bits (max|v| / the format's largest finite
// magnitude, 448 or 57344), c = 0. Body: n code bytes (sign << 7 | magnitude); value = code's value * s.
inline size_t fp8_body_end(int64_t n) { return kHeaderBytes + static_cast<size_t>(n); }

}  // namespace wire
}  // namespace qtrain
