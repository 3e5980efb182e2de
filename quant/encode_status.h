// The status word a CUDA quantizer's kernels report through (atomicOr of flags, a count): read back
// by the host after the kernels, at once or batched (quant/deferred_checks.h). Plain data, so that
// host code can hold the copies it reads back.
#pragma once

#include <cstdint>

namespace qtrain {

struct EncodeStatus {
  uint32_t non_finite;  // set (atomicOr) when the input holds NaN or Inf
  uint32_t bad;         // decoders: set when a payload check fails
  uint32_t overflow;    // set when a scale or mean of finite values overflows (values near FLT_MAX)
  uint64_t count;       // adaptive: entries sent
};

}  // namespace qtrain
