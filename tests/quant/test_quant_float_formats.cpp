// The float-format quantizers (fp8, mx, nvfp4) against the specifications' worked values: the element
// formats' representable values and maxima (OCP FP8, OCP MX v1.0 section 5.3), round-to-nearest-even
// ties, saturation, subnormals, every rounding against a double-precision reference, the E8M0 scale
// choice (MX 6.3), NVFP4's two-level scales, the packing order, stochastic rounding's mean, and the
// payload checks specific to these formats.
#include <catch2/catch.hpp>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <random>

#include "quant/minifloat.h"
#include "quant/wire.h"
#include "tests/quant/quant_test_util.h"

using namespace qtrain;
using namespace qtrain::quant_detail;
using namespace qtrain::quant_test;

namespace {

template <class F>
uint32_t nearest(double a) {
  return minifloat_magnitude<F, false>(float_bits(static_cast<float>(a)), 0);
}

template <class F>
double value(uint32_t code) {
  return minifloat_value<F>(code);
}

// The reference rounding in long double precision: the nearest magnitude among all finite codes, ties
// to the even code, beyond the largest magnitude saturated.
template <class F>
uint32_t reference_nearest(long double a) {
  uint32_t best = 0;
  long double best_err = INFINITY;
  for (uint32_t c = 0; c <= F::kMaxCode; ++c) {
    const long double err = std::fabs(value<F>(c) - a);
    if (err < best_err || (err == best_err && c % 2 == 0)) best = c, best_err = err;
  }
  return best;
}

template <class F>
void check_against_reference(uint64_t seed) {
  std::mt19937_64 rng(seed);
  const double top = value<F>(F::kMaxCode);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (int i = 0; i < 20000; ++i) {
    // Log-uniform over the format's range and beyond, plus the exact midpoints between codes.
    double a;
    if (i % 4 == 0) {
      const uint32_t c = static_cast<uint32_t>(rng() % F::kMaxCode);
      a = (value<F>(c) + value<F>(c + 1)) / 2;
    } else {
      a = top * std::exp2(-30.0 * unit(rng) + 2.0);
    }
    const float af = static_cast<float>(a);
    CAPTURE(af);
    REQUIRE(nearest<F>(af) == reference_nearest<F>(af));
  }
}

std::vector<uint8_t> encode_with(const QuantSpec& s, const std::vector<float>& x, uint64_t step = 0) {
  Context ctx = Context::cpu(1, 1);
  ctx.set_step(step);
  auto q = make_quantizer(s);
  QuantState st(5, 0, 2);
  return encode(*q, ctx, x, 1, st);
}

QuantSpec spec(QuantMethod m, std::initializer_list<std::pair<const char*, const char*>> params = {}) {
  QuantSpec s = QuantSpec::defaults(m);
  for (auto [k, v] : params) s.set(k, v);
  return s;
}

}  // namespace

TEST_CASE("element formats: representable values and maxima of the specs", "[quant][float]") {
  // FP4 E2M1 (MX 5.3.3): the eight magnitudes.
  const double e2m1[] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  for (uint32_t c = 0; c < 8; ++c) REQUIRE(value<FloatE2M1>(c) == e2m1[c]);
  REQUIRE(value<FloatE2M1>(0xf) == -6);
  // Maxima: E4M3 448 (S.1111.110), E5M2 57344 (S.11110.11), E3M2 28, E2M3 7.5.
  REQUIRE(value<FloatE4M3>(0x7e) == 448);
  REQUIRE(value<FloatE5M2>(0x7b) == 57344);
  REQUIRE(value<FloatE3M2>(0x1f) == 28);
  REQUIRE(value<FloatE2M3>(0x1f) == 7.5);
  // Smallest subnormals: 2^-9, 2^-16, 2^-4, 2^-3, 0.5; smallest normals 2^-6, 2^-14, 2^-2, 1, 1.
  REQUIRE(value<FloatE4M3>(1) == std::ldexp(1, -9));
  REQUIRE(value<FloatE5M2>(1) == std::ldexp(1, -16));
  REQUIRE(value<FloatE3M2>(1) == 0.0625);
  REQUIRE(value<FloatE2M3>(1) == 0.125);
  REQUIRE(value<FloatE4M3>(8) == std::ldexp(1, -6));
  REQUIRE(value<FloatE5M2>(4) == std::ldexp(1, -14));
  REQUIRE(value<FloatE3M2>(4) == 0.25);
  REQUIRE(value<FloatE2M3>(8) == 1);
  // Codes the encoders never write: E4M3's NaN, E5M2's Inf and NaNs.
  REQUIRE(invalid_magnitude<FloatE4M3>(0x7f));
  REQUIRE_FALSE(invalid_magnitude<FloatE4M3>(0x7e));
  for (uint32_t c : {0x7cu, 0x7du, 0x7eu, 0x7fu}) REQUIRE(invalid_magnitude<FloatE5M2>(c));
  REQUIRE_FALSE(invalid_magnitude<FloatE5M2>(0x7b));
  REQUIRE_FALSE(invalid_magnitude<FloatE2M1>(0x7));
}

