// DeMo's codec on the CPU (train/sync/demo_codec.h): the DCT against its closed form, the top-k choice
// and its ties, the momentum as error feedback, the sign variant's scale, several ranks simulated in
// one process against an independent decode, the same bits for any thread count, and every malformed
// payload refused before anything is written.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <numbers>
#include <vector>

#include "framework/core/philox.h"
#include "tests/support/error_of.h"
#include "train/sync/demo_codec.h"

using namespace qtrain;
using namespace qtrain::demo;
using qtrain::testing::error_of;

namespace {

// The orthonormal DCT-II basis, written out independently of the codec.
double dct(int64_t k, int64_t n, int64_t L) {
  const double s = k == 0 ? std::sqrt(1.0 / static_cast<double>(L)) : std::sqrt(2.0 / static_cast<double>(L));
  return s * std::cos(std::numbers::pi * (2.0 * static_cast<double>(n) + 1.0) * static_cast<double>(k) /
                      (2.0 * static_cast<double>(L)));
}

std::vector<float> random_values(int64_t n, uint64_t stream, float scale = 1.0f) {
  std::vector<float> out(static_cast<size_t>(n));
  const PhiloxKey key = derive_philox_key(7, stream);
  for (int64_t i = 0; i < n; ++i) {
    const PhiloxBlock b = philox4x32_10(static_cast<uint32_t>(i), 0, 0, 0, key);
    out[static_cast<size_t>(i)] = scale * (2.0f * uniform_from_bits(b.v[0]) - 1.0f);
  }
  return out;
}

// The kept coefficients of one chunk as a payload holds them: frequency and the value sent (in the
// sign variant +-scale).
struct Decoded {
  std::vector<int64_t> index;
  std::vector<float> value;
  float scale = 0;
};

// Every chunk's entries of `payload`, read with the layout of demo_wire.h written out again.
std::vector<Decoded> entries(const Codec& codec, const std::vector<ArenaSpan>& tensors, const uint8_t* payload) {
  const CodecOptions& o = codec.options();
  const size_t index_bytes = wire::index_bytes(o.chunk);
  const size_t indices = wire::kHeaderBytes + 4 * static_cast<size_t>(o.sign ? codec.chunks() : codec.kept());
  const size_t signs = indices + index_bytes * static_cast<size_t>(codec.kept());
  std::vector<Decoded> out;
  int64_t c = 0, first = 0, sign_byte = 0;
  for (const ArenaSpan& t : tensors)
    for (int64_t at = 0; at < t.numel; at += o.chunk, ++c) {
      const int64_t K = std::min(o.topk, t.numel - at);
      Decoded d;
      if (o.sign) std::memcpy(&d.scale, payload + wire::kHeaderBytes + 4 * static_cast<size_t>(c), 4);
      for (int64_t j = 0; j < K; ++j) {
        const size_t i = indices + index_bytes * static_cast<size_t>(first + j);
        d.index.push_back(index_bytes == 1 ? payload[i] : payload[i] | payload[i + 1] << 8);
        float v = d.scale;
        if (o.sign) {
          if (payload[signs + static_cast<size_t>(sign_byte + j / 8)] >> (j % 8) & 1) v = -v;
        } else {
          std::memcpy(&v, payload + wire::kHeaderBytes + 4 * static_cast<size_t>(first + j), 4);
        }
        d.value.push_back(v);
      }
      first += K;
      sign_byte += (K + 7) / 8;
      out.push_back(d);
    }
  return out;
}

}  // namespace

