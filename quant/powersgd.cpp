// powersgd: PowerSGD (Vogels, Karimireddy, Jaggi, NeurIPS 2019) as PyTorch DDP's powerSGD_hook runs
// it. Not a payload quantizer: a rank-r approximation of a gradient matrix needs two all-reduces
// between its compression and its decompression (P = M Q, then Q = M^T P), so the gradient exchange
// runs it as an algorithm of its own (exchange/algorithms/powersgd.cpp). This row holds its parameters,
// their defaults (the hook's PowerSGDState) and checks; `payload = false` tells the rest of qtrain
// that no Quantizer exists for it.
#include "quant/method.h"

namespace qtrain::quant_detail {

const QuantMethodInfo& powersgd_method_info() {
  static const QuantMethodInfo info = [] {
    QuantMethodInfo m;
    m.id = QuantMethod::powersgd;
    m.name = "powersgd";
    using Kind = QuantParamDef::Kind;
    m.params = {
        // The rank r of the approximation M ~ P Q^T (matrix_approximation_rank; min(rows, cols, r) per matrix).
        {.key = "rank", .kind = Kind::integer, .fallback = 1, .min = 1, .max = 64},
        // Steps 0 .. start_iter-1 all-reduce every gradient uncompressed (start_powerSGD_iter).
        {.key = "start_iter",
         .kind = Kind::integer,
         .fallback = 1000,
         .min = 0,
         .max = static_cast<double>(int64_t{1} << 40)},
        // A matrix is compressed only when (rows + cols) * r * min_compression_rate < rows * cols.
        {.key = "min_compression_rate", .kind = Kind::real, .fallback = 2, .min = 0, .max = 1e9},
        // Reuse the previous step's Q (true), or draw a fresh random Q every step (false).
        {.key = "warm_start", .kind = Kind::name, .fallback = 1, .choices = {"false", "true"}},
        // Added to every column norm in the orthogonalization (orthogonalization_epsilon).
        {.key = "epsilon", .kind = Kind::real, .fallback = 0, .min = 0, .max = 1},
    };
    m.error_feedback = true;  // use_error_feedback
    m.algorithm = "powersgd";
    m.payload = false;
    // start_iter 0: the benchmarks that sweep these variants time the compression, not the fp32 warm-up.
    m.variants = {"powersgd:start_iter=0", "powersgd:rank=2:start_iter=0"};
    return m;
  }();
  return info;
}

}  // namespace qtrain::quant_detail
