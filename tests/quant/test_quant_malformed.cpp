// Malformed payloads: decode must report an InputError and never read or write out of bounds. Targeted
// cases (truncated, wrong method or version, lengths pointing outside the buffer, indices out of range)
// and a randomized corruption test (thousands of mutated payloads per method). Each payload is copied
// into a buffer of exactly its size and decoded between guard zones, so the AddressSanitizer build of
// this file (label asan) catches any stray read and the guards any stray write.
#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <tuple>

#include "quant/wire.h"
#include "tests/quant/quant_test_util.h"

using namespace qtrain;
using namespace qtrain::quant_test;

namespace {

constexpr int64_t kGuard = 64;
constexpr float kSentinel = -7777.0f;

enum class Outcome { decoded, rejected };

// Decodes (or decode_adds) `payload`, copied into an exactly sized heap buffer, into the middle of a
// guarded array. Fails the test on any exception other than InputError, on a guard overwrite, and on
// a rejected payload that changed the output.
Outcome checked_decode(const Quantizer& q, Context& ctx, const std::vector<uint8_t>& payload, int64_t n, bool add) {
  std::vector<uint8_t> exact(payload);  // its own allocation of exactly payload.size() bytes
  std::vector<float> buf(static_cast<size_t>(n + 2 * kGuard), kSentinel);
  for (int64_t i = 0; i < n; ++i) buf[static_cast<size_t>(kGuard + i)] = static_cast<float>(i % 7);
  const std::vector<float> before = buf;
  Outcome outcome = Outcome::decoded;
  try {
    std::span<float> out(buf.data() + kGuard, static_cast<size_t>(n));
    if (add)
      q.decode_add(ctx, std::span<const uint8_t>(exact.data(), exact.size()), n, out);
    else
      q.decode(ctx, std::span<const uint8_t>(exact.data(), exact.size()), n, out);
  } catch (const InputError&) {
    outcome = Outcome::rejected;
  }
  for (int64_t i = 0; i < kGuard; ++i) {
    REQUIRE(buf[static_cast<size_t>(i)] == kSentinel);
    REQUIRE(buf[static_cast<size_t>(kGuard + n + i)] == kSentinel);
  }
  if (outcome == Outcome::rejected) REQUIRE(std::memcmp(buf.data(), before.data(), buf.size() * sizeof(float)) == 0);
  return outcome;
}

void put_u32(std::vector<uint8_t>& p, size_t off, uint32_t v) { std::memcpy(p.data() + off, &v, 4); }
void put_u64(std::vector<uint8_t>& p, size_t off, uint64_t v) { std::memcpy(p.data() + off, &v, 8); }
uint32_t u32_of(const std::vector<uint8_t>& p, size_t off) {
  uint32_t v;
  std::memcpy(&v, p.data() + off, 4);
  return v;
}

// topk's chunk-local index j (`bits` wide, LSB first from byte 32).
uint32_t field_of(const std::vector<uint8_t>& p, int64_t j, int bits) {
  uint32_t v = 0;
  for (int b = 0; b < bits; ++b) {
    const int64_t bit = j * bits + b;
    v |= static_cast<uint32_t>((p[32 + static_cast<size_t>(bit / 8)] >> (bit % 8)) & 1u) << b;
  }
  return v;
}
void put_field(std::vector<uint8_t>& p, int64_t j, int bits, uint32_t v) {
  for (int b = 0; b < bits; ++b) {
    const int64_t bit = j * bits + b;
    auto& byte = p[32 + static_cast<size_t>(bit / 8)];
    byte = static_cast<uint8_t>((byte & ~(1u << (bit % 8))) | (((v >> b) & 1u) << (bit % 8)));
  }
}

struct Encoded {
  std::unique_ptr<Quantizer> q;
  std::vector<uint8_t> payload;
  int64_t n;
};

Encoded encoded(const QuantSpec& s, int64_t n, int64_t column) {
  Context ctx = Context::cpu(1, 1);
  Encoded e{make_quantizer(s), {}, n};
  QuantState st(3, 1, 4);
  e.payload = encode(*e.q, ctx, normal_data(n, 99), column, st);
  return e;
}

QuantSpec with(QuantMethod m) { return QuantSpec::defaults(m); }

void dec(const Quantizer& q, Context& ctx, const std::vector<uint8_t>& payload, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  q.decode(ctx, payload, n, out);
}

}  // namespace