TEST_CASE("demo codec: a pure cosine is one DCT coefficient; all coefficients kept leave no momentum", "[demo]") {
  Context ctx = Context::cpu(1, 1);
  const int64_t L = 64;
  Codec codec({{0, L}}, {.chunk = L, .topk = 1, .sign = false, .beta = 0.0f}, Device::cpu());
  std::vector<float> g(L), m(L, 0.0f);
  for (int64_t n = 0; n < L; ++n) g[static_cast<size_t>(n)] = static_cast<float>(5.0 * dct(3, n, L));
  std::vector<uint8_t> payload(codec.payload_bytes());
  codec.encode(ctx, m.data(), g.data(), payload.data());
  const Decoded d = entries(codec, {{0, L}}, payload.data())[0];
  CHECK(d.index[0] == 3);
  CHECK(d.value[0] == Approx(5.0).epsilon(1e-6));
  for (float v : m) CHECK(std::abs(v) < 1e-5f);  // what was sent left the momentum

  // Every coefficient kept: the momentum is left with rounding only, and the decoded update is sign(g).
  Codec all({{0, L}}, {.chunk = L, .topk = L, .sign = false, .beta = 0.0f}, Device::cpu());
  const std::vector<float> r = random_values(L, 1);
  std::vector<float> m2(L, 0.0f), out(L, 7.0f);
  std::vector<uint8_t> p2(all.payload_bytes());
  all.encode(ctx, m2.data(), r.data(), p2.data());
  for (float v : m2) CHECK(std::abs(v) < 1e-6f);
  all.decode(ctx, p2.data(), 1, out.data());
  for (int64_t n = 0; n < L; ++n) CHECK(out[static_cast<size_t>(n)] == (r[static_cast<size_t>(n)] > 0 ? 1.0f : -1.0f));
}

TEST_CASE("demo codec: the largest coefficients are kept, ties to the lower frequency, in increasing order", "[demo]") {
  Context ctx = Context::cpu(1, 1);
  // A chunk whose DCT is X = (0.5, -3, 1, 2, 0, ..., 0): top 2 keeps k = 1 and 3.
  const int64_t L = 16;
  std::vector<double> X(L, 0.0);
  X[0] = 0.5, X[1] = -3, X[2] = 1, X[3] = 2;
  std::vector<float> g(L), m(L, 0.0f);
  for (int64_t n = 0; n < L; ++n) {
    double x = 0;
    for (int64_t k = 0; k < L; ++k) x += dct(k, n, L) * X[static_cast<size_t>(k)];
    g[static_cast<size_t>(n)] = static_cast<float>(x);
  }
  Codec codec({{0, L}}, {.chunk = L, .topk = 2, .sign = false, .beta = 0.0f}, Device::cpu());
  std::vector<uint8_t> payload(codec.payload_bytes());
  codec.encode(ctx, m.data(), g.data(), payload.data());
  const Decoded d = entries(codec, {{0, L}}, payload.data())[0];
  CHECK(d.index == std::vector<int64_t>{1, 3});
  CHECK(d.value[0] == Approx(-3.0).epsilon(1e-6));
  CHECK(d.value[1] == Approx(2.0).epsilon(1e-6));

  // Chunks of 2: x = (1, 0) has X = (s, s) and x = (0, 1) has X = (s, -s), s = 1/sqrt(2), the same
  // magnitude bit for bit: top 1 keeps frequency 0 in both.
  Codec pairs({{0, 4}}, {.chunk = 2, .topk = 1, .sign = false, .beta = 0.0f}, Device::cpu());
  const std::vector<float> g2 = {1.0f, 0.0f, 0.0f, 1.0f};
  std::vector<float> m2(4, 0.0f);
  std::vector<uint8_t> p2(pairs.payload_bytes());
  pairs.encode(ctx, m2.data(), g2.data(), p2.data());
  const std::vector<Decoded> both = entries(pairs, {{0, 4}}, p2.data());
  CHECK(both[0].index[0] == 0);
  CHECK(both[1].index[0] == 0);
  // The frequency not sent stays in the momentum: (1, 0) - IDCT(s, 0) = (0.5, -0.5).
  CHECK(m2[0] == Approx(0.5).epsilon(1e-6));
  CHECK(m2[1] == Approx(-0.5).epsilon(1e-6));
}

