// topk's quantized values (value_bits 2, 4, 8; SparseLoCo's low-bit top-k), checked against a model
// written here from docs/quantizers.md, independently of quant/: the same k indices as exact topk;
// per range of value_block entries, lo and hi are the smallest and largest sent magnitude; each sent
// value decodes with its sign to the nearest of the 2^(bits-1) even grid points from lo to hi (2 bits:
// lo or hi); error feedback keeps v at the dropped positions and v - decoded at the sent ones; the
// payloads written before value_bits (value format 0) still decode, and value_bits: 32 writes them.
// The chunk-local selection (`chunk: C`, SparseLoCo's and CCLoco's chunked top-k) against the same
// model per chunk: each chunk of C values (the last one maybe shorter) keeps max(1, round(fraction *
// its length)); field a is value format | log2(C) << 8 | (K - 1) << 16; the local indices travel in
// log2(C) bits LSB first in u32 words.
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <numeric>

#include "quant/wire.h"
#include "tests/quant/quant_test_util.h"

using namespace qtrain;
using namespace qtrain::quant_test;

namespace {

template <typename T>
T at(const std::vector<uint8_t>& p, size_t off) {
  T v;
  std::memcpy(&v, p.data() + off, sizeof v);
  return v;
}

QuantSpec topk_spec(double fraction, int bits, int64_t block) {
  QuantSpec s = QuantSpec::defaults(QuantMethod::topk);
  s.set("fraction", fraction);
  s.set("value_bits", bits);
  if (bits != 32) s.set("value_block", static_cast<double>(block));
  return s;
}

// The k indices of largest |v| (ties to the lowest index), in increasing order.
std::vector<uint32_t> top_indices(const std::vector<float>& x, int64_t k) {
  std::vector<uint32_t> order(x.size());
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(),
                   [&](uint32_t a, uint32_t b) { return std::fabs(x[a]) > std::fabs(x[b]); });
  order.resize(static_cast<size_t>(k));
  std::sort(order.begin(), order.end());
  return order;
}

struct Range {
  float lo, hi;
};

// Checks the payload of x against the model; returns the (lo, hi) of each range.
std::vector<Range> check_against_model(const std::vector<float>& x, const std::vector<uint8_t>& p,
                                       const std::vector<float>& y, int bits, int64_t block) {
  const auto n = static_cast<int64_t>(x.size());
  const int64_t k = at<uint32_t>(p, 24);
  const int64_t group = block > 0 ? block : k;
  REQUIRE(at<uint32_t>(p, 4) == static_cast<uint32_t>(bits));
  REQUIRE(at<uint32_t>(p, 28) == static_cast<uint32_t>(group));
  const auto idx = top_indices(x, k);
  const int64_t groups = (k + group - 1) / group;
  const size_t ranges_at = 32 + 4 * static_cast<size_t>(k);
  const double levels = (1 << (bits - 1)) - 1;
  std::vector<Range> ranges;
  std::vector<bool> sent(static_cast<size_t>(n), false);
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t first = g * group, last = std::min(k, first + group);
    float lo = FLT_MAX, hi = 0.0f;
    for (int64_t j = first; j < last; ++j) {
      REQUIRE(at<uint32_t>(p, 32 + 4 * static_cast<size_t>(j)) == idx[static_cast<size_t>(j)]);
      const float a = std::fabs(x[idx[static_cast<size_t>(j)]]);
      lo = std::min(lo, a);
      hi = std::max(hi, a);
    }
    REQUIRE(at<float>(p, ranges_at + 8 * static_cast<size_t>(g)) == lo);
    REQUIRE(at<float>(p, ranges_at + 8 * static_cast<size_t>(g) + 4) == hi);
    ranges.push_back({lo, hi});
    const double step = (static_cast<double>(hi) - lo) / levels;
    for (int64_t j = first; j < last; ++j) {
      const uint32_t i = idx[static_cast<size_t>(j)];
      sent[i] = true;
      const double v = x[i], d = y[i], a = std::fabs(v);
      CAPTURE(g, j, i, v, d, lo, hi);
      REQUIRE(std::signbit(d) == std::signbit(v));
      // The nearest grid point, exactly where it is clearly nearer (the encoder decides in f32: within
      // 2^-20 hi of a midpoint either neighbour is right).
      const double exact_level = step > 0 ? (a - lo) / step : 0.0;
      const double nearest = std::min(levels, std::round(exact_level));
      const double expect = nearest == 0 ? lo : (nearest == levels ? hi : lo + nearest * step);
      if (step == 0 || std::fabs(exact_level - std::floor(exact_level) - 0.5) * step > 0x1p-20 * hi)
        REQUIRE(std::fabs(std::fabs(d) - expect) <= 0x1p-22 * hi);
      REQUIRE(std::fabs(std::fabs(d) - a) <= step / 2 + 0x1p-20 * hi);
    }
  }
  for (int64_t i = 0; i < n; ++i)
    if (!sent[static_cast<size_t>(i)]) REQUIRE(y[static_cast<size_t>(i)] == 0.0f);
  return ranges;
}

