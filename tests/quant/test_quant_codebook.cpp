// codebook on the CPU path (quant/codebook.cpp, quant/codebook_bins.h): the bin decision and the
// fixed-point arithmetic against independent references, the table as the bins' means on inputs whose
// quantiles are known, decode as table[code], exact decodes of spans with fewer values than bins,
// ties, the sampled boundaries' random stream, and the payload checks (malformed tables and codes).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <set>

#include "quant/codebook_bins.h"
#include "quant/codebook_wire.h"
#include "quant/wire.h"
#include "tests/quant/quant_test_util.h"

using namespace qtrain;
using namespace qtrain::quant_test;
using namespace qtrain::quant_detail;

namespace {

QuantSpec spec(const std::string& entry) { return parse_method_entry(entry); }

float table_at(const std::vector<uint8_t>& p, int64_t b) {
  float v;
  std::memcpy(&v, p.data() + 32 + 4 * b, 4);
  return v;
}

// Code of value i, read back by the layout of docs/quantizers.md (written out here, not wire.h's).
uint32_t code_at(const std::vector<uint8_t>& p, int bits, int64_t n, int64_t i) {
  const size_t codes = 32 + 4 * (size_t{1} << bits);
  if (bits == 8) return p[codes + static_cast<size_t>(i)];
  const int64_t half = (n + 1) / 2;
  return i < half ? p[codes + static_cast<size_t>(i)] & 0xfu : p[codes + static_cast<size_t>(i - half)] >> 4;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

// The exact value of a float from its bits (subnormals included), as a long double.
long double value_of(float f) {
  const uint32_t b = float_bits(f);
  const uint32_t e = (b >> 23) & 0xffu;
  long double v = e == 0xffu
                      ? INFINITY
                      : std::ldexp(static_cast<long double>(e != 0u ? (b & 0x7fffffu) | 0x800000u : b & 0x7fffffu),
                                   static_cast<int>(e != 0u ? e : 1u) - 150);
  return (b >> 31) != 0u ? -v : v;
}

void put_u32(std::vector<uint8_t>& p, size_t off, uint32_t v) { std::memcpy(p.data() + off, &v, 4); }

}  // namespace

TEST_CASE("codebook: keys order the floats, bins count the boundaries at or below", "[quant][codebook]") {
  std::mt19937 rng(5);
  std::vector<float> probes = {-INFINITY, -3e38f, -1.0f, -1e-40f, -0.0f, 0.0f, 1e-40f, 1e-30f, 1.0f, 3e38f, INFINITY};
  for (int i = 0; i < 2000; ++i) probes.push_back(std::ldexp(static_cast<float>(rng() % 20001) - 10000.0f, -7));
  for (float a : probes)
    for (float b : {-2.0f, -0.0f, 0.0f, 1e-40f, 0.5f}) {
      const uint32_t ka = codebook_key(float_bits(a)), kb = codebook_key(float_bits(b));
      CAPTURE(a, b);
      REQUIRE(codebook_key_bits(ka) == float_bits(a));
      // The order of the values, with -0 below +0 (compared as exact long doubles from the bits: this
      // thread's float comparisons read subnormals as zero).
      const long double la = value_of(a), lb = value_of(b);
      const bool below = la < lb || (la == lb && std::signbit(a) && !std::signbit(b));
      REQUIRE((ka < kb) == below);
    }
  for (int bits : {4, 8}) {
    const int bins = 1 << bits;
    for (int round = 0; round < 200; ++round) {
      std::vector<uint32_t> t(static_cast<size_t>(bins - 1));
      for (auto& k : t) k = codebook_key(float_bits(static_cast<float>(rng() % 64) - 32.0f));  // many ties
      std::sort(t.begin(), t.end());
      for (int d = -40; d <= 40; ++d) {
        const uint32_t key = codebook_key(float_bits(static_cast<float>(d) * 0.75f));
        const auto expect = static_cast<uint32_t>(std::upper_bound(t.begin(), t.end(), key) - t.begin());
        REQUIRE(codebook_bin(t.data(), bits, key) == expect);
      }
    }
  }
}

TEST_CASE("codebook: fixed-point terms are floor(x 2^s) and fit the sums of n values", "[quant][codebook]") {
  std::mt19937_64 rng(9);
  for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{1} << 20, wire::kMaxValues}) {
    for (float m : {1e-40f, 1.2e-38f, 1e-3f, 1.0f, 3e38f}) {
      const uint32_t mb = float_bits(m);
      const int s = codebook_shift(mb, n);
      const double bound = std::ldexp(1.0, 62) / std::ldexp(1.0, static_cast<int>(std::ceil(std::log2(n))));
      for (int k = 0; k < 300; ++k) {
        // x in [-m, m] by its bits (every magnitude below m alike), m itself and -m included.
        const uint32_t mag = k < 2 ? mb : static_cast<uint32_t>(rng() % (uint64_t{mb} + 1));
        const float x = bits_float(mag | (k % 2 == 1 ? 0x80000000u : 0u));
        const int64_t q = codebook_fixed(float_bits(x), s);
        // floor(x 2^s) in long double (64-bit significand: exact for these magnitudes), and the bound.
        const long double exact = std::floor(std::ldexp(static_cast<long double>(x), s));
        CAPTURE(n, m, x, s);
        REQUIRE(static_cast<long double>(q) == exact);
        REQUIRE(std::fabs(static_cast<double>(q)) <= bound);
      }
    }
  }
  // Back to float: one rounding, then the exact power of two; below FLT_MIN it is +0.
  REQUIRE(codebook_unfixed(3, 1) == 1.5f);
  REQUIRE(codebook_unfixed(-(int64_t{1} << 40), 40) == -1.0f);
  REQUIRE(codebook_unfixed((int64_t{1} << 24) + 1, 24) == 1.0f);  // 2^24 + 1 rounds to 2^24 in float
  REQUIRE(codebook_unfixed(1, 127) == 0.0f);                      // 2^-127: below FLT_MIN
  REQUIRE(codebook_unfixed(1, 126) == FLT_MIN);
}