TEST_CASE("element rounding: nearest even ties, saturation, subnormals", "[quant][float]") {
  // E2M1 ties: 0.25 -> 0, 0.75 -> 1, 1.25 -> 1, 1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4.
  REQUIRE(nearest<FloatE2M1>(0.25) == 0);
  REQUIRE(nearest<FloatE2M1>(0.75) == 2);
  REQUIRE(nearest<FloatE2M1>(1.25) == 2);
  REQUIRE(nearest<FloatE2M1>(1.75) == 4);
  REQUIRE(nearest<FloatE2M1>(2.5) == 4);
  REQUIRE(nearest<FloatE2M1>(3.5) == 6);
  REQUIRE(nearest<FloatE2M1>(5) == 6);
  REQUIRE(nearest<FloatE2M1>(5.0001) == 7);
  // E4M3: 17 lies between 16 and 18 -> 16 (even mantissa); 19 -> 20.
  REQUIRE(value<FloatE4M3>(nearest<FloatE4M3>(17)) == 16);
  REQUIRE(value<FloatE4M3>(nearest<FloatE4M3>(19)) == 20);
  // Saturation to the largest normal, never to E4M3's NaN code: 464 would round to 480 (S.1111.111).
  REQUIRE(nearest<FloatE4M3>(464) == 0x7e);
  REQUIRE(nearest<FloatE4M3>(1e30) == 0x7e);
  REQUIRE(nearest<FloatE5M2>(61440) == 0x7b);  // the tie to 65536 (Inf) saturates
  REQUIRE(nearest<FloatE5M2>(FLT_MAX) == 0x7b);
  REQUIRE(nearest<FloatE3M2>(30) == 0x1f);
  REQUIRE(nearest<FloatE2M3>(7.75) == 0x1f);
  REQUIRE(nearest<FloatE2M1>(100) == 0x7);
  // Subnormals: E4M3 2^-10 is the tie between 0 and 2^-9 -> 0; 1.5 * 2^-9 -> 2 * 2^-9; 7.5 * 2^-9
  // rounds up into the smallest normal 2^-6 (code 8).
  REQUIRE(nearest<FloatE4M3>(std::ldexp(1, -10)) == 0);
  REQUIRE(nearest<FloatE4M3>(std::ldexp(1.5, -9)) == 2);
  REQUIRE(nearest<FloatE4M3>(std::ldexp(3, -9)) == 3);
  REQUIRE(nearest<FloatE4M3>(std::ldexp(7.5, -9)) == 8);
  REQUIRE(nearest<FloatE5M2>(std::ldexp(1, -16)) == 1);
  REQUIRE(nearest<FloatE5M2>(std::ldexp(3, -17)) == 2);
  REQUIRE(nearest<FloatE3M2>(0.0625) == 1);
  REQUIRE(nearest<FloatE3M2>(0.09375) == 2);  // 1.5 * 2^-4: tie -> 2
  REQUIRE(nearest<FloatE2M3>(0.125 * 3) == 3);
  REQUIRE(nearest<FloatE2M3>(0.125 * 2.5) == 2);
  REQUIRE(nearest<FloatE2M1>(0.4) == 1);
  // Float subnormal inputs round to zero in every format.
  REQUIRE(nearest<FloatE5M2>(1e-40) == 0);
  REQUIRE(nearest<FloatE2M1>(1e-45) == 0);
}