TEST_CASE("malformed: truncated payloads", "[quant][malformed]") {
  Context ctx = Context::cpu(1, 1);
  for (const QuantSpec& s : all_specs()) {
    CAPTURE(s.str());
    const Encoded e = encoded(s, 600, 30);
    REQUIRE(checked_decode(*e.q, ctx, e.payload, e.n, false) == Outcome::decoded);
    for (size_t cut : {size_t{0}, size_t{1}, size_t{31}, size_t{32}, e.payload.size() / 2, e.payload.size() - 1}) {
      std::vector<uint8_t> p(e.payload.begin(), e.payload.begin() + static_cast<std::ptrdiff_t>(cut));
      REQUIRE(checked_decode(*e.q, ctx, p, e.n, false) == Outcome::rejected);
      REQUIRE(checked_decode(*e.q, ctx, p, e.n, true) == Outcome::rejected);
    }
    // A longer buffer (a fixed-size receive slot) is fine: the header says where the payload ends.
    std::vector<uint8_t> longer = e.payload;
    longer.resize(longer.size() + 40, 0xab);
    REQUIRE(checked_decode(*e.q, ctx, longer, e.n, false) == Outcome::decoded);
  }
}

TEST_CASE("malformed: wrong magic, method, version, value count", "[quant][malformed]") {
  Context ctx = Context::cpu(1, 1);
  const Encoded e = encoded(with(QuantMethod::qsgd), 600, 30);
  auto p = e.payload;
  p[0] = 'X';
  REQUIRE_THROWS_WITH(dec(*e.q, ctx, p, e.n), Catch::Contains("not a qtrain quantizer payload"));
  p = e.payload;
  p[2] = static_cast<uint8_t>(QuantMethod::dettmers8);
  REQUIRE_THROWS_WITH(dec(*e.q, ctx, p, e.n), Catch::Contains("qsgd payload: the payload is method dettmers8"));
  p[2] = 200;
  REQUIRE_THROWS_WITH(dec(*e.q, ctx, p, e.n), Catch::Contains("method unknown (200)"));
  p = e.payload;
  p[3] = 2;
  REQUIRE_THROWS_WITH(dec(*e.q, ctx, p, e.n), Catch::Contains("version 2 is not supported"));
  REQUIRE_THROWS_WITH(dec(*e.q, ctx, e.payload, 601), Catch::Contains("holds 600 values, the receiver expects 601"));
  // A decoder of another method refuses the payload.
  auto other = make_quantizer(with(QuantMethod::onebit));
  REQUIRE_THROWS_AS(dec(*other, ctx, e.payload, e.n), InputError);
}

TEST_CASE("malformed: lengths that point outside the buffer", "[quant][malformed]") {
  Context ctx = Context::cpu(1, 1);
  for (const QuantSpec& s : all_specs()) {
    CAPTURE(s.str());
    const Encoded e = encoded(s, 600, 30);
    for (uint64_t total : {uint64_t{0}, uint64_t{8}, e.payload.size() + 8, uint64_t{1} << 40, ~uint64_t{0} - 7}) {
      auto p = e.payload;
      put_u64(p, 16, total);
      REQUIRE(checked_decode(*e.q, ctx, p, e.n, false) == Outcome::rejected);
    }
    // Parameters that would make the layout larger than the payload.
    for (size_t field : {size_t{4}, size_t{24}, size_t{28}}) {
      for (uint32_t v : {0u, 1u, 3u, 0xffffffffu, 0x10000u}) {
        auto p = e.payload;
        put_u32(p, field, v);
        checked_decode(*e.q, ctx, p, e.n, false);  // decoded (harmless values) or rejected: never out of bounds
      }
    }
  }
}

