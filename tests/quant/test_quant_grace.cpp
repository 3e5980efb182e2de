// The GRACE-style methods on the CPU path: terngrad's unbiasedness and clipping, efsign's scale and
// error feedback, signsgd's momentum (signum) with its checkpoint round trip, randomk's indices
// shared by every rank, and the payload checks of each that the randomized corruption test may not
// reach (quant/terngrad.cpp, efsign.cpp, signsgd.cpp, randomk.cpp).
#include <catch2/catch.hpp>

#include <cfloat>
#include <cmath>
#include <cstring>

#include "quant/wire.h"
#include "tests/quant/quant_test_util.h"

using namespace qtrain;
using namespace qtrain::quant_test;

namespace {

float f32_at(const std::vector<uint8_t>& p, size_t off) {
  float v;
  std::memcpy(&v, p.data() + off, 4);
  return v;
}
void put_u32(std::vector<uint8_t>& p, size_t off, uint32_t v) { std::memcpy(p.data() + off, &v, 4); }

QuantSpec spec(const std::string& entry) { return parse_method_entry(entry); }

}  // namespace

TEST_CASE("terngrad is unbiased without clipping: the mean of many decodes converges to the input",
          "[quant][terngrad]") {
  Context ctx = Context::cpu(1, 1);
  const int64_t n = 2048;
  const int repeats = 2000;
  for (const char* entry : {"terngrad:clip=0", "terngrad:clip=0:bucket=100"}) {
    for (const auto& x : {normal_data(n, 77), heavy_data(n, 78)}) {
      CAPTURE(entry);
      auto q = make_quantizer(spec(entry));
      QuantState st(2024, 3, 17);
      std::vector<double> mean(static_cast<size_t>(n), 0.0);
      std::vector<uint8_t> first;
      for (int r = 0; r < repeats; ++r) {
        ctx.set_step(static_cast<uint64_t>(r));
        const auto p = encode(*q, ctx, x, 1, st);
        if (r == 0) first = p;
        const auto y = decode(*q, ctx, p, n);
        for (int64_t i = 0; i < n; ++i) mean[static_cast<size_t>(i)] += y[static_cast<size_t>(i)];
      }
      for (auto& m : mean) m /= repeats;
      uint32_t d;
      std::memcpy(&d, first.data() + 24, 4);
      // decode = s sign(x) Bernoulli(p), p = |x| / s: variance s^2 p (1 - p) / repeats for the mean.
      double sum_dev = 0, sum_var = 0, chi2 = 0;
      int64_t dof = 0;
      auto stats_for = [&](const std::vector<double>& m) {
        sum_dev = sum_var = chi2 = 0;
        dof = 0;
        for (int64_t i = 0; i < n; ++i) {
          const double s = f32_at(first, 32 + 4 * static_cast<size_t>(i / d));
          const double p = std::fabs(x[static_cast<size_t>(i)]) / s;
          const double ulps = 4.0 * FLT_EPSILON * std::fabs(x[static_cast<size_t>(i)]);
          const double var = s * s * p * (1 - p) / repeats + ulps * ulps;
          const double dev = m[static_cast<size_t>(i)] - x[static_cast<size_t>(i)];
          sum_dev += dev;
          sum_var += var;
          if (p * (1 - p) * repeats < 5) continue;
          chi2 += dev * dev / var;
          ++dof;
        }
      };
      stats_for(mean);
      const double z = sum_dev / std::sqrt(sum_var);
      const double chi_z = (chi2 - static_cast<double>(dof)) / std::sqrt(2.0 * static_cast<double>(dof));
      INFO("z = " << z << ", chi2 z = " << chi_z << " over " << dof << " values");
      REQUIRE(dof > n / 4);
      REQUIRE(std::fabs(z) < 6.0);
      REQUIRE(std::fabs(chi_z) < 6.0);
      // The same statistics reject a biased ternarization (round |x| / s to the nearer of 0 and 1).
      std::vector<double> nearest(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        const double s = f32_at(first, 32 + 4 * static_cast<size_t>(i / d));
        const double v = x[static_cast<size_t>(i)];
        nearest[static_cast<size_t>(i)] = std::fabs(v) / s >= 0.5 ? std::copysign(s, v) : 0.0;
      }
      stats_for(nearest);
      REQUIRE((chi2 - static_cast<double>(dof)) / std::sqrt(2.0 * static_cast<double>(dof)) > 100.0);
    }
  }
}

