// vector_math: the float sigmoid and tanh the LSTM's gates use and the normalizations' pow, against double-precision
// references over a sweep of the float range the gates see, at the edges of their branches, and at the special values;
// the double versions are the exact library functions.
#include <catch2/catch.hpp>

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "layers/vector_math.h"

using namespace qtrain;

namespace {

// Every stride-th float in [-limit, limit] (both signs, by bit pattern: all magnitudes, tiny to large),
// plus the values next to the branch points.
std::vector<float> sweep(float limit, uint32_t stride) {
  std::vector<float> xs;
  const uint32_t top = std::bit_cast<uint32_t>(limit);
  for (uint32_t u = 0; u <= top; u += stride) {
    const float x = std::bit_cast<float>(u);
    xs.push_back(x);
    xs.push_back(-x);
  }
  for (const float edge : {0.625f, 9.0f, 10.0f, 80.0f, 87.0f, 88.0f}) {
    float below = edge, above = edge;
    for (int k = 0; k < 4; ++k, below = std::nextafter(below, 0.0f), above = std::nextafter(above, 200.0f))
      for (const float x : {below, -below, above, -above}) xs.push_back(x);
  }
  return xs;
}

}  // namespace

TEST_CASE("vector_math: float sigmoid and tanh within a few epsilons of the exact functions", "[vector_math]") {
  std::vector<float> xs = sweep(100.0f, 499);
  std::vector<float> s = xs, t = xs;
  vector_math::sigmoid_inplace(s.data(), static_cast<int64_t>(s.size()));
  vector_math::tanh_inplace(t.data(), static_cast<int64_t>(t.size()));
  double worst_sigmoid = 0, worst_tanh = 0, worst_tiny = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const double x = xs[i];
    const double rs = 1.0 / (1.0 + std::exp(-x)), rt = std::tanh(x);
    if (x >= -80.0)
      worst_sigmoid = std::max(worst_sigmoid, std::abs(s[i] - rs) / rs / FLT_EPSILON);
    else
      worst_tiny = std::max(worst_tiny, std::abs(s[i] - rs));
    if (rt != 0.0)
      worst_tanh = std::max(worst_tanh, std::abs(t[i] - rt) / std::abs(rt) / FLT_EPSILON);
    else
      CHECK(t[i] == 0.0f);
    CHECK(std::signbit(t[i]) == std::signbit(xs[i]));  // tanh is odd, -0 included
  }
  INFO("sigmoid " << worst_sigmoid << " eps, tanh " << worst_tanh << " eps, sigmoid below -80 " << worst_tiny);
  CHECK(worst_sigmoid <= 4.0);
  CHECK(worst_tanh <= 3.0);
  CHECK(worst_tiny <= 2e-35);
  CHECK(xs.size() > 4'000'000);
}

TEST_CASE("vector_math: special values", "[vector_math]") {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> xs{0.0f, -0.0f, inf, -inf, nan, FLT_MAX, -FLT_MAX, FLT_MIN, -FLT_MIN, 1e-40f};
  std::vector<float> s = xs, t = xs;
  vector_math::sigmoid_inplace(s.data(), static_cast<int64_t>(s.size()));
  vector_math::tanh_inplace(t.data(), static_cast<int64_t>(t.size()));
  CHECK(s[0] == 0.5f);
  CHECK(s[1] == 0.5f);
  CHECK(s[2] == 1.0f);
  CHECK(s[3] <= 2e-35f);
  CHECK(s[3] >= 0.0f);
  CHECK(std::isnan(s[4]));
  CHECK(s[5] == 1.0f);
  CHECK(s[6] <= 2e-35f);
  CHECK(t[0] == 0.0f);
  CHECK(std::signbit(t[1]));
  CHECK(t[2] == 1.0f);
  CHECK(t[3] == -1.0f);
  CHECK(std::isnan(t[4]));
  CHECK(t[5] == 1.0f);
  CHECK(t[6] == -1.0f);
  CHECK(t[7] == FLT_MIN);  // tanh(x) = x below an ulp's worth of x^3 / 3
  CHECK(t[8] == -FLT_MIN);
  CHECK(t[9] == 1e-40f);
}

