// Helpers shared by the quantizer tests: gradient-like data (normal and heavy-tailed, never zero),
// encode/decode into vectors, and the list of method specs every property test sweeps (every method
// and variant its descriptor lists).
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "framework/core/context.h"
#include "quant/method.h"
#include "quant/policy.h"
#include "quant/quantizer.h"

namespace qtrain::quant_test {

// N(0, scale^2), with exact zeros replaced (gradients in the tests are never zero).
inline std::vector<float> normal_data(int64_t n, uint64_t seed, double scale = 1.0) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> d(0.0, scale);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) {
    do v = static_cast<float>(d(rng));
    while (v == 0.0f);
  }
  return x;
}

// Student t with 3 degrees of freedom: heavy tails like real gradients.
inline std::vector<float> heavy_data(int64_t n, uint64_t seed, double scale = 1e-3) {
  std::mt19937_64 rng(seed);
  std::student_t_distribution<double> d(3.0);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) {
    do v = static_cast<float>(scale * d(rng));
    while (v == 0.0f);
  }
  return x;
}

inline std::vector<uint8_t> encode(const Quantizer& q, Context& ctx, std::span<const float> x, int64_t column,
                                   QuantState& state) {
  std::vector<uint8_t> out(q.max_encoded_bytes(static_cast<int64_t>(x.size()), column));
  const size_t bytes = q.encode(ctx, x, column, state, out);
  out.resize(bytes);
  return out;
}

inline std::vector<float> decode(const Quantizer& q, Context& ctx, std::span<const uint8_t> payload, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n), -12345.0f);
  q.decode(ctx, payload, n, out);
  return out;
}

inline QuantSpec spec_of(QuantMethod m) { return QuantSpec::defaults(m); }

// Every payload method and variant, as the property tests sweep them: the variants each method's
// descriptor lists (quant/method.h), so that a new method is covered by its registry line. Methods
// without a payload (`payload = false`: powersgd, which the gradient exchange runs as its own
// algorithm) have no Quantizer to test here; tests/comm covers them.
inline std::vector<QuantSpec> all_specs() { return payload_method_variants(); }

// The same specs with error feedback on wherever the method allows it.
inline std::vector<QuantSpec> all_specs_with_ef() {
  std::vector<QuantSpec> s;
  for (QuantSpec q : all_specs()) {
    if (!method_info(q.method).error_feedback_allowed) continue;
    q.error_feedback = true;
    s.push_back(q);
  }
  return s;
}

}  // namespace qtrain::quant_test