TEST_CASE("codebook: the table holds the bin means of an input with known quantiles", "[quant][codebook]") {
  Context ctx = Context::cpu(1, 1);
  // 4096 distinct values (a shuffled arithmetic progression): with the span as the pool (4096 <= sample),
  // boundary j is sorted value 16 j (8 bits) or 256 j (4 bits), so bin b holds the 16 (256) values of
  // ranks 16 b .. 16 b + 15, and their mean is exact in float.
  const int64_t n = 4096;
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = 0.25f * static_cast<float>(i) - 300.0f;
  std::shuffle(x.begin(), x.end(), std::mt19937(3));
  for (int bits : {8, 4}) {
    CAPTURE(bits);
    auto q = make_quantizer(spec(bits == 8 ? "codebook" : "codebook:bits=4"));
    QuantState st(1, 0, 1);
    const auto p = encode(*q, ctx, x, 1, st);
    const int64_t per_bin = n >> bits;
    for (int64_t b = 0; b < (int64_t{1} << bits); ++b) {
      // Ranks 16 b .. 16 b + per_bin - 1 are the values 0.25 r - 300: their mean is the middle rank's.
      const double mean = 0.25 * (static_cast<double>(b * per_bin) + (static_cast<double>(per_bin) - 1) / 2) - 300.0;
      REQUIRE(table_at(p, b) == static_cast<float>(mean));
    }
    for (int64_t i = 0; i < n; ++i) {
      const auto rank = static_cast<int64_t>((x[static_cast<size_t>(i)] + 300.0f) * 4.0f);
      REQUIRE(code_at(p, bits, n, i) == static_cast<uint32_t>(rank / per_bin));
    }
  }
}

TEST_CASE("codebook: each table entry is its bin's mean to float precision, empty bins their midpoint",
          "[quant][codebook]") {
  Context ctx = Context::cpu(1, 1);
  for (const char* entry : {"codebook", "codebook:bits=4", "codebook:sample=1000"}) {
    for (const auto& x : {normal_data(20000, 4), heavy_data(20000, 5)}) {
      CAPTURE(entry);
      auto q = make_quantizer(spec(entry));
      const int bits = static_cast<int>(q->spec().integer("bits"));
      const int bins = 1 << bits;
      const auto n = static_cast<int64_t>(x.size());
      QuantState st(4, 1, 2);
      const auto p = encode(*q, ctx, x, 1, st);
      std::vector<long double> sum(static_cast<size_t>(bins), 0);
      std::vector<int64_t> count(static_cast<size_t>(bins), 0);
      float lo = 0, hi = 0;
      for (float v : x) lo = std::min(lo, v), hi = std::max(hi, v);
      for (int64_t i = 0; i < n; ++i) {
        const uint32_t c = code_at(p, bits, n, i);
        sum[c] += x[static_cast<size_t>(i)];
        ++count[c];
      }
      int64_t seen = 0;
      for (int b = 0; b < bins; ++b) {
        const float y = table_at(p, b);
        if (b > 0) REQUIRE(table_at(p, b - 1) <= y);
        if (count[static_cast<size_t>(b)] == 0) continue;
        ++seen;
        const double mean = static_cast<double>(sum[static_cast<size_t>(b)] / count[static_cast<size_t>(b)]);
        CAPTURE(b, count[static_cast<size_t>(b)], mean, y);
        REQUIRE(std::fabs(y - mean) <= 2 * FLT_EPSILON * std::fabs(mean) + 1e-30);
      }
      REQUIRE(seen >= bins - (q->spec().integer("sample") < n ? bins / 4 : 0));
    }
  }
}

