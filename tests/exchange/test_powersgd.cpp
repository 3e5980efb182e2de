// PowerSGD's pieces in one process: the low-rank arithmetic (exchange/algorithms/low_rank.h) composed as
// powerSGD_hook composes it, against PyTorch's values for a 2-rank simulation over two steps (warm
// start and error feedback carried over); the orthogonalization's properties; which tensors are
// compressed (vectors, the min_compression_rate rule, the rank cap); the method's config keys.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "exchange/algorithms/low_rank.h"
#include "exchange/exchange_config.h"
#include "exchange/gradient_exchange.h"
#include "quant/method.h"
#include "quant/policy.h"
#include "tests/exchange/powersgd_reference.h"

using namespace qtrain;
using namespace qtrain::powersgd_test;

namespace {

QuantizationConfig quantization(const std::string& yaml) {
  auto source = std::make_shared<ConfigSource>();
  source->file = "test";
  ConfigNode n(YAML::Load(yaml), "quantization", source);
  return QuantizationConfig::parse(n);
}

// The largest |got - expected| of a matrix stored transposed in `got_t` (count x len, row c is column c)
// against a row-major len x count `expected`.
double max_error_transposed(const std::vector<float>& got_t, const double* expected, int len, int count) {
  double e = 0;
  for (int i = 0; i < len; ++i)
    for (int c = 0; c < count; ++c)
      e = std::max(e, std::abs(got_t[static_cast<size_t>(c * len + i)] - expected[i * count + c]));
  return e;
}

double max_error(const std::vector<float>& got, const double* expected) {
  double e = 0;
  for (size_t i = 0; i < got.size(); ++i) e = std::max(e, std::abs(got[i] - expected[i]));
  return e;
}

}  // namespace

TEST_CASE("powersgd arithmetic: powerSGD_hook's P, orthogonalized P, Q, M_hat and residuals on 2 ranks", "[powersgd]") {
  Context ctx = Context::cpu(1, 1);
  // Float arithmetic against float64 values of order 1: a few float ulps of every sum.
  const double tol = 2e-5;
  std::vector<float> q_t(kRank * kCols);
  for (int j = 0; j < kCols; ++j)
    for (int k = 0; k < kRank; ++k) q_t[static_cast<size_t>(k * kCols + j)] = reference_q0(j, k);
  std::vector<std::vector<float>> residual(kWorld, std::vector<float>(kRows * kCols, 0.0f));
  for (int step = 0; step < 2; ++step) {
    INFO("step " << step);
    const ReferenceStep& ref = kReference[step];
    // M_r = g_r + e_r, kept in the residual buffer as the exchange keeps it.
    std::vector<std::vector<float>> m = residual;
    for (int r = 0; r < kWorld; ++r)
      for (int i = 0; i < kRows; ++i)
        for (int j = 0; j < kCols; ++j) m[r][static_cast<size_t>(i * kCols + j)] += reference_gradient(step, r, i, j);
    exchange::orthonormalize_rows(ctx, q_t.data(), kRank, kCols, 0.0f);
    std::vector<float> p_sum(kRank * kRows, 0.0f);
    for (int r = 0; r < kWorld; ++r) {
      std::vector<float> p_t(kRank * kRows);
      exchange::project_low_rank(ctx, m[r].data(), kRows, kCols, q_t.data(), kRank, p_t.data());
      CHECK(max_error_transposed(p_t, ref.p_local[r], kRows, kRank) < tol);
      for (size_t i = 0; i < p_t.size(); ++i) p_sum[i] += p_t[i];
    }
    exchange::orthonormalize_rows(ctx, p_sum.data(), kRank, kRows, 0.0f);
    CHECK(max_error_transposed(p_sum, ref.p_orth, kRows, kRank) < tol);
    std::vector<float> q_sum(kRank * kCols, 0.0f);
    for (int r = 0; r < kWorld; ++r) {
      std::vector<float> q_r(kRank * kCols);
      exchange::back_project_low_rank(ctx, m[r].data(), kRows, kCols, p_sum.data(), kRank, q_r.data());
      for (size_t i = 0; i < q_r.size(); ++i) q_sum[i] += q_r[i];
    }
    for (float& v : q_sum) v *= 1.0f / kWorld;
    CHECK(max_error_transposed(q_sum, ref.q_mean, kCols, kRank) < tol);
    q_t = q_sum;  // the warm start of the next step
    for (int r = 0; r < kWorld; ++r) {
      std::vector<float> m_hat(kRows * kCols);
      exchange::expand_low_rank(ctx, p_sum.data(), q_t.data(), kRows, kCols, kRank, m_hat.data(), m[r].data());
      CHECK(max_error(m_hat, ref.m_hat) < tol);
      CHECK(max_error(m[r], ref.residual[r]) < tol);
      residual[r] = m[r];
    }
  }
}