TEST_CASE("demo codec: the momentum decays, takes the gradient and gives up exactly what was sent", "[demo]") {
  // Tensors with ragged ends: 150 = 2 x 64 + 22, one shorter than a chunk, an empty one, and a gap in
  // the arena (offset 400) that nothing may touch.
  const std::vector<ArenaSpan> tensors = {{0, 150}, {150, 5}, {155, 0}, {400, 64}};
  const int64_t arena = 464;
  for (const bool sign : {false, true}) {
    INFO("sign " << sign);
    Context ctx = Context::cpu(1, 1);
    const CodecOptions o{.chunk = 64, .topk = 4, .sign = sign, .beta = 0.9f};
    Codec codec(tensors, o, Device::cpu());
    CHECK(codec.chunks() == 3 + 1 + 1);
    CHECK(codec.kept() == 4 * 3 + 4 + 4);
    std::vector<float> m = random_values(arena, 2, 0.1f);
    const std::vector<float> g = random_values(arena, 3);
    const std::vector<float> before = m;
    std::vector<uint8_t> payload(codec.payload_bytes());
    codec.encode(ctx, m.data(), g.data(), payload.data());
    CHECK_NOTHROW(codec.check(payload, 0));
    for (int64_t i = 155; i < 400; ++i) CHECK(m[static_cast<size_t>(i)] == before[static_cast<size_t>(i)]);
    // m_new + IDCT(sent) = 0.9 m_old + g, chunk by chunk; in the sign variant the scale is the mean
    // magnitude of the kept coefficients of 0.9 m_old + g.
    const std::vector<Decoded> sent = entries(codec, tensors, payload.data());
    size_t c = 0;
    for (const ArenaSpan& t : tensors) {
      for (int64_t at = 0; at < t.numel; at += 64, ++c) {
        const int64_t L = std::min<int64_t>(64, t.numel - at);
        const Decoded& d = sent[c];
        std::vector<double> X(static_cast<size_t>(L), 0.0);
        for (int64_t k = 0; k < L; ++k)
          for (int64_t n = 0; n < L; ++n) {
            const size_t i = static_cast<size_t>(t.offset + at + n);
            X[static_cast<size_t>(k)] += dct(k, n, L) * (0.9 * before[i] + g[i]);
          }
        double magnitude = 0;
        for (size_t j = 0; j < d.index.size(); ++j) {
          CHECK(d.index[j] < L);
          if (j > 0) CHECK(d.index[j] > d.index[j - 1]);
          const double x = X[static_cast<size_t>(d.index[j])];
          magnitude += std::abs(x);
          if (sign) CHECK((d.value[j] < 0) == (x < 0));
        }
        if (sign) CHECK(d.scale == Approx(magnitude / static_cast<double>(d.index.size())).epsilon(1e-5));
        for (int64_t n = 0; n < L; ++n) {
          const size_t i = static_cast<size_t>(t.offset + at + n);
          double out = 0;
          for (size_t j = 0; j < d.index.size(); ++j) out += dct(d.index[j], n, L) * d.value[j];
          CHECK(m[i] + out == Approx(0.9 * before[i] + g[i]).margin(1e-6));
        }
      }
    }
  }
}

