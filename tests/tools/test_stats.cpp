// The statistics of compare's multi-seed reports against published values: Student t tables, R's
// t.test on its `sleep` data set, the Welch example of Wikipedia's "Welch's t-test" article and closed
// forms of the incomplete beta function and of the t distribution with 1 and 2 degrees of freedom.
#include <catch2/catch.hpp>

#include <cmath>

#include "tools/qtrain/stats.h"

using namespace qtrain::cli::stats;

TEST_CASE("stats: the regularized incomplete beta function against its closed forms", "[stats]") {
  CHECK(regularized_incomplete_beta(0.3, 2.5, 1) == Approx(std::pow(0.3, 2.5)).epsilon(1e-12));  // x^a
  CHECK(regularized_incomplete_beta(0.3, 1, 4.5) == Approx(1 - std::pow(0.7, 4.5)).epsilon(1e-12));
  CHECK(regularized_incomplete_beta(0.5, 7, 7) == Approx(0.5).epsilon(1e-12));  // symmetric
  // I_x(2, 2) = 3x^2 - 2x^3, on both sides of the switch at x = (a + 1) / (a + b + 2) = 0.5.
  for (double x : {0.1, 0.45, 0.55, 0.9})
    CHECK(regularized_incomplete_beta(x, 2, 2) == Approx(3 * x * x - 2 * x * x * x).epsilon(1e-12));
  CHECK(regularized_incomplete_beta(0, 3, 4) == 0);
  CHECK(regularized_incomplete_beta(1, 3, 4) == 1);
}

TEST_CASE("stats: Student t distribution against closed forms and tables", "[stats]") {
  // One degree of freedom is the Cauchy distribution: P(T <= t) = 1/2 + atan(t) / pi.
  CHECK(student_t_cdf(1, 1) == Approx(0.75).epsilon(1e-12));
  CHECK(student_t_cdf(-3, 1) == Approx(0.5 + std::atan(-3.0) / M_PI).epsilon(1e-12));
  // Two: P(T <= t) = 1/2 + t / (2 sqrt(2 + t^2)).
  CHECK(student_t_cdf(2, 2) == Approx(0.5 + 2 / (2 * std::sqrt(6.0))).epsilon(1e-12));
  CHECK(student_t_two_sided_p(2.0, 5) == Approx(0.1019).margin(5e-5));  // scipy: 2 * t.sf(2, 5) = 0.10194
  CHECK(student_t_two_sided_p(0, 5) == Approx(1));
  CHECK(student_t_two_sided_p(-2.0, 5) == Approx(student_t_two_sided_p(2.0, 5)));
  // The 97.5% quantiles of every t table (the factor of a 95% confidence interval).
  CHECK(student_t_quantile(0.975, 1) == Approx(12.706).margin(5e-4));
  CHECK(student_t_quantile(0.975, 2) == Approx(4.303).margin(5e-4));
  CHECK(student_t_quantile(0.975, 4) == Approx(2.776).margin(5e-4));
  CHECK(student_t_quantile(0.975, 9) == Approx(2.262).margin(5e-4));
  CHECK(student_t_quantile(0.975, 30) == Approx(2.042).margin(5e-4));
  CHECK(student_t_quantile(0.025, 4) == Approx(-2.776).margin(5e-4));
  CHECK(student_t_quantile(0.5, 3) == Approx(0).margin(1e-9));
}

TEST_CASE("stats: mean, standard deviation and the 95% confidence interval", "[stats]") {
  const Sample s = describe({1, 2, 3, 4});
  CHECK(s.n == 4);
  CHECK(s.mean == Approx(2.5));
  CHECK(s.sd == Approx(std::sqrt(5.0 / 3)));  // squares 2.25 + 0.25 + 0.25 + 2.25 over n - 1 = 3
  REQUIRE(s.ci_low);
  const double half = 3.182446 * std::sqrt(5.0 / 3) / 2;  // t(0.975, 3) from the table
  CHECK(*s.ci_low == Approx(2.5 - half).epsilon(1e-6));
  CHECK(*s.ci_high == Approx(2.5 + half).epsilon(1e-6));
  // One seed: a value, no spread, no interval.
  const Sample one = describe({0.97});
  CHECK(one.mean == Approx(0.97));
  CHECK(one.sd == 0);
  CHECK_FALSE(one.ci_low);
  CHECK_FALSE(one.ci_high);
}

TEST_CASE("stats: Welch's t-test against R and Wikipedia", "[stats]") {
  // R: t.test(extra ~ group, data = sleep) -> t = -1.8608, df = 17.776, p-value = 0.07939,
  // 95 percent confidence interval -3.3654832 0.2054832.
  const std::vector<double> g1{0.7, -1.6, -0.2, -1.2, -0.1, 3.4, 3.7, 0.8, 0.0, 2.0};
  const std::vector<double> g2{1.9, 0.8, 1.1, 0.1, -0.1, 4.4, 5.5, 1.6, 4.6, 3.4};
  const std::optional<WelchTest> w = welch_test(g1, g2);
  REQUIRE(w);
  CHECK(w->difference == Approx(0.75 - 2.33));
  CHECK(w->t == Approx(-1.8608).margin(5e-5));
  CHECK(w->df == Approx(17.776).margin(5e-4));
  CHECK(w->p == Approx(0.07939).margin(5e-6));
  CHECK(w->difference - w->half_width == Approx(-3.3654832).margin(5e-7));
  CHECK(w->difference + w->half_width == Approx(0.2054832).margin(5e-7));
  // Wikipedia, "Welch's t-test", example 1: t = -2.46, df = 25.0, p = 0.021.
  const std::vector<double> a1{27.5, 21.0, 19.0, 23.6, 17.0, 17.9, 16.9, 20.1,
                               21.9, 22.6, 23.1, 19.6, 19.0, 21.7, 21.4};
  const std::vector<double> a2{27.1, 22.0, 20.8, 23.4, 23.4, 23.5, 25.8, 22.0,
                               24.8, 20.2, 21.9, 22.1, 22.9, 20.5, 24.4};
  const std::optional<WelchTest> e = welch_test(a1, a2);
  REQUIRE(e);
  CHECK(e->t == Approx(-2.46).margin(5e-3));
  CHECK(e->df == Approx(25.0).margin(5e-2));
  CHECK(e->p == Approx(0.021).margin(5e-4));
  // Symmetric in its arguments up to the sign.
  CHECK(welch_test(g2, g1)->t == Approx(-w->t));
  CHECK(welch_test(g2, g1)->p == Approx(w->p));
}

TEST_CASE("stats: Welch's test needs two seeds a side; no spread gives an exact answer", "[stats]") {
  CHECK_FALSE(welch_test({1}, {1, 2}));
  CHECK_FALSE(welch_test({1, 2}, {}));
  const std::optional<WelchTest> same = welch_test({0.97, 0.97}, {0.97, 0.97, 0.97});
  REQUIRE(same);
  CHECK(same->p == 1);
  CHECK(same->difference == 0);
  const std::optional<WelchTest> apart = welch_test({0.96, 0.96}, {0.97, 0.97});
  REQUIRE(apart);
  CHECK(apart->p == 0);
  CHECK(apart->difference == Approx(-0.01));
  // One side without spread: df from the other side alone, n - 1.
  const std::optional<WelchTest> half = welch_test({1, 1, 1}, {1, 2, 3});
  REQUIRE(half);
  CHECK(half->df == Approx(2));
  CHECK(half->t == Approx(-1 / (1 / std::sqrt(3.0))));
}
