// Internal to quant/: what every method's CUDA launchers share. Each method declares its own launchers
// in quant/<method>_cuda.h and defines them in its .cu file; its .cpp calls them only where
// QTRAIN_QUANT_CUDA is 1, so a build without the toolkit needs no stand-ins (the Quantizer base's
// encode_cuda/decode_cuda then refuse a CUDA span, naming the method). The launchers run on ctx's
// stream and follow the CPU loops' arithmetic exactly. Encoders that compute a scale, a count or a NaN
// check report through a small status word, and decoders validate the body in a checking kernel
// before writing: the host reads that word back at once (a wait for the stream), or, under
// DeferredChecks (quant/deferred_checks.h), once for many calls.
#pragma once

#include <cstdint>

#include "framework/core/context.h"
#include "quant/encode_status.h"
#include "quant/header_check.h"
#include "quant/quantizer.h"
#include "quant/wire.h"

// 1 where the quantizers' .cu files are linked: builds with the CUDA toolkit (and the emulator's,
// which shares their host objects). The AddressSanitizer copy of the CPU sources (tests/quant) defines
// QTRAIN_QUANT_CPU_ONLY.
#if QTRAIN_HAS_CUDA && !defined(QTRAIN_QUANT_CPU_ONLY)
#define QTRAIN_QUANT_CUDA 1
#else
#define QTRAIN_QUANT_CUDA 0
#endif

namespace qtrain::quant_detail {

// Helpers (common.cu).
void cuda_zero_bytes(Context& ctx, uint8_t* ptr, size_t bytes);
// Copies device memory to host memory and waits for it.
void cuda_copy_to_host(Context& ctx, void* dst, const void* src, size_t bytes);
// Writes a header (the values are kernel arguments: no host memory involved).
void cuda_write_header(Context& ctx, uint8_t* out, const WireHeader& h);
// A header check (quant/header_check.h) that no decode kernel took, in a kernel of its own (no wait).
void cuda_check_header(Context& ctx, const HeaderCheck& check);

// The device area of DeferredChecks (quant/deferred_checks.h): `count` zeroed status words in device
// memory, and as many in pinned host memory (*host) for reading them back.
EncodeStatus* cuda_status_area_allocate(Context& ctx, size_t count, EncodeStatus** host);
void cuda_status_area_free(Context& ctx, EncodeStatus* device, EncodeStatus* host);
// Copies the first `count` words to `host`, waits for the stream, and zeroes them behind the copy.
void cuda_status_area_read(Context& ctx, EncodeStatus* host, EncodeStatus* device, size_t count);

}  // namespace qtrain::quant_detail