TEST_CASE("element rounding equals a double-precision nearest-even reference everywhere", "[quant][float]") {
  check_against_reference<FloatE4M3>(1);
  check_against_reference<FloatE5M2>(2);
  check_against_reference<FloatE3M2>(3);
  check_against_reference<FloatE2M3>(4);
  check_against_reference<FloatE2M1>(5);
  // Every code's value rounds to the code itself.
  for (uint32_t c = 0; c <= 0x7e; ++c) REQUIRE(nearest<FloatE4M3>(value<FloatE4M3>(c)) == c);
  for (uint32_t c = 0; c <= 0x7b; ++c) REQUIRE(nearest<FloatE5M2>(value<FloatE5M2>(c)) == c);
  for (uint32_t c = 0; c <= 0x1f; ++c) REQUIRE(nearest<FloatE3M2>(value<FloatE3M2>(c)) == c);
  for (uint32_t c = 0; c <= 0x1f; ++c) REQUIRE(nearest<FloatE2M3>(value<FloatE2M3>(c)) == c);
}

TEST_CASE("MX scale: X = floor(log2(max)) - emax_elem, clamped at 2^-127", "[quant][float][mx]") {
  REQUIRE(mx_scale_code<FloatE4M3>(float_bits(448.0f)) == 127);  // floor(log2 448) = 8 = emax
  REQUIRE(mx_scale_code<FloatE4M3>(float_bits(1.0f)) == 127 - 8);
  REQUIRE(mx_scale_code<FloatE2M1>(float_bits(6.0f)) == 127);  // emax 2
  REQUIRE(mx_scale_code<FloatE2M1>(float_bits(7.99f)) == 127);
  REQUIRE(mx_scale_code<FloatE2M1>(float_bits(8.0f)) == 128);
  REQUIRE(mx_scale_code<FloatE5M2>(float_bits(0.001f)) == static_cast<uint32_t>(127 - 10 - 15));
  REQUIRE(mx_scale_code<FloatE3M2>(float_bits(FLT_MAX)) == 254 - 4);  // the largest a finite block has
  REQUIRE(mx_scale_code<FloatE4M3>(float_bits(1e-38f)) == 0);         // clamped: 2^-127
  REQUIRE(mx_scale_code<FloatE4M3>(0) == 0);

  // Through the quantizer: a block of 32 with max 3.9 (X = 1 - 2 = -1 for FP4), another of 40 (X = 3).
  std::vector<float> x(64, 0.0f);
  x[0] = 3.9f;     // / 2^-1 = 7.8 -> saturates to 6 -> decodes to 3
  x[1] = -1.0f;    // -2 -> code 0xc
  x[2] = 0.3f;     // 0.6 -> 0.5 (code 1) -> 0.25
  x[3] = 0.375f;   // 0.75: the tie between 0.5 and 1 -> 1 (code 2)
  x[32] = 40.0f;   // 5 -> tie between 4 and 6 -> 4 -> 32
  x[33] = 1.0f;    // 0.125 -> 0 (below half of 0.5)
  x[16] = 0.5f;    // 1 -> code 2, in the high nibble of byte 0 (the block's second half)
  x[49] = -24.0f;  // -3 -> code 0xd, in the high nibble of byte 1 of block 1
  const QuantSpec s = spec(QuantMethod::mx, {{"element", "fp4_e2m1"}});
  const auto p = encode_with(s, x);
  const size_t scales = 32 + 32;  // 64 FP4 elements in 32 bytes
  REQUIRE(p[scales] == 127 - 1);
  REQUIRE(p[scales + 1] == 127 + 3);
  // Packing: byte j of a block holds element j (low nibble) and element j + 16 (high nibble).
  REQUIRE(p[32] == (0x7 | (0x2 << 4)));
  REQUIRE(p[33] == 0xc);
  REQUIRE(p[34] == 0x1);
  REQUIRE(p[35] == 0x2);
  REQUIRE(p[32 + 16] == 0x6);
  REQUIRE(p[32 + 17] == (0xd << 4));
  Context ctx = Context::cpu(1, 1);
  const auto y = decode(*make_quantizer(s), ctx, p, 64);
  REQUIRE(y[0] == 3.0f);
  REQUIRE(y[1] == -1.0f);
  REQUIRE(y[2] == 0.25f);
  REQUIRE(y[3] == 0.5f);
  REQUIRE(y[32] == 32.0f);
  REQUIRE(y[33] == 0.0f);
  REQUIRE(y[16] == 0.5f);
  REQUIRE(y[49] == -24.0f);
}

