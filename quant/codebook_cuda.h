// The CUDA launchers of codebook (codebook.cu), called from codebook.cpp where the build has them
// (QTRAIN_QUANT_CUDA, quant/kernels.h). They follow the CPU loops' arithmetic exactly (quant/codebook_bins.h).
// Internal to quant/.
#pragma once

#include "quant/codebook_wire.h"
#include "quant/kernels.h"

namespace qtrain::quant_detail {

// Writes the header `h` and the body of l for the span of `a`; the boundaries come from a pool of
// `pool` keys (the span itself when pool == n, else a sample of it).
void codebook_encode_cuda(Context& ctx, const EncodeArgs& a, const wire::CodebookLayout& l, int64_t pool,
                          const WireHeader& h);
// Checks the table (finite, non-decreasing) and a 4-bit payload's unused nibble, then decodes.
void codebook_decode_cuda(Context& ctx, const wire::CodebookLayout& l, const uint8_t* payload, float* out, bool add);

}  // namespace qtrain::quant_detail