TEST_CASE("malformed: indices and offsets out of range", "[quant][malformed]") {
  Context ctx = Context::cpu(1, 1);
  SECTION("topk") {
    const Encoded e = encoded(with(QuantMethod::topk), 1000, 1);  // k = 10
    auto p = e.payload;
    put_u32(p, 32 + 4 * 9, 1000);  // last index == n
    REQUIRE_THROWS_WITH(dec(*e.q, ctx, p, 1000), Catch::Contains("outside [0, 1000)"));
    p = e.payload;
    put_u32(p, 32 + 4 * 3, 0xffffffffu);
    REQUIRE(checked_decode(*e.q, ctx, p, 1000, true) == Outcome::rejected);
    p = e.payload;
    std::memcpy(p.data() + 32 + 4, p.data() + 32, 4);  // duplicate index
    REQUIRE_THROWS_WITH(dec(*e.q, ctx, p, 1000), Catch::Contains("indices must increase"));
    p = e.payload;
    put_u32(p, 24, 11);  // k larger than the body
    REQUIRE(checked_decode(*e.q, ctx, p, 1000, false) == Outcome::rejected);
    p = e.payload;
    put_u32(p, 28, 5);  // f32 values take no range length
    REQUIRE_THROWS_WITH(dec(*e.q, ctx, p, 1000), Catch::Contains("field c must be zero"));
  }
  SECTION("topk quantized values") {
    QuantSpec s = with(QuantMethod::topk);
    s.set("value_bits", 2);
    s.set("value_block", 4);
    const Encoded e = encoded(s, 1000, 1);  // k = 10: ranges of 4, 4, 2; 20 code bits in 3 bytes
    const size_t ranges = 32 + 40, codes = ranges + 3 * 8;
    REQUIRE(e.payload.size() == wire::pad8(codes + 3));
    REQUIRE(checked_decode(*e.q, ctx, e.payload, 1000, false) == Outcome::decoded);
    auto p = e.payload;
    put_u32(p, 4, 3);  // no such value format
    REQUIRE_THROWS_WITH(dec(*e.q, ctx, p, 1000), Catch::Contains("value format (field a) 3"));
    p = e.payload;
    put_u32(p, 28, 0);  // ranges of no entries
    REQUIRE_THROWS_WITH(dec(*e.q, ctx, p, 1000), Catch::Contains("a range of 0 entries"));
    p = e.payload;
    put_u32(p, 28, 5);  // ranges of 5: another length than the payload's
    REQUIRE_THROWS_WITH(dec(*e.q, ctx, p, 1000), Catch::Contains("length field"));
    p = e.payload;
    put_u32(p, 4, 8);  // 8-bit codes: another length too
    REQUIRE_THROWS_WITH(dec(*e.q, ctx, p, 1000), Catch::Contains("length field"));
    for (auto [at, bits, why] : {std::tuple{ranges + 8, 0x7fc00000u, "range 1"},      // lo NaN
                                 std::tuple{ranges + 12, 0x7f800000u, "range 1"},     // hi Inf
                                 std::tuple{ranges + 16, 0x80000000u, "range 2"},     // lo -0: a sign
                                 std::tuple{ranges + 16, 0x7f000000u, "range 2"}}) {  // lo > hi
      p = e.payload;
      put_u32(p, at, bits);
      REQUIRE_THROWS_WITH(dec(*e.q, ctx, p, 1000), Catch::Contains(why) && Catch::Contains("0 <= lo <= hi"));
      REQUIRE(checked_decode(*e.q, ctx, p, 1000, true) == Outcome::rejected);
    }
    p = e.payload;
    p[codes + 2] |= 0x10;  // a bit after the 10th code
    REQUIRE_THROWS_WITH(dec(*e.q, ctx, p, 1000), Catch::Contains("bits after the last code"));
    p = e.payload;
    std::memcpy(p.data() + 32 + 8, p.data() + 32 + 4, 4);  // duplicate index
    REQUIRE_THROWS_WITH(dec(*e.q, ctx, p, 1000), Catch::Contains("indices must increase"));
  }
  SECTION("topk chunk") {
    QuantSpec s = with(QuantMethod::topk);
    s.set("chunk", 64);
    s.set("fraction", 0.1);
    // 15 chunks of 64 keep 6 each, the last of 40 keeps 4: k = 94 local indices of 6 bits in 18 words
    // (564 bits used), then 94 f32 values.
    const Encoded e = encoded(s, 1000, 1);
    REQUIRE(u32_of(e.payload, 4) == (6u << 8 | 5u << 16));
    REQUIRE(u32_of(e.payload, 24) == 94);
    REQUIRE(e.payload.size() == wire::pad8(32 + 72 + 4 * 94));
    REQUIRE(checked_decode(*e.q, ctx, e.payload, 1000, false) == Outcome::decoded);
    auto p = e.payload;
    put_field(p, 90, 6, 40);  // the last chunk's first local index == its length
    REQUIRE_THROWS_WITH(dec(*e.q, ctx, p, 1000),
                        Catch::Contains("local index 40 of entry 90 is outside chunk 15's [0, 40)"));
    REQUIRE(checked_decode(*e.q, ctx, p, 1000, true) == Outcome::rejected);
    p = e.payload;
    put_field(p, 8, 6, field_of(p, 7, 6));  // a duplicate in chunk 1
    REQUIRE_THROWS_WITH(dec(*e.q, ctx, p, 1000), Catch::Contains("indices must increase: entry 8"));
    p = e.payload;
    put_field(p, 6, 6, 63);  // chunk 1's first entry above chunk 0's last: fine, another chunk
    put_field(p, 7, 6, 0);   // but then its second below it
    REQUIRE_THROWS_WITH(dec(*e.q, ctx, p, 1000),
                        Catch::Contains("indices must increase: entry 7 is 0 after 63 in chunk 1"));
    p = e.payload;
    p[32 + 564 / 8] |= static_cast<uint8_t>(1u << (564 % 8));  // the first bit after the last index
    REQUIRE_THROWS_WITH(dec(*e.q, ctx, p, 1000), Catch::Contains("bits after the last index"));
    p = e.payload;
    put_u32(p, 4, 17u << 8 | 5u << 16);
    REQUIRE_THROWS_WITH(dec(*e.q, ctx, p, 1000), Catch::Contains("chunks of 2^17 values"));
    put_u32(p, 4, 6u << 8 | 64u << 16);  // K = 65 > 64
    REQUIRE_THROWS_WITH(dec(*e.q, ctx, p, 1000), Catch::Contains("65 entries per chunk (field a) for chunks of 64"));
    put_u32(p, 4, 5u << 16);  // chunk entries without chunks
    REQUIRE_THROWS_WITH(dec(*e.q, ctx, p, 1000), Catch::Contains("bits 16..31 must be zero"));
    for (uint32_t k : {90u, 131u}) {  // the last chunk would keep 0 or 41 of its 40 values
      p = e.payload;
      put_u32(p, 24, k);
      REQUIRE_THROWS_WITH(dec(*e.q, ctx, p, 1000), Catch::Contains("do not split into 16 chunks of 6 entries"));
    }
    p = e.payload;
    put_u32(p, 4, 6u << 8 | 6u << 16);  // K = 7: 15 chunks take 105 > 94 entries
    REQUIRE(checked_decode(*e.q, ctx, p, 1000, false) == Outcome::rejected);
    // A whole last chunk keeps K entries, no fewer.
    const Encoded whole = encoded(s, 1024, 1);
    REQUIRE(u32_of(whole.payload, 24) == 96);
    p = whole.payload;
    put_u32(p, 24, 95);
    REQUIRE_THROWS_WITH(dec(*whole.q, ctx, p, 1024), Catch::Contains("do not split"));
  }
  SECTION("adaptive") {
    const int64_t n = 3200, column = 100;
    const Encoded e = encoded(with(QuantMethod::adaptive), n, column);
    uint32_t entries;
    std::memcpy(&entries, e.payload.data() + 28, 4);
    REQUIRE(entries == 100);
    const size_t entries_at = 32 + 12 * 32 + 4;
    auto p = e.payload;
    p[entries_at] = 0xfe;  // row 127 >= 100
    p[entries_at + 1] = 0x00;
    REQUIRE_THROWS_WITH(dec(*e.q, ctx, p, n), Catch::Contains("rows must increase and stay below 100"));
    p = e.payload;
    put_u32(p, 32 + 12 * 5, 1000);  // column 5 starts past the entries
    REQUIRE_THROWS_WITH(dec(*e.q, ctx, p, n), Catch::Contains("column 5 starts at entry 1000"));
    p = e.payload;
    put_u32(p, 32 + 12 * 31, 0);  // decreasing offsets
    REQUIRE(checked_decode(*e.q, ctx, p, n, false) == Outcome::rejected);
    p = e.payload;
    put_u32(p, 32 + 12 * 32, entries + 1);  // body count disagrees with the header
    REQUIRE_THROWS_WITH(dec(*e.q, ctx, p, n), Catch::Contains("entry count"));
    p = e.payload;
    put_u32(p, 4, 4);  // 32-bit entries claimed for 100-row columns
    REQUIRE_THROWS_WITH(dec(*e.q, ctx, p, n), Catch::Contains("entry width"));
  }
  SECTION("scales and means must be finite") {
    auto e = encoded(with(QuantMethod::qsgd), 600, 30);
    put_u32(e.payload, 32, 0x7fc00000u);
    REQUIRE_THROWS_WITH(dec(*e.q, ctx, e.payload, 600), Catch::Contains("bucket 0 has scale"));
    auto d = encoded(with(QuantMethod::dettmers8), 600, 30);
    put_u32(d.payload, 24, 0xff800000u);
    REQUIRE_THROWS_WITH(dec(*d.q, ctx, d.payload, 600), Catch::Contains("scale field"));
    auto o = encoded(with(QuantMethod::onebit), 600, 30);
    put_u32(o.payload, 32 + 12 * 3 + 4, 0x7f800000u);
    REQUIRE_THROWS_WITH(dec(*o.q, ctx, o.payload, 600), Catch::Contains("group 3 has a non-finite mean"));
  }
}