TEST_CASE("MX FP6 packing: four elements in three bytes, LSB first; a partial last block", "[quant][float][mx]") {
  // E2M3 elements 1..5 * 0.125 (codes 1..5) under X = 0 (max 7.5 is in [4, 8): floor(log2) = 2 = emax).
  std::vector<float> x = {0.125f, 0.25f, 0.375f, 0.5f, 7.5f};
  const auto p = encode_with(spec(QuantMethod::mx, {{"element", "fp6_e2m3"}}), x);
  const uint32_t w = p[32] | (p[33] << 8) | (p[34] << 16);
  REQUIRE(w == (1u | (2u << 6) | (3u << 12) | (4u << 18)));
  REQUIRE(p[35] == 0x1f);  // element 4 alone in the last byte; its two high bits are zero
  REQUIRE(p[36] == 127);   // the scale after ceil(5 * 6 / 8) = 4 element bytes
  REQUIRE(p.size() == 40);
}

TEST_CASE("NVFP4 two-level scales: t = max / (6 * 448), block scale max / 6 / t in E4M3", "[quant][float][nvfp4]") {
  // max|v| = 2688 gives t = 1; block 0 (max 2688) gets scale 448 (code 0x7e); block 1 (max 6) scale 1
  // (code 0x38); block 2 (max 3.3) scale 0.55 -> E4M3 0.5625 (code 0x31).
  std::vector<float> x(48, 0.0f);
  x[0] = 2688.0f;
  x[1] = -448.0f;  // 448 / 448 = 1 -> code 2 (negative: 0xa)
  x[8] = 896.0f;   // 2 -> code 4, high nibble of byte 0
  x[16] = 6.0f;
  x[17] = 2.5f;  // tie between 2 and 3 -> 2
  x[32] = 3.3f;  // 3.3 / 0.5625 = 5.87 -> 6 -> 3.375
  const auto p = encode_with(spec(QuantMethod::nvfp4), x);
  float t;
  std::memcpy(&t, p.data() + 24, 4);
  REQUIRE(t == 1.0f);
  const size_t scales = 32 + 24;
  REQUIRE(p[scales] == 0x7e);
  REQUIRE(p[scales + 1] == 0x38);
  REQUIRE(p[scales + 2] == 0x31);
  // Byte j of a block holds element j (low nibble) and element j + 8 (high nibble).
  REQUIRE(p[32] == (0x7 | (0x4 << 4)));
  REQUIRE(p[33] == 0xa);
  REQUIRE(p[32 + 8] == 0x7);
  REQUIRE(p[32 + 9] == 0x4);
  Context ctx = Context::cpu(1, 1);
  const auto y = decode(*make_quantizer(spec(QuantMethod::nvfp4)), ctx, p, 48);
  REQUIRE(y[0] == 2688.0f);
  REQUIRE(y[1] == -448.0f);
  REQUIRE(y[17] == 2.0f);
  REQUIRE(y[32] == 3.375f);
  REQUIRE(y[8] == 896.0f);

  // A block of 5: halves of ceil(5 / 2) = 3, byte j = code j | code j + 3 << 4, the last high nibble 0.
  const auto q = encode_with(spec(QuantMethod::nvfp4), {6.0f, 1.0f, 2.0f, 3.0f, 4.0f});
  REQUIRE(q[32] == (0x7 | (0x5 << 4)));
  REQUIRE(q[33] == (0x2 | (0x6 << 4)));
  REQUIRE(q[34] == 0x4);
  REQUIRE(q[35] == 0x7e);  // the block holds the tensor's max: scale 448 (d = 448 t = 1), after 3 element bytes
}

