// Student t distribution, confidence intervals and Welch's t-test (see stats.h).
#include "tools/qtrain/stats.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "framework/core/check.h"

namespace qtrain::cli::stats {
namespace {

// The continued fraction of I_x(a, b) (Numerical Recipes 6.4, modified Lentz's method); it converges
// fast for x < (a + 1) / (a + b + 2), which the caller ensures by symmetry.
double beta_continued_fraction(double x, double a, double b) {
  constexpr int kMaxTerms = 500;
  constexpr double kEpsilon = 3e-16;
  constexpr double kTiny = 1e-300;  // keeps a denominator away from zero
  const double qab = a + b, qap = a + 1, qam = a - 1;
  double c = 1, d = 1 - qab * x / qap;
  if (std::fabs(d) < kTiny) d = kTiny;
  d = 1 / d;
  double h = d;
  for (int m = 1; m <= kMaxTerms; ++m) {
    const double m2 = 2.0 * m;
    // The even step of the fraction.
    double aa = m * (b - m) * x / ((qam + m2) * (a + m2));
    d = 1 + aa * d;
    if (std::fabs(d) < kTiny) d = kTiny;
    c = 1 + aa / c;
    if (std::fabs(c) < kTiny) c = kTiny;
    d = 1 / d;
    h *= d * c;
    // The odd step.
    aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2));
    d = 1 + aa * d;
    if (std::fabs(d) < kTiny) d = kTiny;
    c = 1 + aa / c;
    if (std::fabs(c) < kTiny) c = kTiny;
    d = 1 / d;
    const double step = d * c;
    h *= step;
    if (std::fabs(step - 1) < kEpsilon) break;
  }
  return h;
}

}  // namespace

double regularized_incomplete_beta(double x, double a, double b) {
  QT_CHECK(a > 0 && b > 0, "regularized_incomplete_beta: a and b must be positive, got {} and {}", a, b);
  QT_CHECK(x >= 0 && x <= 1, "regularized_incomplete_beta: x must be in [0, 1], got {}", x);
  if (x == 0 || x == 1) return x;
  // x^a (1-x)^b / (a B(a, b)), the factor in front of the continued fraction.
  const double front =
      std::exp(std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) + a * std::log(x) + b * std::log1p(-x));
  if (x < (a + 1) / (a + b + 2)) return front * beta_continued_fraction(x, a, b) / a;
  return 1 - front * beta_continued_fraction(1 - x, b, a) / b;
}

double student_t_two_sided_p(double t, double df) {
  QT_CHECK(df > 0, "student_t: degrees of freedom must be positive, got {}", df);
  if (std::isinf(t)) return 0;
  // P(|T| >= |t|) = I_{df / (df + t^2)}(df / 2, 1 / 2).
  return regularized_incomplete_beta(df / (df + t * t), df / 2, 0.5);
}

double student_t_cdf(double t, double df) {
  const double tail = student_t_two_sided_p(t, df) / 2;
  return t >= 0 ? 1 - tail : tail;
}

double student_t_quantile(double p, double df) {
  QT_CHECK(p > 0 && p < 1, "student_t_quantile: p must be in (0, 1), got {}", p);
  if (p < 0.5) return -student_t_quantile(1 - p, df);
  double low = 0, high = 1;
  while (student_t_cdf(high, df) < p) high *= 2;  // df >= 0.01 and p < 1 - 1e-16 end this quickly
  for (int i = 0; i < 200 && high - low > 1e-12 * std::max(1.0, high); ++i) {
    const double middle = (low + high) / 2;
    (student_t_cdf(middle, df) < p ? low : high) = middle;
  }
  return (low + high) / 2;
}

namespace {
// Seeds that all gave the same value (a deterministic metric, e.g. bits per value) must show no
// spread and that very value, which the rounding of a sum does not guarantee.
bool all_equal(const std::vector<double>& v) {
  return std::all_of(v.begin(), v.end(), [&](double x) { return x == v.front(); });
}
}  // namespace

double mean(const std::vector<double>& v) {
  if (v.empty()) return 0;
  if (all_equal(v)) return v.front();
  double sum = 0;
  for (double x : v) sum += x;
  return sum / static_cast<double>(v.size());
}

double sample_sd(const std::vector<double>& v) {
  if (v.size() < 2 || all_equal(v)) return 0;
  const double m = mean(v);
  double squares = 0;
  for (double x : v) squares += (x - m) * (x - m);
  return std::sqrt(squares / static_cast<double>(v.size() - 1));
}

Sample describe(const std::vector<double>& values) {
  Sample s;
  s.n = static_cast<int>(values.size());
  s.mean = mean(values);
  s.sd = sample_sd(values);
  if (s.n >= 2) {
    const double half = student_t_quantile(0.975, s.n - 1) * s.sd / std::sqrt(static_cast<double>(s.n));
    s.ci_low = s.mean - half;
    s.ci_high = s.mean + half;
  }
  return s;
}

std::optional<WelchTest> welch_test(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() < 2 || b.size() < 2) return std::nullopt;
  WelchTest w;
  w.difference = mean(a) - mean(b);
  const double na = static_cast<double>(a.size()), nb = static_cast<double>(b.size());
  const double va = sample_sd(a) * sample_sd(a) / na, vb = sample_sd(b) * sample_sd(b) / nb;
  const double se = std::sqrt(va + vb);
  if (se == 0) {
    w.t = w.difference == 0 ? 0 : std::copysign(std::numeric_limits<double>::infinity(), w.difference);
    w.p = w.difference == 0 ? 1 : 0;
    return w;
  }
  w.t = w.difference / se;
  w.df = (va + vb) * (va + vb) / (va * va / (na - 1) + vb * vb / (nb - 1));
  w.p = student_t_two_sided_p(w.t, w.df);
  w.half_width = student_t_quantile(0.975, w.df) * se;
  return w;
}

}  // namespace qtrain::cli::stats