TEST_CASE("terngrad clips to c * sigma: the scale, the outliers at +-s, no clipping when off", "[quant][terngrad]") {
  Context ctx = Context::cpu(1, 1);
  const int64_t n = 5000;
  auto x = normal_data(n, 31, 0.01);
  x[123] = 5.0f;  // outliers far beyond 2.5 sigma
  x[4000] = -3.0f;
  // sigma and max in double, as the paper defines them (the encoder's float sums agree to ~1e-6).
  double mean = 0, var = 0, max = 0;
  for (float v : x) mean += v / static_cast<double>(n);
  for (float v : x) {
    var += (v - mean) * (v - mean) / static_cast<double>(n);
    max = std::max(max, static_cast<double>(std::fabs(v)));
  }
  const double sigma = std::sqrt(var);
  for (double c : {2.5, 1.0}) {
    QuantSpec s = spec_of(QuantMethod::terngrad);
    s.set("clip", c);
    auto q = make_quantizer(s);
    QuantState st(5, 0, 2);
    const auto p = encode(*q, ctx, x, 1, st);
    const double scale = f32_at(p, 32);
    CAPTURE(c, sigma, scale);
    REQUIRE(scale == Approx(c * sigma).epsilon(1e-5));
    REQUIRE(scale < max);
    const auto y = decode(*q, ctx, p, n);
    REQUIRE(y[123] == static_cast<float>(scale));
    REQUIRE(y[4000] == -static_cast<float>(scale));
    for (int64_t i = 0; i < n; ++i) {
      const float v = y[static_cast<size_t>(i)];
      REQUIRE((v == 0 || std::fabs(v) == static_cast<float>(scale)));
    }
  }
  // clip = 0: s is the span's max, and the outlier decodes to itself.
  QuantSpec off = spec_of(QuantMethod::terngrad);
  off.set("clip", 0.0);
  auto q = make_quantizer(off);
  QuantState st(5, 0, 2);
  const auto p = encode(*q, ctx, x, 1, st);
  REQUIRE(f32_at(p, 32) == 5.0f);
  REQUIRE(decode(*q, ctx, p, n)[123] == 5.0f);
  // Equal values (sigma = 0): not clipped to zero, every value decodes to s = the value.
  const std::vector<float> flat(300, 0.25f);
  auto qc = make_quantizer(spec_of(QuantMethod::terngrad));
  const auto pf = encode(*qc, ctx, flat, 1, st);
  REQUIRE(f32_at(pf, 32) == 0.25f);
  for (float v : decode(*qc, ctx, pf, 300)) REQUIRE(v == 0.25f);
}

TEST_CASE("efsign: the scale is ||v||_1 / n and error feedback keeps v = decode + e", "[quant][efsign]") {
  Context ctx = Context::cpu(1, 1);
  const int64_t n = 10007;
  auto q = make_quantizer(spec_of(QuantMethod::efsign));
  REQUIRE(q->error_feedback());  // on by default, as in Karimireddy et al.
  QuantState st(1, 0, 1);
  std::vector<float> v_prev(static_cast<size_t>(n), 0.0f);
  for (int step = 0; step < 3; ++step) {
    ctx.set_step(static_cast<uint64_t>(step));
    const auto g = heavy_data(n, 40 + static_cast<uint64_t>(step));
    // v = g + e, the value encode quantizes (e from the previous step).
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      v[static_cast<size_t>(i)] = g[static_cast<size_t>(i)] + (step == 0 ? 0.0f : st.residual().data<float>()[i]);
    double l1 = 0;
    for (float a : v) l1 += std::fabs(a);
    const auto p = encode(*q, ctx, g, 1, st);
    const float scale = f32_at(p, 24);
    CAPTURE(step);
    REQUIRE(scale == Approx(l1 / static_cast<double>(n)).epsilon(1e-5));
    const auto y = decode(*q, ctx, p, n);
    const float* e = st.residual().data<float>();
    for (int64_t i = 0; i < n; ++i) {
      const float vi = v[static_cast<size_t>(i)], yi = y[static_cast<size_t>(i)];
      REQUIRE(std::fabs(yi) == scale);
      REQUIRE((yi < 0) == (vi < 0));
      // e is v - decode exactly as float subtraction gives it; decode + e then restores v to within
      // the one rounding of that subtraction (exact when |v| and s are within a factor 2).
      const float want = vi - yi;
      REQUIRE(std::memcmp(&e[i], &want, 4) == 0);
      REQUIRE(std::fabs((yi + e[i]) - vi) <= std::fabs(e[i]) * FLT_EPSILON);
    }
  }
}