// Issue 41: the block scale is 448 max_b / M rounded to E4M3 exactly. The f32 divisions it replaced,
// max_b / 6 / t, rounded the block (max 0.0021679688 in a tensor of max 994.56: 448 max_b / M
// is 2^-10 + 1.5e-11, just above the midpoint of E4M3's 0 and 2^-9) onto that midpoint; the tie went
// to the even code 0 and the block decoded as zeros.
TEST_CASE("NVFP4 block scale: 448 max_b / M rounded exactly, at the issue's block and every midpoint",
          "[quant][float][nvfp4]") {
  std::vector<float> x(32, 0.0f);
  x[0] = x[1] = 0.0021679688f;
  x[16] = 994.56f;
  const auto p = encode_with(spec(QuantMethod::nvfp4), x);
  const size_t scales = 32 + 16;
  REQUIRE(p[scales] == 0x01);  // 2^-9
  REQUIRE(p[scales + 1] == 0x7e);
  Context ctx = Context::cpu(1, 1);
  const auto y = decode(*make_quantizer(spec(QuantMethod::nvfp4)), ctx, p, 32);
  REQUIRE(y[0] == Approx(0.0021679688).epsilon(1e-6));  // 3 * 2^-9 * t
  REQUIRE(y[1] == y[0]);

  // One or two ulps either side of every midpoint (times M / 448), for tensor maxima over 12 decades.
  std::mt19937_64 rng(41);
  std::uniform_real_distribution<double> decade(-6.0, 6.0);
  for (int trial = 0; trial < 20; ++trial) {
    const auto m = static_cast<float>(std::pow(10.0, decade(rng)));
    for (uint32_t c = 0; c < FloatE4M3::kMaxCode; ++c) {
      const double mid = (value<FloatE4M3>(c) + value<FloatE4M3>(c + 1)) / 2;
      float b = std::nextafter(std::nextafter(static_cast<float>(mid * m / 448), 0.0f), 0.0f);
      for (int d = 0; d < 5; ++d, b = std::nextafter(b, INFINITY)) {
        if (b > m) continue;
        x.assign(32, 0.0f);
        x[0] = b;
        x[16] = m;
        CAPTURE(m, b, c);
        REQUIRE(encode_with(spec(QuantMethod::nvfp4), x)[scales] == reference_nearest<FloatE4M3>(448.0L * b / m));
      }
    }
  }
}

TEST_CASE("fp8: per-tensor scale max / 448 (E4M3) or max / 57344 (E5M2)", "[quant][float][fp8]") {
  std::vector<float> x = {896.0f, -2.0f, 1.0f, 0.0f};
  for (const char* format : {"e4m3", "e5m2"}) {
    CAPTURE(format);
    const bool e4m3 = std::string(format) == "e4m3";
    const auto p = encode_with(spec(QuantMethod::fp8, {{"format", format}}), x);
    float s;
    std::memcpy(&s, p.data() + 24, 4);
    REQUIRE(s == 896.0f / (e4m3 ? 448.0f : 57344.0f));
    REQUIRE(p[32] == (e4m3 ? 0x7e : 0x7b));
    Context ctx = Context::cpu(1, 1);
    const auto y = decode(*make_quantizer(spec(QuantMethod::fp8, {{"format", format}})), ctx, p, 4);
    REQUIRE(y[0] == 896.0f);
    REQUIRE(y[1] == -2.0f);
    REQUIRE(y[2] == 1.0f);
    REQUIRE(y[3] == 0.0f);
  }
}

