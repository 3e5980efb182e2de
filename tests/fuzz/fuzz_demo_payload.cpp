// Fuzz target demo_payload: the payloads of sync.type demo (DeMo, train/sync/demo_wire.h) as every rank
// receives them from the others, through the checks and the CPU decode of train/sync/demo_codec.h.
//
// Input: bytes 0-1 the chunk (1 + u16 % 1024, indices of one byte up to 256 and two above), byte 2
// the top-k (1 + u8 % chunk), byte 3 bit 0 the sign variant and bits 1-2 the ranks (1 + (b >> 1) % 3),
// bytes 4-5 and 6 the sizes of two tensors (u16 % 301 and u8 % 65 values) with a gap of 3 values
// between them in the arena. The rest is used twice:
//  - as the payloads of all ranks when it has exactly their size (decode), else as one rank's payload
//    (check): either is accepted or refused with an InputError; a refused decode leaves its output
//    untouched, an accepted one writes -1, 0 or +1 to every value of the tensors and nothing to the gap;
//  - as gradients, a signed byte times 2^-4 each, repeated: their payload (encode from a zero
//    momentum) passes the checks and decodes, the gap's momentum stays zero, and a chunk whose every
//    coefficient is sent as a value leaves (almost) nothing in the momentum.
#include <cmath>
#include <cstring>
#include <vector>

#include "tests/fuzz/fuzz_support.h"
#include "train/sync/demo_codec.h"

using namespace qtrain;
using namespace qtrain::fuzz;

namespace {

Context& cpu_context() {
  static Context ctx = Context::cpu(1, 1);
  return ctx;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ByteReader in(data, size);
  demo::CodecOptions o;
  o.chunk = 1 + in.u16() % demo::kMaxChunk;
  o.topk = 1 + in.u8() % o.chunk;
  const uint8_t flags = in.u8();
  o.sign = (flags & 1) != 0;
  o.beta = 0.5f;
  const int ranks = 1 + (flags >> 1) % 3;
  const int64_t a = in.u16() % 301, b = in.u8() % 65, gap = 3, arena = a + gap + b;
  const std::vector<demo::ArenaSpan> tensors = {{0, a}, {a + gap, b}};
  demo::Codec codec(tensors, o, Device::cpu());
  const std::span<const uint8_t> rest = in.rest();
  const size_t bytes = codec.payload_bytes();

  const std::vector<float> before(static_cast<size_t>(arena), 7.0f);
  std::vector<float> out = before;
  if (rest.size() == bytes * static_cast<size_t>(ranks)) {
    const std::vector<uint8_t> payloads(rest.begin(), rest.end());  // exactly their size, for ASan
    if (accepts("decode", [&] { codec.decode(cpu_context(), payloads.data(), ranks, out.data()); })) {
      for (int64_t i = 0; i < arena; ++i) {
        const float v = out[static_cast<size_t>(i)];
        if (i >= a && i < a + gap)
          FUZZ_REQUIRE(v == 7.0f, "decode wrote {} into the gap at {}", v, i);
        else
          FUZZ_REQUIRE(v == 1.0f || v == -1.0f || v == 0.0f, "decode wrote {} at {}, not a sign", v, i);
      }
    } else {
      FUZZ_REQUIRE(std::memcmp(out.data(), before.data(), before.size() * 4) == 0, "a refused decode wrote");
    }
  } else {
    const std::vector<uint8_t> payload(rest.begin(), rest.end());
    const bool accepted = accepts("check", [&] { codec.check(payload, 0); });
    FUZZ_REQUIRE(!accepted || payload.size() == bytes, "check accepted {} bytes, a payload has {}", payload.size(),
                 bytes);
  }

  // The round trip.
  std::vector<float> g(static_cast<size_t>(arena), 0.0f), m(static_cast<size_t>(arena), 0.0f);
  for (int64_t i = 0; i < arena && !rest.empty(); ++i)
    g[static_cast<size_t>(i)] =
        std::ldexp(static_cast<float>(static_cast<int8_t>(rest[static_cast<size_t>(i) % rest.size()])), -4);
  std::vector<uint8_t> payload(bytes);
  codec.encode(cpu_context(), m.data(), g.data(), payload.data());
  FUZZ_REQUIRE(accepts("check of an encoded payload", [&] { codec.check(payload, 0); }),
               "the checks refuse a payload encode wrote (chunk {}, topk {}, sign {})", o.chunk, o.topk, o.sign);
  out = before;
  FUZZ_REQUIRE(
      accepts("decode of an encoded payload", [&] { codec.decode(cpu_context(), payload.data(), 1, out.data()); }),
      "decode refuses a payload encode wrote");
  // The gap keeps its momentum; a chunk that sends all its coefficients as values keeps none of it,
  // up to the transform's rounding (the gradients are at most 8 in magnitude).
  for (const demo::ArenaSpan& t : tensors) {
    for (int64_t i = 0; i < t.numel; ++i) {
      const int64_t chunk_length = std::min(o.chunk, t.numel - i / o.chunk * o.chunk);
      const float left = m[static_cast<size_t>(t.offset + i)];
      if (!o.sign && chunk_length <= o.topk)
        FUZZ_REQUIRE(std::abs(left) <= 1e-4f, "all {} coefficients of a chunk sent, yet {} stays at {}", chunk_length,
                     left, t.offset + i);
    }
  }
  for (int64_t i = a; i < a + gap; ++i)
    FUZZ_REQUIRE(m[static_cast<size_t>(i)] == 0.0f, "encode wrote into the gap at {}", i);
  return 0;
}