TEST_CASE("signum keeps m = beta m + (1 - beta) g in its state, sends sign(m), and restores from a checkpoint",
          "[quant][signsgd]") {
  Context ctx = Context::cpu(1, 1);
  const int64_t n = 777;
  auto q = make_quantizer(spec("signsgd:momentum=0.9"));
  QuantState st(3, 1, 9);
  q->init_state(st, n, Device::cpu());
  auto named = st.state();
  REQUIRE(named.size() == 1);
  REQUIRE(named[0].first == "momentum");
  std::vector<float> m(static_cast<size_t>(n), 0.0f);
  const float beta = 0.9f, omb = 1.0f - beta;
  auto step = [&](QuantState& s, int k) {
    ctx.set_step(static_cast<uint64_t>(k));
    return encode(*q, ctx, normal_data(n, 100 + static_cast<uint64_t>(k)), 1, s);
  };
  for (int k = 0; k < 4; ++k) {
    const auto g = normal_data(n, 100 + static_cast<uint64_t>(k));
    for (int64_t i = 0; i < n; ++i)
      m[static_cast<size_t>(i)] = beta * m[static_cast<size_t>(i)] + omb * g[static_cast<size_t>(i)];
    const auto y = decode(*q, ctx, step(st, k), n);
    REQUIRE(std::memcmp(st.momentum().data<float>(), m.data(), 4 * static_cast<size_t>(n)) == 0);
    for (int64_t i = 0; i < n; ++i)
      REQUIRE(y[static_cast<size_t>(i)] == (m[static_cast<size_t>(i)] < 0 ? -1.0f : 1.0f));
  }
  // A checkpoint of the state (copied into a fresh state's live buffers) continues bit for bit.
  QuantState restored(3, 1, 9);
  q->init_state(restored, n, Device::cpu());
  std::memcpy(restored.state()[0].second.data<float>(), st.momentum().data<float>(), 4 * static_cast<size_t>(n));
  REQUIRE(step(restored, 4) == step(st, 4));
  REQUIRE(std::memcmp(restored.momentum().data<float>(), st.momentum().data<float>(), 4 * static_cast<size_t>(n)) == 0);
  // A fresh state (no checkpoint) does not: the momentum is part of what signum sends.
  QuantState fresh(3, 1, 9);
  REQUIRE(step(fresh, 5) != step(st, 5));
  // Without momentum there is no state to keep; the owner of a stripe re-encodes the vote without it.
  QuantState plain(3, 1, 9);
  make_quantizer(spec_of(QuantMethod::signsgd))->init_state(plain, n, Device::cpu());
  REQUIRE(plain.state().empty());
  REQUIRE(method_info(QuantMethod::signsgd).owner_spec(spec("signsgd:momentum=0.9")) == spec_of(QuantMethod::signsgd));
  REQUIRE(method_info(QuantMethod::signsgd).combine == QuantCombine::vote);
}

TEST_CASE("randomk: every rank draws the same indices for the same seed, step and tensor", "[quant][randomk]") {
  Context ctx = Context::cpu(1, 1);
  const int64_t n = 10000;
  QuantSpec s = spec_of(QuantMethod::randomk);
  s.set("fraction", 0.013);
  auto q = make_quantizer(s);
  const int64_t k = 130;
  // The positions a payload sends: decode it and see which values are not zero (data never is).
  auto sent = [&](int rank, uint64_t step, uint64_t tensor, uint64_t data_seed) {
    QuantState st(42, rank, tensor);
    ctx.set_step(step);
    const auto x = normal_data(n, data_seed);
    const auto p = encode(*q, ctx, x, 1, st);
    REQUIRE(p.size() == (32 + 4 * static_cast<size_t>(k) + 7) / 8 * 8);
    const auto y = decode(*q, ctx, p, n);
    std::vector<int64_t> idx;
    for (int64_t i = 0; i < n; ++i)
      if (y[static_cast<size_t>(i)] != 0) {
        REQUIRE(y[static_cast<size_t>(i)] == x[static_cast<size_t>(i)]);  // sent exactly
        idx.push_back(i);
      }
    REQUIRE(static_cast<int64_t>(idx.size()) == k);
    return idx;
  };
  const auto base = sent(0, 7, 3, 1);
  REQUIRE(sent(1, 7, 3, 2) == base);  // another rank, other data: the same indices
  REQUIRE(sent(5, 7, 3, 3) == base);
  REQUIRE(sent(0, 8, 3, 1) != base);  // another step
  REQUIRE(sent(0, 7, 4, 1) != base);  // another tensor
  // One index per stratum [floor(j n / k), floor((j + 1) n / k)).
  for (int64_t j = 0; j < k; ++j) {
    REQUIRE(base[static_cast<size_t>(j)] >= j * n / k);
    REQUIRE(base[static_cast<size_t>(j)] < (j + 1) * n / k);
  }
  // Over many steps every position is drawn about k / n of the time.
  std::vector<int> hits(static_cast<size_t>(n), 0);
  for (uint64_t step = 0; step < 400; ++step)
    for (int64_t i : sent(0, step, 3, 1)) ++hits[static_cast<size_t>(i)];
  double chi2 = 0;
  const double expect = 400.0 * k / n;
  for (int h : hits) chi2 += (h - expect) * (h - expect) / expect;
  REQUIRE(std::fabs(chi2 - n) / std::sqrt(2.0 * n) < 6.0);
}