TEST_CASE("codebook: exact quantiles put n / bins values in every bin", "[quant][codebook]") {
  Context ctx = Context::cpu(1, 1);
  // 65536 distinct values (the Cauchy quantiles of (i + 1/2) / n, shuffled), all of them the pool (the
  // radix sort's path).
  std::vector<float> x(65536);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(std::tan(M_PI * ((i + 0.5) / 65536 - 0.5)));
  std::shuffle(x.begin(), x.end(), std::mt19937(12));
  REQUIRE(std::set<float>(x.begin(), x.end()).size() == x.size());
  auto q = make_quantizer(spec("codebook:sample=65536"));
  QuantState st(1, 0, 1);
  const auto p = encode(*q, ctx, x, 1, st);
  std::vector<int64_t> count(256, 0);
  for (int64_t i = 0; i < 65536; ++i) ++count[code_at(p, 8, 65536, i)];
  for (int64_t c : count) REQUIRE(c == 256);
}

TEST_CASE("codebook: decode is exactly table[code], decode_add adds it", "[quant][codebook]") {
  Context ctx = Context::cpu(1, 1);
  for (const char* entry : {"codebook", "codebook:bits=4"}) {
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{4099}, int64_t{50001}}) {
      CAPTURE(entry, n);
      auto q = make_quantizer(spec(entry));
      const int bits = static_cast<int>(q->spec().integer("bits"));
      QuantState st(2, 0, 5);
      const auto x = heavy_data(n, 21);
      const auto p = encode(*q, ctx, x, 1, st);
      const auto y = decode(*q, ctx, p, n);
      for (int64_t i = 0; i < n; ++i)
        REQUIRE(same_bits(y[static_cast<size_t>(i)], table_at(p, code_at(p, bits, n, i))));
      if (bits == 4 && n % 2 == 1) REQUIRE((p[32 + 64 + static_cast<size_t>(n / 2)] >> 4) == 0);
    }
  }
}

TEST_CASE("codebook: a span with fewer values than bins decodes exactly", "[quant][codebook]") {
  // Each distinct value has a bin of its own whose lower boundary is the value itself: its mean is
  // exact after the clamp, whatever the fixed point dropped. Equal values share a bin and are exact too.
  Context ctx = Context::cpu(1, 1);
  for (const char* entry : {"codebook", "codebook:bits=4"}) {
    auto q = make_quantizer(spec(entry));
    const int64_t bins = int64_t{1} << q->spec().integer("bits");
    for (int64_t n : {int64_t{1}, int64_t{2}, int64_t{5}, bins - 1}) {
      for (const auto& base : {normal_data(n, 31), heavy_data(n, 32, 1e-30)}) {
        auto x = base;
        if (n >= 5) x[1] = x[3];  // a tie
        CAPTURE(entry, n);
        QuantState st(1, 0, 1);
        const auto y = decode(*q, ctx, encode(*q, ctx, x, 1, st), n);
        for (int64_t i = 0; i < n; ++i) REQUIRE(same_bits(y[static_cast<size_t>(i)], x[static_cast<size_t>(i)]));
      }
    }
  }
}

TEST_CASE("codebook: ties, constant spans and exact zeros", "[quant][codebook]") {
  Context ctx = Context::cpu(1, 1);
  auto q = make_quantizer(spec("codebook"));
  SECTION("a constant span decodes exactly, zero too") {
    for (float c : {0.0f, -2.5f, 7e-20f}) {
      std::vector<float> x(5000, c);
      QuantState st;
      const auto p = encode(*q, ctx, x, 1, st);
      for (float y : decode(*q, ctx, p, 5000)) REQUIRE(y == c);
    }
  }
  SECTION("half of the values zero: they have a bin of their own and decode to 0") {
    auto x = normal_data(10000, 8);
    for (size_t i = 0; i < x.size(); i += 2) x[i] = 0.0f;
    QuantState st;
    const auto p = encode(*q, ctx, x, 1, st);
    const auto y = decode(*q, ctx, p, 10000);
    const uint32_t zero_code = code_at(p, 8, 10000, 0);
    for (size_t i = 0; i < x.size(); ++i) {
      REQUIRE((code_at(p, 8, 10000, static_cast<int64_t>(i)) == zero_code) == (i % 2 == 0));
      if (i % 2 == 0) REQUIRE(float_bits(y[i]) == 0u);  // +0 exactly
    }
  }
}

