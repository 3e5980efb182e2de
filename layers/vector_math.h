// Elementwise sigmoid and tanh over arrays, for the CPU references of the layers whose time goes into
// them (the LSTM's gates: glibc's scalar expf/tanhf/expm1f took ~20% of an AN4 step).
//
// float: branch-free Cephes-style approximations written as plain arithmetic on one element, so the
// compiler turns each loop into SIMD code (AVX2 or AVX-512, whichever -march allows) instead of one
// libm call per element. Accuracy (tests/layers/test_vector_math.cpp sweeps every 499th float in
// [-100, 100] against double-precision references): sigmoid within 4 float epsilons relative for inputs
// above -80 (below, the result is under 2e-35 and held to that absolutely); tanh within 3 float epsilons
// relative. NaN in gives NaN out; tanh(+-inf) = +-1, sigmoid(+inf) = 1 and sigmoid(-inf) = 1.8e-35 (the
// clamp below).
// double: std::exp and std::tanh, unchanged, so the float64 gradient checks see the exact functions.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>

namespace qtrain::vector_math {

// e^x for x in [-87, 88] (callers clamp): x = n ln2 + r with |r| <= ln2/2, e^r by Cephes' expf
// polynomial, 2^n put into the exponent bits. n comes from adding 1.5 * 2^23, which rounds x log2(e)
// to an integer in the low mantissa bits under the default rounding mode (no libm call, so it
// vectorizes).
inline float exp_reduced(float x) {
  constexpr float kLog2e = 1.44269504088896341f, kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
  constexpr float kShift = 12582912.0f;  // 1.5 * 2^23
  const float shifted = x * kLog2e + kShift;
  const float n = shifted - kShift;
  const int32_t ni = std::bit_cast<int32_t>(shifted) - std::bit_cast<int32_t>(kShift);
  const float r = (x - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float er = p * r * r + r + 1.0f;
  return er * std::bit_cast<float>((ni + 127) << 23);
}

// 1 / (1 + e^-x). Inputs are clamped to +-80: sigmoid(-80) = 1.8e-35, and past it the exact result
// is below that (and subnormal from -87 on), so nothing representable is lost that a gate could use.
inline float sigmoid(float x) {
  const float c = x < -80.0f ? -80.0f : x > 80.0f ? 80.0f : x;  // NaN passes through
  return 1.0f / (1.0f + exp_reduced(-c));
}

// tanh(|x|) from e^(2|x|) where that is accurate (|x| >= 0.625), Cephes' odd polynomial below it
// (where 1 - 2/(e^2x + 1) would cancel), the sign put back. |x| is clamped to 10, past which tanh rounds to 1.
inline float tanh(float x) {
  const float a = std::fabs(x);
  const float z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const float small = a + a * z * p;
  const float e = exp_reduced(2.0f * (a > 10.0f ? 10.0f : a));
  const float large = 1.0f - 2.0f / (e + 1.0f);
  const float t = a < 0.625f ? small : large;
  return std::copysign(t, x);  // NaN: small and large are NaN, so t is
}

// In place over n values: v[i] = sigmoid(v[i]) / tanh(v[i]).
template <typename T>
void sigmoid_inplace(T* __restrict v, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    for (int64_t i = 0; i < n; ++i) v[i] = sigmoid(v[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) v[i] = T(1) / (T(1) + std::exp(-v[i]));
  }
}

template <typename T>
void tanh_inplace(T* __restrict v, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    for (int64_t i = 0; i < n; ++i) v[i] = tanh(v[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) v[i] = std::tanh(v[i]);
  }
}

}  // namespace qtrain::vector_math
