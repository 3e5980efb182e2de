// The statistics of a `qtrain compare` sweep run with several seeds: the mean, sample standard
// deviation and Student-t 95% confidence interval of one method's seeds, and Welch's t-test of two
// methods (unequal variances), with the Student t distribution computed here (the regularized
// incomplete beta function by its continued fraction, as in Numerical Recipes, 6.4) so that no
// statistics library is needed.
#pragma once

#include <optional>
#include <vector>

namespace qtrain::cli::stats {

// I_x(a, b), the regularized incomplete beta function, for x in [0, 1] and a, b > 0; accurate to
// about 1e-12 relative (the continued fraction stops at 3e-16 relative change, at most 500 terms).
double regularized_incomplete_beta(double x, double a, double b);

// P(T <= t) for Student's t distribution with `df` > 0 degrees of freedom (df need not be whole:
// Welch's test gives fractional ones).
double student_t_cdf(double t, double df);
// The two-sided p-value of t: P(|T| >= |t|).
double student_t_two_sided_p(double t, double df);
// The t with P(T <= t) = p, for p in (0, 1) (bisection on student_t_cdf to 1e-12).
double student_t_quantile(double p, double df);

double mean(const std::vector<double>& v);
// The sample standard deviation (n - 1 in the denominator); 0 for fewer than two values.
double sample_sd(const std::vector<double>& v);

// One method's values over its seeds.
struct Sample {
  int n = 0;
  double mean = 0, sd = 0;
  // The 95% confidence interval of the mean, mean -+ t(0.975, n-1) sd / sqrt(n); absent for n < 2
  // (one seed says nothing about the seed-to-seed spread).
  std::optional<double> ci_low, ci_high;
};
Sample describe(const std::vector<double>& values);

// Welch's t-test of mean(a) - mean(b), neither variance assumed equal to the other.
struct WelchTest {
  double difference = 0;  // mean(a) - mean(b)
  double t = 0, df = 0;   // Welch's t and the Welch-Satterthwaite degrees of freedom
  double p = 1;           // two-sided
  double half_width = 0;  // of the 95% confidence interval of the difference: t(0.975, df) x its standard error
};
// Absent when either side has fewer than two values. When both sides have no spread at all (every
// seed gave the same value), the difference is exact: p is 1 for equal means and 0 otherwise, df 0.
std::optional<WelchTest> welch_test(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace qtrain::cli::stats