TEST_CASE("vector_math: double is the library's functions", "[vector_math]") {
  std::vector<double> xs{-30.0, -1.5, -0.1, 0.0, 0.3, 2.0, 19.0};
  std::vector<double> s = xs, t = xs;
  vector_math::sigmoid_inplace(s.data(), static_cast<int64_t>(s.size()));
  vector_math::tanh_inplace(t.data(), static_cast<int64_t>(t.size()));
  for (size_t i = 0; i < xs.size(); ++i) {
    CHECK(s[i] == 1.0 / (1.0 + std::exp(-xs[i])));
    CHECK(t[i] == std::tanh(xs[i]));
  }
}

// pow over every 997th positive normal float (all magnitudes) for the exponents the normalizations use
// (-beta) and a few others: relative error within (3 + 2 |e ln x|) epsilons wherever the exact result is
// a normal float (with that bound's margin to FLT_MIN, below which the flush makes it 0, and to
// FLT_MAX), 0 or inf where it is beyond.
TEST_CASE("vector_math: float pow within a few epsilons of the exact function", "[vector_math]") {
  std::vector<float> xs;
  for (uint32_t u = std::bit_cast<uint32_t>(FLT_MIN); u < std::bit_cast<uint32_t>(FLT_MAX); u += 997)
    xs.push_back(std::bit_cast<float>(u));
  for (const float x : {1.0f, 2.0f, 0.5f, std::nextafter(1.41421356f, 0.0f), 1.41421356f, FLT_MAX}) xs.push_back(x);
  for (const float e : {-0.75f, -0.5f, -1.0f, -2.0f, 0.25f, 1.0f, 3.0f}) {
    std::vector<float> p(xs.size());
    for (size_t i = 0; i < xs.size(); ++i) p[i] = vector_math::pow(xs[i], e);
    double worst = 0;
    float worst_x = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
      const double exact = std::pow(static_cast<double>(xs[i]), static_cast<double>(e));
      const double allowed = 3.0 + 2.0 * std::abs(std::log(exact));
      if (exact * (1.0 - allowed * FLT_EPSILON) >= FLT_MIN && exact * (1.0 + allowed * FLT_EPSILON) <= FLT_MAX) {
        const double error = std::abs(p[i] - exact) / exact / FLT_EPSILON / allowed;
        if (error > worst) worst = error, worst_x = xs[i];
      } else if (exact > FLT_MAX * 2.0) {
        CHECK(p[i] == std::numeric_limits<float>::infinity());
      } else if (exact < FLT_MIN / 2.0) {
        CHECK(p[i] == 0.0f);
      }
    }
    INFO("exponent " << e << ": worst error " << worst
                     << " of the allowed (3 + 2 |e ln x|) epsilons, at x = " << worst_x);
    CHECK(worst <= 1.0);
  }
  CHECK(xs.size() > 2'000'000);
}

TEST_CASE("vector_math: pow's special values", "[vector_math]") {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (const float e : {-0.75f, 0.5f, 0.0f}) {
    for (const float x : {0.0f, 1e-40f, inf}) {  // as std::pow (the subnormal as the 0 the flush makes it)
      const float want = std::pow(x == 1e-40f ? 0.0f : x, e), got = vector_math::pow(x, e);
      INFO("pow(" << x << ", " << e << ") = " << got << ", std::pow " << want);
      CHECK(got == want);
    }
    for (const float x : {nan, -1.0f, -inf}) CHECK(std::isnan(vector_math::pow(x, e)));
  }
  CHECK(vector_math::pow(1.0f, -0.75f) == 1.0f);
  CHECK(vector_math::pow(7.0f, 0.0f) == 1.0f);
  CHECK(vector_math::pow_of(2.0, -0.75) == std::pow(2.0, -0.75));
}
