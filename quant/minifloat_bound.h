// The round-trip rule of the float-format quantizers (fp8, mx, nvfp4) for their descriptors'
// within_bound: a decoded value is the input rounded to the element format under its block's (or
// tensor's) decode scale d, saturated at the format's largest magnitude. Internal to quant/.
#pragma once

#include <algorithm>
#include <cfloat>
#include <cmath>

namespace qtrain::quant_detail {

struct FloatFormatBound {
  int mant = 3;            // mantissa bits
  int emin = -6;           // exponent of the smallest normal binade (1 - bias)
  double max_value = 448;  // largest finite magnitude
};

// Whether y (decoded) is within the rounding of x under decode scale d: half a step of the element
// format at |x| / d (a whole step with stochastic rounding), or the saturation error where |x| / d
// is beyond the largest magnitude; plus 2^-20 of |x| for the float rounding of the reciprocal scale,
// and 2^-149 for a product that decode rounds into the float subnormals. Scales below FLT_MIN come from
// spans whose values are too small to scale (their reciprocal would overflow): those encode as zeros.
inline bool float_format_within_bound(const FloatFormatBound& f, double x, double y, double d, bool stochastic) {
  if (y != 0 && std::signbit(y) != std::signbit(x)) return false;
  if (d < FLT_MIN && y == 0) return true;
  const double a = std::fabs(x) / d;
  const int e = a > 0 ? std::max(std::ilogb(a), f.emin) : f.emin;
  const double step = std::ldexp(1.0, e - f.mant) * d;
  double bound = (stochastic ? 1.0 : 0.5) * step;
  if (a > f.max_value) bound = std::max(bound, (a - f.max_value) * d);
  return std::fabs(y - x) <= bound * (1 + 0x1p-18) + std::fabs(x) * 0x1p-20 + 0x1p-149;
}

}  // namespace qtrain::quant_detail