TEST_CASE("codebook: sampled boundaries follow the state's random stream", "[quant][codebook]") {
  Context ctx = Context::cpu(1, 1);
  auto q = make_quantizer(spec("codebook:sample=1000"));
  const auto x = normal_data(100000, 40);
  QuantState a(7, 0, 3), b(7, 0, 3), other_rank(7, 1, 3);
  const auto pa = encode(*q, ctx, x, 1, a);
  REQUIRE(encode(*q, ctx, x, 1, b) == pa);
  REQUIRE(encode(*q, ctx, x, 1, other_rank) != pa);
  ctx.set_step(1);
  REQUIRE(encode(*q, ctx, x, 1, a) != pa);
  // A sample of 1000 puts about n / bins values in each bin: none far from it.
  std::vector<int64_t> count(256, 0);
  for (int64_t i = 0; i < 100000; ++i) ++count[code_at(pa, 8, 100000, i)];
  REQUIRE(*std::max_element(count.begin(), count.end()) < 8 * 100000 / 256);
}

TEST_CASE("codebook: error feedback keeps e = v - table[code]", "[quant][codebook][ef]") {
  Context ctx = Context::cpu(1, 1);
  QuantSpec s = spec("codebook");
  s.error_feedback = true;
  auto q = make_quantizer(s);
  QuantState st(3, 0, 9);
  std::vector<float> e(3000, 0.0f);
  for (int step = 0; step < 3; ++step) {
    ctx.set_step(static_cast<uint64_t>(step));
    const auto g = normal_data(3000, 60 + step);
    const auto p = encode(*q, ctx, g, 1, st);
    const auto y = decode(*q, ctx, p, 3000);
    for (size_t i = 0; i < g.size(); ++i) {
      const float v = g[i] + e[i];
      e[i] = v - y[i];
      REQUIRE(same_bits(st.residual().data<float>()[i], e[i]));
    }
  }
}

TEST_CASE("codebook: malformed tables, codes and header fields are rejected", "[quant][codebook][malformed]") {
  Context ctx = Context::cpu(1, 1);
  auto dec = [&](const Quantizer& q, const std::vector<uint8_t>& p, int64_t n) {
    std::vector<float> out(static_cast<size_t>(n), 5.0f);
    try {
      q.decode(ctx, p, n, out);
    } catch (...) {
      for (float v : out) REQUIRE(v == 5.0f);  // untouched
      throw;
    }
  };
  auto q8 = make_quantizer(spec("codebook"));
  QuantState st(1, 0, 1);
  const auto good = encode(*q8, ctx, normal_data(999, 2), 1, st);
  auto p = good;
  put_u32(p, 32 + 4 * 3, 0x7fc00000u);
  REQUIRE_THROWS_WITH(dec(*q8, p, 999), Catch::Contains("table entry 3 is not finite"));
  p = good;
  put_u32(p, 32 + 4 * 255, 0xff800000u);
  REQUIRE_THROWS_WITH(dec(*q8, p, 999), Catch::Contains("table entry 255 is not finite"));
  p = good;
  std::memcpy(p.data() + 32 + 4 * 10, p.data() + 32 + 4 * 200, 4);  // entry 10 above entry 11
  REQUIRE_THROWS_WITH(dec(*q8, p, 999), Catch::Contains("table entries 10 and 11 decrease"));
  p = good;
  put_u32(p, 4, 5);
  REQUIRE_THROWS_WITH(dec(*q8, p, 999), Catch::Contains("bits field 5 (4 or 8)"));
  p = good;
  put_u32(p, 4, 4);  // a 4-bit layout is shorter than the payload's length field
  REQUIRE_THROWS_WITH(dec(*q8, p, 999), Catch::Contains("length field"));
  for (size_t field : {size_t{24}, size_t{28}}) {
    p = good;
    put_u32(p, field, 1);
    REQUIRE_THROWS_WITH(dec(*q8, p, 999), Catch::Contains("reserved fields must be zero"));
  }
  // Every code byte is a bin of the 8-bit table; the 4-bit payload's one unused nibble must be zero.
  auto q4 = make_quantizer(spec("codebook:bits=4"));
  const auto good4 = encode(*q4, ctx, normal_data(999, 2), 1, st);
  const size_t last = 32 + 64 + 499;
  REQUIRE((good4[last] >> 4) == 0);
  p = good4;
  p[last] |= 0x50;
  REQUIRE_THROWS_WITH(dec(*q4, p, 999), Catch::Contains("unused high nibble"));
  REQUIRE_NOTHROW(dec(*q4, good4, 999));
}