// g + e, the values an error-feedback encode sends.
std::vector<float> plus(const std::vector<float>& g, const std::vector<float>& e) {
  std::vector<float> v(g.size());
  for (size_t i = 0; i < g.size(); ++i) v[i] = g[i] + e[i];
  return v;
}

// chunk: C, value_block 128.
QuantSpec chunk_spec(int64_t chunk, double fraction, int bits) {
  QuantSpec s = topk_spec(fraction, bits, 128);
  s.set("chunk", static_cast<double>(chunk));
  return s;
}

int64_t keep_of(double fraction, int64_t len) {
  return std::min(len, std::max<int64_t>(1, std::llround(fraction * static_cast<double>(len))));
}

// Each chunk's kept indices (global, increasing): top_indices of the chunk, keep_of(its length).
std::vector<uint32_t> chunk_top_indices(const std::vector<float>& x, int64_t chunk, double fraction) {
  std::vector<uint32_t> all;
  const auto n = static_cast<int64_t>(x.size());
  for (int64_t start = 0; start < n; start += chunk) {
    const int64_t len = std::min(chunk, n - start);
    const std::vector<float> part(x.begin() + start, x.begin() + start + len);
    for (uint32_t i : top_indices(part, keep_of(fraction, len))) all.push_back(static_cast<uint32_t>(start) + i);
  }
  return all;
}

// The payload of docs/quantizers.md's layout, by hand: header, local indices of log2(C) bits in u32
// words, then the k f32 values.
std::vector<uint8_t> exact_payload_by_hand(const std::vector<float>& x, int64_t chunk, double fraction) {
  const auto idx = chunk_top_indices(x, chunk, fraction);
  const auto k = static_cast<int64_t>(idx.size());
  const int s = std::countr_zero(static_cast<uint64_t>(chunk));
  const size_t index_bytes = 4 * static_cast<size_t>((k * s + 31) / 32);
  const size_t end = 32 + index_bytes + 4 * static_cast<size_t>(k);
  std::vector<uint8_t> p((end + 7) / 8 * 8, 0);
  p[0] = 'Q';
  p[1] = 'T';
  p[2] = 8;  // topk
  p[3] = 1;  // version
  const uint32_t a = static_cast<uint32_t>(s) << 8 | static_cast<uint32_t>(keep_of(fraction, chunk) - 1) << 16;
  const uint64_t n = x.size(), total = p.size();
  const auto kk = static_cast<uint32_t>(k);
  std::memcpy(p.data() + 4, &a, 4);
  std::memcpy(p.data() + 8, &n, 8);
  std::memcpy(p.data() + 16, &total, 8);
  std::memcpy(p.data() + 24, &kk, 4);
  for (int64_t j = 0; j < k; ++j) {
    const uint32_t local = idx[static_cast<size_t>(j)] % static_cast<uint32_t>(chunk);
    for (int b = 0; b < s; ++b) {
      const int64_t bit = j * s + b;
      if ((local >> b) & 1u) p[32 + static_cast<size_t>(bit / 8)] |= static_cast<uint8_t>(1u << (bit % 8));
    }
    std::memcpy(p.data() + 32 + index_bytes + 4 * static_cast<size_t>(j), &x[idx[static_cast<size_t>(j)]], 4);
  }
  return p;
}

}  // namespace