TEST_CASE("orthonormalize_rows: orthonormal rows, the hook's epsilon, a zero row stays zero", "[powersgd]") {
  Context ctx = Context::cpu(1, 1);
  const int count = 4;
  const int64_t len = 700;  // more than the 256 lanes of the dot products, not a multiple of them
  std::vector<float> x(static_cast<size_t>(count * len));
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(std::sin(0.7 * i) + 0.3 * std::cos(0.013 * i * i));
  std::vector<float> y = x;
  exchange::orthonormalize_rows(ctx, y.data(), count, len, 0.0f);
  for (int a = 0; a < count; ++a)
    for (int b = 0; b < count; ++b) {
      double d = 0;
      for (int64_t j = 0; j < len; ++j) d += static_cast<double>(y[a * len + j]) * y[b * len + j];
      INFO("rows " << a << ", " << b);
      CHECK(std::abs(d - (a == b ? 1.0 : 0.0)) < 1e-5);
    }
  // Row 0 only normalized: its direction is kept.
  double n0 = 0;
  for (int64_t j = 0; j < len; ++j) n0 += static_cast<double>(x[j]) * x[j];
  CHECK(std::abs(y[5] - x[5] / std::sqrt(n0)) < 1e-6);
  // Epsilon is added to the norm (col /= ||col|| + eps): a row of norm 2 with eps 2 becomes norm 1/2.
  std::vector<float> z(len, 0.0f);
  z[3] = 2.0f;
  exchange::orthonormalize_rows(ctx, z.data(), 1, len, 2.0f);
  CHECK(z[3] == 0.5f);
  // A zero row (epsilon 0) stays zero instead of becoming NaN, and the other rows are still orthonormalized.
  std::vector<float> w = x;
  for (int64_t j = 0; j < len; ++j) w[static_cast<size_t>(len + j)] = 0.0f;
  exchange::orthonormalize_rows(ctx, w.data(), count, len, 0.0f);
  int64_t non_finite = 0, nonzero_row1 = 0;
  for (size_t i = 0; i < w.size(); ++i) non_finite += !std::isfinite(w[i]);
  for (int64_t j = 0; j < len; ++j) nonzero_row1 += w[static_cast<size_t>(len + j)] != 0.0f;
  CHECK(non_finite == 0);
  CHECK(nonzero_row1 == 0);
}

TEST_CASE("low_rank_shape: vectors are never compressed; matrices only where (n + m) r rate < n m", "[powersgd]") {
  QuantSpec s = QuantSpec::defaults(QuantMethod::powersgd);  // rank 1, min_compression_rate 2
  // A vector (rows 0) and a scalar.
  CHECK_FALSE(GradientExchange::low_rank_shape(s, 0, 4096).compressed);
  CHECK_FALSE(GradientExchange::low_rank_shape(s, 0, 1).compressed);
  // A conv weight [16, 3, 3, 3]: 16 x 27, (16 + 27) * 1 * 2 = 86 < 432.
  LowRankShape conv = GradientExchange::low_rank_shape(s, 16, 16 * 27);
  CHECK(conv.compressed);
  CHECK(conv.rows == 16);
  CHECK(conv.cols == 27);
  CHECK(conv.rank == 1);
  // The boundary: 4 x 4 at rank 1 and rate 2: (4 + 4) * 2 = 16, not < 16; 4 x 5: 18 < 20.
  CHECK_FALSE(GradientExchange::low_rank_shape(s, 4, 16).compressed);
  CHECK(GradientExchange::low_rank_shape(s, 4, 20).compressed);
  // Rank 2: 8 x 9 needs (8 + 9) * 2 * 2 = 68 < 72; 8 x 8: 64, not < 64.
  s.set("rank", 2.0);
  CHECK(GradientExchange::low_rank_shape(s, 8, 72).compressed);
  CHECK_FALSE(GradientExchange::low_rank_shape(s, 8, 64).compressed);
  // The rank is capped by the matrix (min(n, m, r)), then the rule applies: 1 x 1000 at rank 1.
  s.set("rank", 64.0);
  s.set("min_compression_rate", 0.5);
  const LowRankShape thin = GradientExchange::low_rank_shape(s, 1, 1000);
  CHECK(thin.rank == 1);
  CHECK(thin.compressed);  // (1 + 1000) * 0.5 < 1000
}

TEST_CASE("powersgd config: the hook's defaults, its keys checked, its own algorithm, no payload quantizer",
          "[powersgd]") {
  const QuantizationConfig qc = quantization("{method: powersgd}");
  const QuantSpec& s = qc.base;
  CHECK(s.method == QuantMethod::powersgd);
  CHECK(s.error_feedback);
  CHECK(s.integer("rank") == 1);
  CHECK(s.integer("start_iter") == 1000);
  CHECK(s.number("min_compression_rate") == 2.0);
  CHECK(s.choice("warm_start") == "true");
  CHECK(s.number("epsilon") == 0.0);
  CHECK_FALSE(method_info(QuantMethod::powersgd).payload);
  const QuantSpec r2 =
      quantization("{method: powersgd, rank: 2, start_iter: 10, warm_start: false, epsilon: 1.0e-8}").base;
  CHECK(r2.integer("rank") == 2);
  CHECK(r2.integer("start_iter") == 10);
  CHECK(r2.choice("warm_start") == "false");
  CHECK(r2.str() == "powersgd(rank=2, start_iter=10, min_compression_rate=2, warm_start=false, epsilon=1e-08)");
  REQUIRE_THROWS_WITH(quantization("{method: powersgd, rank: 65}"), Catch::Contains("rank") && Catch::Contains("64"));
  REQUIRE_THROWS_WITH(quantization("{method: powersgd, rank: 0}"), Catch::Contains("rank"));
  REQUIRE_THROWS_WITH(quantization("{method: powersgd, warm_start: maybe}"), Catch::Contains("warm_start"));
  REQUIRE_THROWS_WITH(quantization("{method: powersgd, start_iter: -1}"), Catch::Contains("start_iter"));
  REQUIRE_THROWS_WITH(quantization("{method: powersgd, bits: 4}"), Catch::Contains("bits"));
  // Whatever communication.algorithm says, powersgd runs as its own algorithm.
  for (const char* algorithm : {"auto", "allreduce", "allgather", "reduce_scatter_allgather"}) {
    ExchangeConfig cc;
    cc.algorithm = algorithm;
    CHECK(cc.algorithm_for(s) == ReduceAlgorithm::powersgd);
  }
  REQUIRE_THROWS_WITH(make_quantizer(s), Catch::Contains("powersgd is not a payload quantizer"));
}