TEST_CASE("randomk error feedback: sent positions leave e = 0, the others e = v", "[quant][randomk]") {
  Context ctx = Context::cpu(1, 1);
  const int64_t n = 3000;
  auto q = make_quantizer(spec_of(QuantMethod::randomk));
  REQUIRE(q->error_feedback());
  QuantState st(9, 2, 4);
  std::vector<float> e(static_cast<size_t>(n), 0.0f);
  for (int step = 0; step < 3; ++step) {
    ctx.set_step(static_cast<uint64_t>(step));
    const auto g = normal_data(n, 60 + static_cast<uint64_t>(step));
    const auto y = decode(*q, ctx, encode(*q, ctx, g, 1, st), n);
    for (int64_t i = 0; i < n; ++i) {
      const float v = g[static_cast<size_t>(i)] + e[static_cast<size_t>(i)];
      const float yi = y[static_cast<size_t>(i)];
      REQUIRE((yi == 0 || yi == v));
      e[static_cast<size_t>(i)] = yi == 0 ? v : 0.0f;
      REQUIRE(st.residual().data<float>()[i] == e[static_cast<size_t>(i)]);
    }
  }
}

TEST_CASE("GRACE methods refuse malformed payloads with a message naming the field", "[quant][malformed]") {
  Context ctx = Context::cpu(1, 1);
  auto make = [&](QuantMethod m, int64_t n) {
    auto q = make_quantizer(spec_of(m));
    QuantState st(1, 0, 1);
    return std::pair{std::move(q), encode(*q, ctx, normal_data(n, 5), 1, st)};
  };
  auto dec = [&](const Quantizer& q, const std::vector<uint8_t>& p, int64_t n) {
    std::vector<float> out(static_cast<size_t>(n));
    q.decode(ctx, p, n, out);
  };
  {
    auto [q, p] = make(QuantMethod::terngrad, 600);
    auto bad = p;
    put_u32(bad, 36, 0x2u);  // code 2 in the first word
    REQUIRE_THROWS_WITH(dec(*q, bad, 600), Catch::Contains("terngrad payload: bucket 0 word 0 holds code 2"));
    bad = p;
    put_u32(bad, 32, 0xbf800000u);  // scale -1
    REQUIRE_THROWS_WITH(dec(*q, bad, 600), Catch::Contains("bucket 0 has scale -1"));
    bad = p;
    put_u32(bad, 24, 0);
    REQUIRE_THROWS_WITH(dec(*q, bad, 600), Catch::Contains("bucket size 0"));
  }
  {
    auto [q, p] = make(QuantMethod::efsign, 600);
    auto bad = p;
    put_u32(bad, 24, 0x7fc00000u);
    REQUIRE_THROWS_WITH(dec(*q, bad, 600), Catch::Contains("efsign payload: scale field 0x7fc00000"));
    put_u32(bad, 24, 0x80000001u);  // negative
    REQUIRE_THROWS_AS(dec(*q, bad, 600), InputError);
  }
  {
    auto [q, p] = make(QuantMethod::signsgd, 600);
    auto bad = p;
    put_u32(bad, 4, 1);
    REQUIRE_THROWS_WITH(dec(*q, bad, 600), Catch::Contains("signsgd payload: reserved fields must be zero"));
  }
  {
    auto [q, p] = make(QuantMethod::randomk, 1000);  // k = 10
    auto bad = p;
    put_u32(bad, 4, 1001);
    REQUIRE_THROWS_WITH(dec(*q, bad, 1000), Catch::Contains("randomk payload: 1001 values sent of 1000"));
    put_u32(bad, 4, 0);
    REQUIRE_THROWS_WITH(dec(*q, bad, 1000), Catch::Contains("0 values sent of 1000"));
    put_u32(bad, 4, 11);  // more values than the body holds
    REQUIRE_THROWS_WITH(dec(*q, bad, 1000), Catch::Contains("length field"));
  }
}