TEST_CASE("topk value_bits 2: each sent value is its sign and the nearer of its range's lo and hi", "[quant][topk]") {
  Context ctx = Context::cpu(1, 1);
  const int64_t n = 20000;
  for (const auto& x : {heavy_data(n, 31), normal_data(n, 32)}) {
    for (int64_t block : {64, 0}) {
      CAPTURE(block);
      auto q = make_quantizer(topk_spec(0.02, 2, block));
      QuantState st;
      const auto p = encode(*q, ctx, x, 1, st);
      REQUIRE(at<uint32_t>(p, 24) == 400);
      const auto y = decode(*q, ctx, p, n);
      const auto ranges = check_against_model(x, p, y, 2, block);
      REQUIRE(ranges.size() == (block == 64 ? 7u : 1u));
      // Two bits: every decoded magnitude is an end of its range, and each code takes 2 bits.
      const auto idx = top_indices(x, 400);
      int64_t at_hi = 0;
      for (size_t j = 0; j < idx.size(); ++j) {
        const float d = std::fabs(y[idx[j]]);
        const Range r = ranges[block > 0 ? j / 64 : 0];
        REQUIRE((d == r.lo || d == r.hi));
        at_hi += d == r.hi;
      }
      REQUIRE(at_hi >= static_cast<int64_t>(ranges.size()));  // at least each range's largest
      REQUIRE(p.size() == wire::pad8(32 + 4 * 400 + 8 * ranges.size() + 100));
    }
  }
}

TEST_CASE("topk value_bits 4 and 8: the nearest of the even grid from lo to hi, ends exact", "[quant][topk]") {
  Context ctx = Context::cpu(1, 1);
  const int64_t n = 30000;
  const auto x = heavy_data(n, 33);
  for (int bits : {4, 8}) {
    for (int64_t block : {1, 7, 128, 0}) {
      CAPTURE(bits, block);
      auto q = make_quantizer(topk_spec(0.03, bits, block));
      QuantState st;
      const auto p = encode(*q, ctx, x, 1, st);
      const auto y = decode(*q, ctx, p, n);
      check_against_model(x, p, y, bits, block);
      if (block == 1)  // one value per range: lo = hi = |v|, exact
        for (int64_t i = 0; i < n; ++i)
          REQUIRE((y[static_cast<size_t>(i)] == 0.0f || y[static_cast<size_t>(i)] == x[static_cast<size_t>(i)]));
    }
  }
}

TEST_CASE("topk quantized error feedback keeps what was not sent exactly", "[quant][topk][ef]") {
  Context ctx = Context::cpu(1, 1);
  const int64_t n = 20000;
  for (int bits : {2, 4, 8}) {
    CAPTURE(bits);
    QuantSpec s = topk_spec(0.02, bits, 64);
    auto q = make_quantizer(s);
    QuantState st(1, 0, 2);
    std::vector<float> e(static_cast<size_t>(n), 0.0f);
    int64_t sent = 0, sterbenz = 0;
    for (int step = 0; step < 4; ++step) {
      const auto g = heavy_data(n, 40 + step);
      const std::vector<float> v = plus(g, e);
      const auto p = encode(*q, ctx, g, 1, st);
      const auto y = decode(*q, ctx, p, n);
      const float* r = st.residual().data<float>();
      for (int64_t i = 0; i < n; ++i) {
        const float vi = v[static_cast<size_t>(i)], yi = y[static_cast<size_t>(i)];
        CAPTURE(step, i, vi, yi, r[i]);
        if (yi == 0.0f) {
          REQUIRE(std::memcmp(&r[i], &vi, 4) == 0);  // dropped: kept bit for bit
          continue;
        }
        ++sent;
        // Sent: e is v - decoded as f32 computes it from the value every receiver decodes...
        const float diff = vi - yi;
        REQUIRE(std::memcmp(&r[i], &diff, 4) == 0);
        // ... which is exact whenever |v| / 2 <= |decoded| <= 2 |v| (Sterbenz), and otherwise within
        // half an ulp of v.
        const double lost = static_cast<double>(yi) + static_cast<double>(r[i]) - static_cast<double>(vi);
        if (std::fabs(yi) >= std::fabs(vi) / 2 && std::fabs(yi) <= 2 * std::fabs(vi)) {
          REQUIRE(lost == 0.0);
          ++sterbenz;
        }
        REQUIRE(std::fabs(lost) <= std::fabs(vi) * 0x1p-24);
      }
      e.assign(r, r + n);
    }
    INFO(sterbenz << " of " << sent << " sent values within a factor 2 of their decode (exact by Sterbenz)");
    REQUIRE(sent == 4 * 400);
    REQUIRE(sterbenz > sent / 2);
  }
}

