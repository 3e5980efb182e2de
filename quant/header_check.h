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
  // Bit i set: header byte i is left to the data, not compared (the fields below, where the
  // method's decoder reads and checks them on the device: Quantizer::header_b_from_data,
  // header_c_from_data, and the length where the size varies).
  uint32_t from_data = 0;
  EncodeStatus* slot = nullptr;  // the deferred status it reports to (bad); null: nothing to check
};

// The bytes of header fields (quant/wire.h's layout) as HeaderCheck::from_data bits.
constexpr uint32_t kHeaderTotalBytes = 0xffu << 16;  // the length: bytes 16-23 (a size that varies)
constexpr uint32_t kHeaderFieldBBytes = 0xfu << 24;  // b: bytes 24-27
constexpr uint32_t kHeaderFieldCBytes = 0xfu << 28;  // c: bytes 28-31

}  // namespace qtrain