TEST_CASE("stochastic rounding is unbiased: the mean of many encodes converges to the input", "[quant][float]") {
  // Values between representable neighbours of each format; 4000 steps (independent random keys).
  struct Case {
    QuantSpec s;
    std::vector<float> x;
  };
  const std::vector<float> block = {6.0f, 1.25f, -0.3f, 2.2f, 0.1f, -5.0f, 3.7f, 0.001f};
  std::vector<Case> cases = {
      {spec(QuantMethod::mx, {{"element", "fp4_e2m1"}, {"rounding", "stochastic"}}), block},
      {spec(QuantMethod::mx, {{"element", "fp6_e3m2"}, {"rounding", "stochastic"}}), block},
      {spec(QuantMethod::mx, {{"rounding", "stochastic"}}), block},
      {spec(QuantMethod::nvfp4, {{"rounding", "stochastic"}}), block},
      {spec(QuantMethod::fp8, {{"rounding", "stochastic"}}), block},
      {spec(QuantMethod::fp8, {{"format", "e5m2"}, {"rounding", "stochastic"}}), block},
  };
  Context ctx = Context::cpu(1, 1);
  const int kSteps = 4000;
  for (const Case& c : cases) {
    CAPTURE(c.s.str());
    auto q = make_quantizer(c.s);
    const int64_t n = static_cast<int64_t>(c.x.size());
    std::vector<double> sum(c.x.size(), 0.0);
    bool some_differ = false;
    std::vector<float> first;
    for (int step = 0; step < kSteps; ++step) {
      ctx.set_step(static_cast<uint64_t>(step));
      QuantState st(11, 0, 1);
      const auto y = decode(*q, ctx, encode(*q, ctx, c.x, 1, st), n);
      if (step == 0) first = y;
      some_differ = some_differ || y != first;
      for (size_t i = 0; i < y.size(); ++i) sum[i] += y[i];
    }
    REQUIRE(some_differ);
    for (size_t i = 0; i < c.x.size(); ++i) {
      // The decoded value is one of two neighbours at most a gap apart (below |x| for these values, or
      // FP4's subnormal gap 0.5 under the block scale 1): the mean's standard deviation is below
      // gap / (2 sqrt(N)).
      const double step = std::max(std::fabs(static_cast<double>(c.x[i])), 0.5);
      CAPTURE(i, c.x[i], sum[i] / kSteps);
      REQUIRE(std::fabs(sum[i] / kSteps - c.x[i]) <= 5 * step / (2 * std::sqrt(static_cast<double>(kSteps))));
    }
  }
}

TEST_CASE("float-format payload checks: NaN scales, NaN elements, signed block scales", "[quant][float][malformed]") {
  Context ctx = Context::cpu(1, 1);
  std::vector<float> x = normal_data(100, 3);
  auto dec = [&](const QuantSpec& s, const std::vector<uint8_t>& p) {
    std::vector<float> out(100);
    make_quantizer(s)->decode(ctx, p, 100, out);
  };
  {
    const QuantSpec s = spec(QuantMethod::mx);
    auto p = encode_with(s, x);
    const size_t scales = 32 + 100;
    p[scales + 1] = 0xff;
    REQUIRE_THROWS_WITH(dec(s, p), Catch::Contains("block 1 has the NaN scale 0xff"));
    p[scales + 1] = 254 - 8 + 1;  // 2^120 times 448 would overflow
    REQUIRE_THROWS_WITH(dec(s, p), Catch::Contains("block 1 has scale 2^120"));
    p = encode_with(s, x);
    p[32 + 7] = 0xff;  // E4M3 NaN
    REQUIRE_THROWS_WITH(dec(s, p), Catch::Contains("NaN or Inf code"));
  }
  {
    const QuantSpec s = spec(QuantMethod::mx, {{"element", "fp6_e3m2"}});
    const std::vector<float> x101 = normal_data(101, 4);
    auto p = encode_with(s, x101);
    p[32 + 75] |= 0xc0;  // 101 * 6 bits = 75 bytes and 6 bits: the last byte's top two bits are unused
    std::vector<float> out(101);
    REQUIRE_THROWS_WITH(make_quantizer(s)->decode(ctx, p, 101, out), Catch::Contains("bits after the last element"));
  }
  {
    const QuantSpec s = spec(QuantMethod::fp8, {{"format", "e5m2"}});
    auto p = encode_with(s, x);
    p[32 + 50] = 0x7c;  // +Inf
    REQUIRE_THROWS_WITH(dec(s, p), Catch::Contains("E5M2's Inf or NaN"));
    p = encode_with(s, x);
    const uint32_t big = float_bits(FLT_MAX / 1000.0f);
    std::memcpy(p.data() + 24, &big, 4);
    REQUIRE_THROWS_WITH(dec(s, p), Catch::Contains("overflow"));
  }
  {
    const QuantSpec s = spec(QuantMethod::nvfp4);
    auto p = encode_with(s, x);
    p[32 + 50 + 3] |= 0x80;  // a negative block scale
    REQUIRE_THROWS_WITH(dec(s, p), Catch::Contains("block 3 has scale code"));
    p = encode_with(s, x);
    p[32 + 50 + 3] = 0x7f;  // NaN
    REQUIRE_THROWS_WITH(dec(s, p), Catch::Contains("positive E4M3 value"));
  }
}