TEST_CASE("topk payloads of value format 0 (before value_bits) still decode; value_bits 32 writes them",
          "[quant][topk]") {
  Context ctx = Context::cpu(1, 1);
  // The layout of docs/quantizers.md, by hand: n = 10, k = 2, indices 3 and 7, f32 values.
  std::vector<uint8_t> old(48, 0);
  old[0] = 'Q';
  old[1] = 'T';
  old[2] = 8;  // topk
  old[3] = 1;  // version
  const uint64_t n = 10, total = 48;
  const uint32_t k = 2, idx[2] = {3, 7};
  const float val[2] = {1.5f, -2.25f};
  std::memcpy(old.data() + 8, &n, 8);
  std::memcpy(old.data() + 16, &total, 8);
  std::memcpy(old.data() + 24, &k, 4);
  std::memcpy(old.data() + 32, idx, 8);
  std::memcpy(old.data() + 40, val, 8);
  std::vector<float> expect(10, 0.0f);
  expect[3] = 1.5f;
  expect[7] = -2.25f;
  for (int bits : {32, 2, 4, 8}) {
    CAPTURE(bits);
    auto q = make_quantizer(topk_spec(0.2, bits, 128));
    REQUIRE(decode(*q, ctx, old, 10) == expect);
  }
  std::vector<float> x = {0.1f, -0.2f, 0.3f, 1.5f, 0.0f, -1.0f, 0.5f, -2.25f, 0.25f, 1.25f};
  auto q = make_quantizer(topk_spec(0.2, 32, 0));
  QuantState st;
  REQUIRE(encode(*q, ctx, x, 1, st) == old);
}

TEST_CASE("topk quantized values: equal magnitudes, zeros, signed zeros and the float range's ends", "[quant][topk]") {
  Context ctx = Context::cpu(1, 1);
  const std::vector<std::vector<float>> inputs = {
      {1.0f, -1.0f, 1.0f, -1.0f, 1.0f},                       // lo = hi: the step is 0
      {0.0f, -0.0f, 0.0f, 2.0f, -3.0f},                       // zeros sent (fraction 1), -0 keeps its sign
      {FLT_MAX, -FLT_MAX, 1e-45f, -1e-45f, 1.0f, -3e38f},     // lo + q step must stay finite and <= hi
      {1e-45f, 3e-45f, -1e-44f, 2e-44f, -1.2e-38f, 1e-40f}};  // subnormal ranges
  for (int bits : {2, 4, 8}) {
    for (const auto& x : inputs) {
      for (bool ef : {false, true}) {
        CAPTURE(bits, x, ef);
        QuantSpec s = topk_spec(1.0, bits, 0);
        s.error_feedback = ef;
        auto q = make_quantizer(s);
        QuantState st;
        const auto p = encode(*q, ctx, x, 1, st);
        const auto y = decode(*q, ctx, p, static_cast<int64_t>(x.size()));
        RoundTripValue v;
        v.payload = p;
        for (size_t i = 0; i < x.size(); ++i) {
          // With error feedback the value sent is x + e = x + 0, which makes -0 a +0.
          v.x = ef ? x[i] + 0.0f : x[i];
          v.y = y[i];
          v.index = i;
          REQUIRE(std::isfinite(y[i]));
          REQUIRE(std::signbit(v.y) == std::signbit(v.x));
          REQUIRE(method_info(QuantMethod::topk).within_bound(s, v));
          if (ef) REQUIRE(static_cast<double>(st.residual().data<float>()[i]) == v.x - v.y);  // exact here
        }
        if (x[0] == 1.0f)
          REQUIRE(y == x);
        else if (x[3] == 2.0f)
          REQUIRE((y[0] == 0.0f && y[1] == 0.0f && std::signbit(y[1]) != ef && y[4] == -3.0f));
        else if (x[0] == FLT_MAX)
          REQUIRE((y[0] == FLT_MAX && y[1] == -FLT_MAX));
      }
    }
  }
}