TEST_CASE("demo codec: ranks simulated in one process decode to the sign of the summed inverse transforms", "[demo]") {
  const std::vector<ArenaSpan> tensors = {{0, 1000}, {1000, 37}};
  const int64_t arena = 1037;
  const int ranks = 3;
  for (const bool sign : {false, true}) {
    INFO("sign " << sign);
    Context ctx = Context::cpu(1, 1);
    const CodecOptions o{.chunk = 50, .topk = 6, .sign = sign, .beta = 0.5f};
    std::vector<Codec> codecs;
    std::vector<std::vector<float>> momentum;
    for (int r = 0; r < ranks; ++r) {
      codecs.emplace_back(tensors, o, Device::cpu());
      momentum.push_back(random_values(arena, 10 + static_cast<uint64_t>(r), 0.2f));
    }
    const size_t bytes = codecs[0].payload_bytes();
    std::vector<uint8_t> gathered(bytes * ranks);
    for (int step = 0; step < 3; ++step) {
      for (int r = 0; r < ranks; ++r) {
        const std::vector<float> g = random_values(arena, 100 + static_cast<uint64_t>(step * ranks + r));
        codecs[static_cast<size_t>(r)].encode(ctx, momentum[static_cast<size_t>(r)].data(), g.data(),
                                              gathered.data() + bytes * static_cast<size_t>(r));
      }
      // Every rank decodes the same bytes into the same update.
      std::vector<std::vector<float>> out(ranks, std::vector<float>(arena, 9.0f));
      for (int r = 0; r < ranks; ++r)
        codecs[static_cast<size_t>(r)].decode(ctx, gathered.data(), ranks, out[static_cast<size_t>(r)].data());
      for (int r = 1; r < ranks; ++r) REQUIRE(out[static_cast<size_t>(r)] == out[0]);
      // An independent decode: per rank the inverse DCT of its entries, summed in double.
      std::vector<double> u(arena, 0.0);
      for (int r = 0; r < ranks; ++r) {
        const std::vector<Decoded> sent = entries(codecs[0], tensors, gathered.data() + bytes * static_cast<size_t>(r));
        size_t c = 0;
        for (const ArenaSpan& t : tensors)
          for (int64_t at = 0; at < t.numel; at += 50, ++c) {
            const int64_t L = std::min<int64_t>(50, t.numel - at);
            for (size_t j = 0; j < sent[c].index.size(); ++j)
              for (int64_t n = 0; n < L; ++n)
                u[static_cast<size_t>(t.offset + at + n)] += dct(sent[c].index[j], n, L) * sent[c].value[j];
          }
      }
      int64_t checked = 0;
      for (int64_t i = 0; i < arena; ++i) {
        const float got = out[0][static_cast<size_t>(i)];
        CHECK((got == 1.0f || got == -1.0f || got == 0.0f));
        if (std::abs(u[static_cast<size_t>(i)]) > 1e-5) {
          CHECK(got == (u[static_cast<size_t>(i)] > 0 ? 1.0f : -1.0f));
          ++checked;
        }
      }
      CHECK(checked > arena / 2);
    }
  }
}

TEST_CASE("demo codec: the same bits on one lane and on several", "[demo]") {
  const std::vector<ArenaSpan> tensors = {{0, 20000}, {20000, 333}};
  const CodecOptions o{.chunk = 64, .topk = 8, .sign = false, .beta = 0.999f};
  Context one = Context::cpu(1, 1), four = Context::cpu(1, 4);
  Codec a(tensors, o, Device::cpu()), b(tensors, o, Device::cpu());
  std::vector<float> ma = random_values(20333, 4), mb = ma;
  const std::vector<float> g = random_values(20333, 5);
  std::vector<uint8_t> pa(a.payload_bytes()), pb(b.payload_bytes());
  a.encode(one, ma.data(), g.data(), pa.data());
  b.encode(four, mb.data(), g.data(), pb.data());
  CHECK(pa == pb);
  CHECK(std::memcmp(ma.data(), mb.data(), ma.size() * 4) == 0);
  std::vector<float> oa(20333), ob(20333);
  a.decode(one, pa.data(), 1, oa.data());
  b.decode(four, pb.data(), 1, ob.data());
  CHECK(std::memcmp(oa.data(), ob.data(), oa.size() * 4) == 0);
}

