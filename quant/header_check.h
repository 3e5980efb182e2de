// A payload header check under DeferredChecks: the header the receiver predicts for a payload
// (Quantizer::shape_header), compared on the device with the one the payload holds. Quantizer's
// decode offers it to the method's decode launcher, whose decode kernel makes it in its first thread
// (cuda_common.cuh, check_header_in_kernel) instead of a kernel launch of its own; a launcher that
// does not take it leaves it to a kernel of its own (quant/common.cu). Plain data: a kernel argument.
#pragma once

#include <cstdint>

#include "quant/encode_status.h"
#include "quant/wire.h"

namespace qtrain {

struct HeaderCheck {
  const uint8_t* payload = nullptr;  // on the device
  uint8_t expected[wire::kHeaderBytes] = {};
  bool skip_b = false;           // field b is a scale from the data (Quantizer::header_b_from_data): not compared
  EncodeStatus* slot = nullptr;  // the deferred status it reports to (bad); null: nothing to check
};

}  // namespace qtrain