TEST_CASE("topk chunk: the payload of the documented layout, byte for byte", "[quant][topk][chunk]") {
  Context ctx = Context::cpu(1, 1);
  struct Case {
    int64_t n, chunk;
    double fraction;
  };
  // Whole chunks, a short last chunk, one short chunk (n < C), chunks of 2 with an odd n, 16-bit
  // indices, 12-bit indices that straddle the words.
  for (const Case& c : {Case{4096 * 3, 4096, 0.02}, Case{10007, 4096, 0.02}, Case{1000, 4096, 0.01}, Case{999, 2, 0.5},
                        Case{70000, 65536, 0.001}, Case{5000, 64, 0.1}, Case{33, 8, 1.0}}) {
    CAPTURE(c.n, c.chunk, c.fraction);
    const auto x = heavy_data(c.n, 5);
    auto q = make_quantizer(chunk_spec(c.chunk, c.fraction, 32));
    QuantState st;
    const auto p = encode(*q, ctx, x, 1, st);
    REQUIRE(p == exact_payload_by_hand(x, c.chunk, c.fraction));
    std::vector<float> expect(x.size(), 0.0f);
    for (uint32_t i : chunk_top_indices(x, c.chunk, c.fraction)) expect[i] = x[i];
    REQUIRE(decode(*q, ctx, p, c.n) == expect);
  }
}

TEST_CASE("topk chunk: ties at a chunk's threshold go to its lowest indices", "[quant][topk][chunk]") {
  Context ctx = Context::cpu(1, 1);
  for (int64_t chunk : {int64_t{8}, int64_t{512}}) {  // nth_element below 256 values a chunk, radix above
    CAPTURE(chunk);
    const int64_t n = 3 * chunk + 3;
    std::vector<float> x(static_cast<size_t>(n), 0.5f);
    for (int64_t i = 0; i < n; i += 3) x[static_cast<size_t>(i)] = -0.5f;  // equal magnitudes, either sign
    x[static_cast<size_t>(chunk + 5)] = 2.0f;                              // one above the ties in chunk 1
    auto q = make_quantizer(chunk_spec(chunk, 0.25, 32));
    QuantState st;
    const auto p = encode(*q, ctx, x, 1, st);
    REQUIRE(p == exact_payload_by_hand(x, chunk, 0.25));
    const auto y = decode(*q, ctx, p, n);
    REQUIRE(y[0] == -0.5f);                                                   // chunk 0 starts with its ties
    REQUIRE(y[static_cast<size_t>(chunk + 5)] == 2.0f);                       // chunk 1 keeps its largest
    REQUIRE(y[static_cast<size_t>(chunk)] == x[static_cast<size_t>(chunk)]);  // and then its first ties
    REQUIRE(y[static_cast<size_t>(3 * chunk + 2)] == 0.0f);                   // the last chunk of 3 keeps 1
    REQUIRE(y[static_cast<size_t>(3 * chunk)] == x[static_cast<size_t>(3 * chunk)]);
  }
}