TEST_CASE("demo codec: a malformed payload is refused naming the rank and the problem, before any write", "[demo]") {
  Context ctx = Context::cpu(1, 1);
  // Chunks of 300 (u16 indices) and a tail of 47 values.
  const std::vector<ArenaSpan> tensors = {{0, 647}};
  for (const bool sign : {false, true}) {
    INFO("sign " << sign);
    const CodecOptions o{.chunk = 300, .topk = 10, .sign = sign, .beta = 0.9f};
    Codec codec(tensors, o, Device::cpu());
    std::vector<float> m(647, 0.0f);
    const std::vector<float> g = random_values(647, 6);
    std::vector<uint8_t> good(codec.payload_bytes());
    codec.encode(ctx, m.data(), g.data(), good.data());
    const size_t values = wire::kHeaderBytes, indices = values + 4 * (sign ? 3 : 30), signs = indices + 2 * 30;
    auto refused = [&](const std::function<void(std::vector<uint8_t>&)>& corrupt) {
      std::vector<uint8_t> two(good);
      two.insert(two.end(), good.begin(), good.end());
      std::vector<uint8_t> bad(good);
      corrupt(bad);
      std::copy(bad.begin(), bad.end(), two.begin() + static_cast<std::ptrdiff_t>(good.size()));
      std::vector<float> out(647, 3.0f);
      const std::string message = error_of([&] { codec.decode(ctx, two.data(), 2, out.data()); });
      for (float v : out) REQUIRE(v == 3.0f);  // nothing written
      return message;
    };
    using Catch::Contains;
    CHECK_THAT(error_of([&] {
                 codec.check({good.data(), good.size() - 8}, 2);
               }),
               Contains("rank 2") && Contains("bytes"));
    CHECK_THAT(refused([](auto& p) { p[0] = 'Q'; }), Contains("rank 1") && Contains("magic"));
    CHECK_THAT(refused([](auto& p) { p[2] = 2; }), Contains("version 2"));
    CHECK_THAT(refused([](auto& p) { p[3] ^= 1; }), Contains("flags"));
    CHECK_THAT(refused([](auto& p) { p[4] = 64; }), Contains("chunk"));
    CHECK_THAT(refused([](auto& p) { p[8] = 11; }), Contains("topk"));
    CHECK_THAT(refused([](auto& p) { p[12] = 1; }), Contains("reserved"));
    CHECK_THAT(refused([](auto& p) { p[16] = 1; }), Contains("n (values)"));
    CHECK_THAT(refused([](auto& p) { p[24] ^= 8; }), Contains("total"));
    // Indices: not increasing, and one at the tail chunk's length.
    CHECK_THAT(refused([&](auto& p) { std::memcpy(&p[indices + 2], &p[indices], 2); }),
               Contains("chunk 0") && Contains("index 1"));
    CHECK_THAT(refused([&](auto& p) {
                 const uint16_t k = 47;
                 std::memcpy(&p[indices + 2 * 29], &k, 2);
               }),
               Contains("chunk 2") && Contains("length 47"));
    const float nan = std::numeric_limits<float>::quiet_NaN(), minus = -1.0f;
    if (sign) {
      CHECK_THAT(refused([&](auto& p) { std::memcpy(&p[values + 4], &minus, 4); }), Contains("chunk 1: scale"));
      CHECK_THAT(refused([&](auto& p) { std::memcpy(&p[values], &nan, 4); }), Contains("scale nan"));
      // 10 signs per chunk: bits 2..7 of each chunk's second byte are unused.
      CHECK_THAT(refused([&](auto& p) { p[signs + 1] |= 0x80; }), Contains("unused sign bits"));
    } else {
      CHECK_THAT(refused([&](auto& p) { std::memcpy(&p[values + 4 * 12], &nan, 4); }),
                 Contains("chunk 1: coefficient 2 is nan"));
    }
    if (codec.payload_bytes() > signs + (sign ? 6 : 0))
      CHECK_THAT(refused([&](auto& p) { p[p.size() - 1] = 1; }), Contains("padding"));
    // The good payloads decode.
    std::vector<uint8_t> two(good);
    two.insert(two.end(), good.begin(), good.end());
    std::vector<float> out(647);
    CHECK_NOTHROW(codec.decode(ctx, two.data(), 2, out.data()));
  }
}
