// Internal to quant/: the factories of the method classes (one per .cpp), which make_quantizer()
// calls with a validated spec whose bucket is already resolved. The classes themselves stay private
// to their .cpp files: the rest of qtrain sees only the Quantizer interface.
#pragma once

#include <memory>

#include "quant/quantizer.h"

namespace qtrain::quant_detail {

std::unique_ptr<Quantizer> make_cast_quantizer(const QuantSpec& spec);  // fp32, fp16, bf16
std::unique_ptr<Quantizer> make_dettmers8_quantizer(const QuantSpec& spec);
std::unique_ptr<Quantizer> make_onebit_quantizer(const QuantSpec& spec);
std::unique_ptr<Quantizer> make_qsgd_quantizer(const QuantSpec& spec);
std::unique_ptr<Quantizer> make_adaptive_quantizer(const QuantSpec& spec);
std::unique_ptr<Quantizer> make_topk_quantizer(const QuantSpec& spec);

// The bucket a spec means when it says 0: onebit 64; qsgd 128 (2 bits), 512 (4, 8), 8192 (16).
int64_t default_bucket(QuantMethod method, int bits);

}  // namespace qtrain::quant_detail