TEST_CASE("topk chunk: error feedback keeps v where dropped and v - decoded where sent", "[quant][topk][chunk][ef]") {
  Context ctx = Context::cpu(1, 1);
  const int64_t n = 20011, chunk = 4096;
  for (int bits : {32, 2, 4}) {
    CAPTURE(bits);
    const QuantSpec s = chunk_spec(chunk, 0.02, bits);
    auto q = make_quantizer(s);
    QuantState st(1, 0, 2);
    std::vector<float> e(static_cast<size_t>(n), 0.0f);
    for (int step = 0; step < 3; ++step) {
      const auto g = heavy_data(n, 70 + step);
      const std::vector<float> v = plus(g, e);
      const auto p = encode(*q, ctx, g, 1, st);
      const auto y = decode(*q, ctx, p, n);
      const auto kept = chunk_top_indices(v, chunk, 0.02);
      REQUIRE(at<uint32_t>(p, 24) == kept.size());
      std::vector<bool> sent(static_cast<size_t>(n), false);
      for (uint32_t i : kept) sent[i] = true;
      const float* r = st.residual().data<float>();
      RoundTripValue rt;
      rt.payload = p;
      for (int64_t i = 0; i < n; ++i) {
        const float vi = v[static_cast<size_t>(i)], yi = y[static_cast<size_t>(i)];
        CAPTURE(step, i, vi, yi);
        if (!sent[static_cast<size_t>(i)]) {
          REQUIRE(yi == 0.0f);
          REQUIRE(std::memcmp(&r[i], &vi, 4) == 0);
          continue;
        }
        const float diff = vi - yi;
        REQUIRE(std::memcmp(&r[i], &diff, 4) == 0);
        rt.x = vi;
        rt.y = yi;
        rt.index = static_cast<size_t>(i);
        REQUIRE(method_info(QuantMethod::topk).within_bound(s, rt));
      }
      e.assign(r, r + n);
    }
  }
}

TEST_CASE("topk chunk: the quantized values are global topk's for the same entries", "[quant][topk][chunk]") {
  // With one chunk covering the span, the chunked payload holds the same entries, ranges and codes as
  // the global one; only the header's field a and the index words differ.
  Context ctx = Context::cpu(1, 1);
  const int64_t n = 3000;
  const auto x = heavy_data(n, 9);
  QuantSpec global = chunk_spec(0, 0.02, 2);
  auto qg = make_quantizer(global);
  auto qc = make_quantizer(chunk_spec(4096, 0.02, 2));
  QuantState sg, sc;
  const auto pg = encode(*qg, ctx, x, 1, sg);
  const auto pc = encode(*qc, ctx, x, 1, sc);
  const int64_t k = at<uint32_t>(pg, 24);
  REQUIRE(k == 60);
  REQUIRE(at<uint32_t>(pc, 24) == k);
  REQUIRE(at<uint32_t>(pc, 4) == (2u | 12u << 8 | static_cast<uint32_t>(keep_of(0.02, 4096) - 1) << 16));
  const size_t gi = 32 + 4 * static_cast<size_t>(k), ci = 32 + 4 * static_cast<size_t>((k * 12 + 31) / 32);
  const size_t body = 8 * static_cast<size_t>((k + 127) / 128) + static_cast<size_t>((k * 2 + 7) / 8);
  REQUIRE(std::equal(pg.begin() + static_cast<std::ptrdiff_t>(gi), pg.begin() + static_cast<std::ptrdiff_t>(gi + body),
                     pc.begin() + static_cast<std::ptrdiff_t>(ci)));
  REQUIRE(decode(*qg, ctx, pg, n) == decode(*qc, ctx, pc, n));
}

TEST_CASE("topk chunk: SparseLoCo's setting takes 12-bit indices", "[quant][topk][chunk]") {
  Context ctx = Context::cpu(1, 1);
  const int64_t n = int64_t{1} << 20;
  auto q = make_quantizer(chunk_spec(4096, 0.02, 2));
  QuantState st;
  const auto p = encode(*q, ctx, normal_data(n, 3), 1, st);
  const int64_t k = 256 * 82;  // round(0.02 * 4096) = 82 per chunk
  REQUIRE(at<uint32_t>(p, 24) == k);
  // 12 + 2 bits a value and a (lo, hi) pair per 128: 14.5 bits against global topk's 34.5.
  REQUIRE(p.size() == wire::pad8(32 + 4 * static_cast<size_t>((k * 12 + 31) / 32) + 8 * ((k + 127) / 128) +
                                 static_cast<size_t>(k * 2 / 8)));
}