TEST_CASE("randomized corruption: thousands of mutated payloads per method", "[quant][malformed][fuzz]") {
  Context ctx = Context::cpu(1, 1);
  std::mt19937_64 rng(20260101);
  const int kMutations = 2500;
  for (const QuantSpec& s : all_specs()) {
    CAPTURE(s.str());
    const int64_t n = 640, column = 32;
    const Encoded e = encoded(s, n, column);
    int rejected = 0;
    for (int it = 0; it < kMutations; ++it) {
      std::vector<uint8_t> p = e.payload;
      const int kind = static_cast<int>(rng() % 7);
      const auto pick = [&](size_t size) { return size == 0 ? size_t{0} : static_cast<size_t>(rng() % size); };
      switch (kind) {
        case 0:  // flip a few bits anywhere
          for (int f = 1 + static_cast<int>(rng() % 4); f > 0; --f)
            p[pick(p.size())] ^= static_cast<uint8_t>(1u << (rng() % 8));
          break;
        case 1:  // random bytes
          for (int f = 1 + static_cast<int>(rng() % 8); f > 0; --f) p[pick(p.size())] = static_cast<uint8_t>(rng());
          break;
        case 2: {  // an interesting 32-bit value at an aligned spot, often in the header
          const size_t at = (rng() % 2 ? pick(32) : pick(p.size())) & ~size_t{3};
          const uint32_t vals[] = {0u,
                                   1u,
                                   2u,
                                   4u,
                                   16u,
                                   0x7fffu,
                                   0x8000u,
                                   0xffffu,
                                   0x7fffffffu,
                                   0xffffffffu,
                                   static_cast<uint32_t>(n),
                                   static_cast<uint32_t>(n + 1),
                                   static_cast<uint32_t>(p.size()),
                                   static_cast<uint32_t>(rng())};
          if (at + 4 <= p.size()) put_u32(p, at, vals[rng() % std::size(vals)]);
          break;
        }
        case 3:  // truncate
          p.resize(pick(p.size()));
          break;
        case 4:  // a wrong total or n
          put_u64(p, rng() % 2 ? 16 : 8, rng() % 2 ? rng() % (p.size() + 64) : rng());
          break;
        case 5: {  // copy a block of the payload over another place
          const size_t len = 1 + pick(std::min<size_t>(64, p.size() - 1));
          const size_t from = pick(p.size() - len), to = pick(p.size() - len);
          std::memmove(p.data() + to, p.data() + from, len);
          break;
        }
        default:  // random garbage after a valid header, keeping its length
          for (size_t i = 32; i < p.size(); ++i)
            if (rng() % 16 == 0) p[i] = static_cast<uint8_t>(rng());
          break;
      }
      if (checked_decode(*e.q, ctx, p, n, it % 2 == 1) == Outcome::rejected) ++rejected;
    }
    INFO(rejected << " of " << kMutations << " mutated payloads rejected");
    REQUIRE(rejected > 0);
  }
}
