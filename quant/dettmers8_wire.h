// The dettmers8 payload's body (quant/wire.h has the header every method shares; docs/quantizers.md,
// "Wire format"). Offsets are from the payload's start; the accessors also run in kernels.
#pragma once

#include <cstddef>
#include <cstdint>

#include "quant/wire.h"

namespace qtrain {

// The variant as the header stores it (field a).
enum class Dettmers8Variant : uint8_t { dynamic_tree = 0, linear = 1 };

namespace wire {

// dettmers8: a = variant (0 dynamic_tree, 1 linear), b = scale M as f32 bits, c = 0; n code bytes.

}  // namespace wire
}  // namespace qtrain
