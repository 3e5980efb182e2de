// Elementwise sigmoid and tanh over arrays, and x^e, for the CPU references of the layers whose time
// goes into them (the LSTM's gates: glibc's scalar expf/tanhf/expm1f took ~20% of an AN4 step; the
// contrast and response normalizations' D^-beta: powf took 5% of the Dettmers convnet's step).
//
// float: branch-free Cephes-style approximations written as plain arithmetic on one element, so the
// compiler turns each loop into SIMD code (AVX2 or AVX-512, whichever -march allows) instead of one
// libm call per element. Accuracy (tests/layers/test_vector_math.cpp sweeps every 499th float in
// [-100, 100] against double-precision references): sigmoid within 4 float epsilons relative for inputs
// above -80 (below, the result is under 2e-35 and held to that absolutely); tanh within 3 float epsilons
// relative. NaN in gives NaN out; tanh(+-inf) = +-1, sigmoid(+inf) = 1 and sigmoid(-inf) = 1.8e-35 (the
// clamp below).
// pow(x, e) = e^(e ln x) within (3 + 2 |e ln x|) float epsilons relative wherever the result is a
// normal float; x = 0 and +inf as std::pow, a negative x or NaN gives NaN (as std::pow does for a
// non-integer e, the normalizations' -beta; it differs for -inf, for NaN^0 and for integer e).
// double: std::exp, std::tanh and std::pow, unchanged, so the float64 gradient checks see the exact
// functions.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
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

// ln x for a positive normal float x: x = 2^k m with m in [sqrt(1/2), sqrt(2)), ln m by Cephes' logf
// polynomial in m - 1, k ln 2 added in two parts (ln 2's high part is exact in float).
inline float log_normal(float x) {
  const int32_t bits = std::bit_cast<int32_t>(x);
  int32_t k = ((bits >> 23) & 0xff) - 127;
  float m = std::bit_cast<float>((bits & 0x007fffff) | 0x3f800000);  // [1, 2)
  const bool high = m > 1.41421356f;
  m = high ? 0.5f * m : m;
  k = high ? k + 1 : k;
  const float f = m - 1.0f, z = f * f, kf = static_cast<float>(k);
  float p = 7.0376836292e-2f;
  p = p * f - 1.1514610310e-1f;
  p = p * f + 1.1676998740e-1f;
  p = p * f - 1.2420140846e-1f;
  p = p * f + 1.4249322787e-1f;
  p = p * f - 1.6668057665e-1f;
  p = p * f + 2.0000714765e-1f;
  p = p * f - 2.4999993993e-1f;
  p = p * f + 3.3333331174e-1f;
  float y = p * f * z;
  y += kf * -2.12194440e-4f;
  y += -0.5f * z;
  return f + y + kf * 0.693359375f;
}

// x^e from e^(e ln x), the special cases by selects (branch-free, so loops over it vectorize). A zero
// or subnormal x counts as 0 (qtrain flushes subnormals); results beyond float's normal range are 0 or
// inf.
inline float pow(float x, float e) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const bool normal = x >= std::numeric_limits<float>::min() && x < kInf;
  const float t = e * log_normal(normal ? x : 1.0f);
  // exp_reduced covers [-87, 88]; the ends of float's range are reached as e^(t -+ 2 ln 2) * 4 or / 4.
  constexpr float kTwoLn2 = 1.38629436f;
  const float shift = t > 87.0f ? -kTwoLn2 : t < -86.0f ? kTwoLn2 : 0.0f;
  const float scale = t > 87.0f ? 4.0f : t < -86.0f ? 0.25f : 1.0f;
  const float u = t + shift;
  const float r = exp_reduced(u < -87.0f ? -87.0f : u > 88.0f ? 88.0f : u) * scale;
  const float finite = t > 88.8f ? kInf : t < -87.34f ? 0.0f : r;  // e^t beyond float's normal range
  const float at_zero = e < 0 ? kInf : e > 0 ? 0.0f : 1.0f;
  const float at_inf = e < 0 ? 0.0f : e > 0 ? kInf : 1.0f;
  // Three plain selects on x (GCC gives up vectorizing the loop for the same cases written with the
  // bool `normal` or an e == 0 select around them).
  const float below = x >= 0.0f ? at_zero : std::numeric_limits<float>::quiet_NaN();  // NaN fails x >= 0
  const float above = x < kInf ? finite : at_inf;
  return x >= std::numeric_limits<float>::min() ? above : below;
}

template <typename T>
T pow_of(T x, T e) {
  if constexpr (std::is_same_v<T, float>) {
    return pow(x, e);
  } else {
    return std::pow(x, e);
  }
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
