// DeferredChecks (quant/deferred_checks.h) on CUDA (label cuda; executed by the emulator in CI): under a
// scope the quantizers write the same bytes as without one, raise nothing until settle(), and settle()
// raises what the call would have raised, of the same type, prefixed with the caller's description; a
// decode told the sender's column checks the header on the device and reports a mismatch at settle().
#include <catch2/catch.hpp>

#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "framework/core/tensor.h"
#include "quant/deferred_checks.h"
#include "quant/nvfp4_wire.h"
#include "quant/quantizer.h"
#include "tests/quant/quant_test_util.h"

using namespace qtrain;
using namespace qtrain::quant_test;
using Catch::Matchers::Contains;

namespace {

Tensor floats_on_gpu(const std::vector<float>& x) {
  Tensor h = Tensor::empty({static_cast<int64_t>(x.size())}, DType::f32);
  if (!x.empty()) std::memcpy(h.data<float>(), x.data(), x.size() * sizeof(float));
  return h.to(Device::cuda(0));
}

std::vector<uint8_t> bytes_on_host(Context& gpu, const Tensor& t) {
  gpu.synchronize();  // the quantizers ran on the context's stream, Tensor::to copies on the legacy one
  Tensor h = t.to(Device::cpu());
  return std::vector<uint8_t>(h.data<uint8_t>(), h.data<uint8_t>() + h.numel());
}

std::vector<float> floats_on_host(Context& gpu, const Tensor& t) {
  gpu.synchronize();
  Tensor h = t.to(Device::cpu());
  return std::vector<float>(h.data<float>(), h.data<float>() + h.numel());
}

struct Encoded {
  Tensor payload;
  size_t bytes;
};

Encoded encode_on(Context& gpu, const Quantizer& q, const Tensor& x, int64_t column, QuantState& state) {
  const size_t cap = q.max_encoded_bytes(x.numel(), column);
  Tensor out = Tensor::zeros({static_cast<int64_t>(cap)}, DType::u8, Device::cuda(0));
  const size_t bytes = q.encode(gpu, std::span<const float>(x.data<float>(), static_cast<size_t>(x.numel())), column,
                                state, std::span<uint8_t>(out.data<uint8_t>(), cap));
  return {out, bytes};
}

std::string describe(uint64_t tag) { return "tensor " + std::to_string(tag); }

// What settle() raised (its message), or empty when nothing failed.
std::string settle_error(DeferredChecks& checks) {
  try {
    checks.settle(describe);
  } catch (const InputError& x) {
    return x.what();
  }
  return {};
}

// The n values of an encoded payload decoded on the GPU without a scope (every check at the call).
std::vector<float> decode_at_once(Context& gpu, const Quantizer& q, const Encoded& e, int64_t n) {
  Tensor out = Tensor::zeros({n}, DType::f32, Device::cuda(0));
  q.decode(gpu, std::span<const uint8_t>(e.payload.data<uint8_t>(), e.bytes), n,
           std::span<float>(out.data<float>(), static_cast<size_t>(n)));
  return floats_on_host(gpu, out);
}

// Decodes `payload` (its first `bytes`, n values, the sender's column: n unless given) on the GPU
// under a DeferredChecks scope and settles: the error settle() raised (empty: none) and the decoded
// values.
std::pair<std::string, std::vector<float>> decode_under_scope(Context& gpu, const Quantizer& q,
                                                              const std::vector<uint8_t>& payload, size_t bytes,
                                                              int64_t n, int64_t column = 0) {
  Tensor p = Tensor::empty({static_cast<int64_t>(payload.size())}, DType::u8);
  std::memcpy(p.data<uint8_t>(), payload.data(), payload.size());
  Tensor gp = p.to(Device::cuda(0));
  Tensor out = Tensor::zeros({n}, DType::f32, Device::cuda(0));
  DeferredChecks checks(gpu);
  {
    const DeferredChecks::Scope scope(checks);
    q.decode(gpu, std::span<const uint8_t>(gp.data<uint8_t>(), bytes), n,
             std::span<float>(out.data<float>(), static_cast<size_t>(n)), column > 0 ? column : n);
  }
  return {settle_error(checks), floats_on_host(gpu, out)};
}

// One payload of q encoded on the GPU (n values, column n), its bytes on the host (`good`), and
// decode_deferred(): the payload, or a changed copy of it, decoded under a scope. Made, it has checked
// that `good` decodes under the scope without an error to what a decode at once gives (`values`).
struct DeferredCase {
  DeferredCase(Context& gpu_, const Quantizer& q_, const Tensor& gx, int64_t n_) : gpu(gpu_), q(q_), n(n_) {
    QuantState state(1, 0, 1);
    e = encode_on(gpu, q, gx, n, state);
    good = bytes_on_host(gpu, e.payload);
    auto [none, decoded] = decode_deferred(good);
    REQUIRE(none.empty());
    REQUIRE(decoded == decode_at_once(gpu, q, e, n));
    values = std::move(decoded);
  }
  std::pair<std::string, std::vector<float>> decode_deferred(const std::vector<uint8_t>& payload) const {
    return decode_under_scope(gpu, q, payload, e.bytes, n);
  }

  Context& gpu;
  const Quantizer& q;
  int64_t n;
  Encoded e{};
  std::vector<uint8_t> good;
  std::vector<float> values;
};

}  // namespace

TEST_CASE("deferred checks: the same bytes and values as checking at once, for every method", "[quant][cuda]") {
  Context gpu = Context::cuda(0, 1);
  const int64_t n = 3000, column = 30;
  const auto x = normal_data(n, 5);
  Tensor gx = floats_on_gpu(x);
  for (const QuantSpec& s : all_specs()) {
    CAPTURE(s.str());
    auto q = make_quantizer(s);
    QuantState now_state(3, 1, 2), later_state(3, 1, 2);
    const Encoded now = encode_on(gpu, *q, gx, column, now_state);
    Tensor now_out = Tensor::zeros({n}, DType::f32, Device::cuda(0));
    q->decode(gpu, std::span<const uint8_t>(now.payload.data<uint8_t>(), now.bytes), n,
              std::span<float>(now_out.data<float>(), static_cast<size_t>(n)));

    DeferredChecks checks(gpu);
    Encoded later{};
    Tensor later_out = Tensor::zeros({n}, DType::f32, Device::cuda(0));
    {
      const DeferredChecks::Scope scope(checks);
      later = encode_on(gpu, *q, gx, column, later_state);
      q->decode(gpu, std::span<const uint8_t>(later.payload.data<uint8_t>(), later.bytes), n,
                std::span<float>(later_out.data<float>(), static_cast<size_t>(n)), column);
    }
    // Something was deferred: an encoder's status, a decoder's, or (the casts) the header check.
    REQUIRE(checks.pending() > 0);
    checks.settle(describe);
    REQUIRE(later.bytes == now.bytes);
    REQUIRE(bytes_on_host(gpu, later.payload) == bytes_on_host(gpu, now.payload));
    REQUIRE(floats_on_host(gpu, later_out) == floats_on_host(gpu, now_out));
  }
}

TEST_CASE("deferred checks: a NaN is raised at settle, typed and named", "[quant][cuda]") {
  Context gpu = Context::cuda(0, 1);
  const int64_t n = 1000;
  auto x = normal_data(n, 7);
  x[517] = std::numeric_limits<float>::quiet_NaN();
  Tensor gx = floats_on_gpu(x);
  auto q = make_quantizer(QuantSpec::defaults(QuantMethod::qsgd));
  QuantState state(1, 0, 1);
  DeferredChecks checks(gpu);
  {
    const DeferredChecks::Scope scope(checks);
    checks.set_tag(42);
    REQUIRE_NOTHROW(encode_on(gpu, *q, gx, n, state));
    REQUIRE(checks.pending() == 1);
  }
  REQUIRE_THROWS_MATCHES(checks.settle(describe), NonFiniteInputError,
                         Catch::Matchers::Message("tensor 42: qsgd encode: the input of 1000 values holds NaN or Inf"));
  // Settled: nothing is pending, and the next settle raises nothing.
  REQUIRE(checks.pending() == 0);
  REQUIRE_NOTHROW(checks.settle(describe));
}

TEST_CASE("deferred checks: a header that differs from the receiver's is reported at settle", "[quant][cuda]") {
  Context gpu = Context::cuda(0, 1);
  const int64_t n = 2048;
  Tensor gx = floats_on_gpu(normal_data(n, 3));
  auto sender = make_quantizer(QuantSpec::defaults(QuantMethod::qsgd).set("bits", 8));
  auto receiver = make_quantizer(QuantSpec::defaults(QuantMethod::qsgd).set("bits", 4));
  QuantState state(1, 0, 1);
  const Encoded e = encode_on(gpu, *sender, gx, n, state);
  Tensor out = Tensor::zeros({n}, DType::f32, Device::cuda(0));
  DeferredChecks checks(gpu);
  {
    const DeferredChecks::Scope scope(checks);
    checks.set_tag(7);
    // The 8-bit payload is longer than the 4-bit one the receiver predicts: its header still differs.
    receiver->decode(gpu, std::span<const uint8_t>(e.payload.data<uint8_t>(), e.bytes), n,
                     std::span<float>(out.data<float>(), static_cast<size_t>(n)), n);
  }
  REQUIRE_THAT(settle_error(checks), Catch::Matchers::StartsWith("tensor 7: qsgd payload: the header differs"));
  // A payload shorter than the predicted one is refused on the host, at the call.
  {
    const DeferredChecks::Scope scope(checks);
    REQUIRE_THROWS_WITH(sender->decode(gpu, std::span<const uint8_t>(e.payload.data<uint8_t>(), 40), n,
                                       std::span<float>(out.data<float>(), static_cast<size_t>(n)), n),
                        Contains("truncated"));
  }
}

TEST_CASE("deferred checks: more calls than slots settle early and grow the area", "[quant][cuda]") {
  Context gpu = Context::cuda(0, 1);
  const int64_t n = 64;
  Tensor gx = floats_on_gpu(normal_data(n, 1));
  auto q = make_quantizer(QuantSpec::defaults(QuantMethod::onebit));
  QuantState state(1, 0, 1);
  DeferredChecks checks(gpu);
  const DeferredChecks::Scope scope(checks);
  for (int i = 0; i < 1300; ++i) encode_on(gpu, *q, gx, n, state);  // past 512 and 1024 slots
  REQUIRE(checks.pending() == 1300 - 512);  // the 513th call settled the first 512 and doubled the area
  checks.settle(describe);
  REQUIRE(checks.pending() == 0);
}

TEST_CASE("deferred checks: fp8's and nvfp4's scales are read and checked on the device", "[quant][cuda]") {
  Context gpu = Context::cuda(0, 1);
  const int64_t n = 1024;
  Tensor gx = floats_on_gpu(normal_data(n, 11));
  const uint32_t bad_scales[] = {0x7fc00000u /* NaN */, 0x7f800000u /* Inf */, 0xbf800000u /* -1 */,
                                 0x7f000000u /* the largest code's value overflows */};
  for (const QuantMethod method : {QuantMethod::fp8, QuantMethod::nvfp4}) {
    CAPTURE(quant_method_name(method));
    auto q = make_quantizer(QuantSpec::defaults(method));
    REQUIRE(q->header_b_from_data());
    // The scale the encoder computed (not the 0 of the predicted header) decodes the values.
    const DeferredCase c(gpu, *q, gx, n);
    const std::vector<uint8_t>& good = c.good;
    const auto decode_deferred = [&](const std::vector<uint8_t>& payload) { return c.decode_deferred(payload); };
    for (const uint32_t bits : bad_scales) {
      CAPTURE(bits);
      std::vector<uint8_t> bad = good;
      std::memcpy(bad.data() + 24, &bits, 4);
      REQUIRE_THAT(decode_deferred(bad).first, Contains("scale is not a finite float >= 0"));
    }
    // The body's checks are the decoders' own under a scope: an E4M3 NaN code, an NVFP4 block scale
    // with its sign set.
    std::vector<uint8_t> bad_body = good;
    if (method == QuantMethod::fp8)
      bad_body[wire::kHeaderBytes + 517] = 0x7f;
    else
      bad_body[wire::nvfp4_layout(n).scales_offset + 9] = 0xb8;
    REQUIRE_THAT(decode_deferred(bad_body).first,
                 Contains(method == QuantMethod::fp8 ? "E4M3's NaN" : "a block scale is not a positive E4M3"));
    // The other fields are still compared: a different length field is the header check's error.
    std::vector<uint8_t> other = good;
    other[8] ^= 1;  // n
    REQUIRE_THAT(decode_deferred(other).first, Contains("the header differs"));
  }
}

// dettmers8 and efsign read their scale (header field b) on the device, onebit's decoders check each
// group's means as they decode under a scope: the same values as a decode that checks at once, and a
// bad field reported at settle.
TEST_CASE("deferred checks: dettmers8's and efsign's scales and onebit's means are checked in the decoders",
          "[quant][cuda]") {
  Context gpu = Context::cuda(0, 1);
  const int64_t n = 1024;
  Tensor gx = floats_on_gpu(normal_data(n, 12));
  for (const QuantMethod method : {QuantMethod::dettmers8, QuantMethod::efsign, QuantMethod::onebit}) {
    CAPTURE(quant_method_name(method));
    auto q = make_quantizer(QuantSpec::defaults(method));
    const DeferredCase c(gpu, *q, gx, n);
    const std::vector<uint8_t>& good = c.good;
    const auto decode_deferred = [&](const std::vector<uint8_t>& payload) { return c.decode_deferred(payload); };
    std::vector<uint8_t> bad = good;
    const uint32_t nan = 0x7fc00000u;
    if (method != QuantMethod::onebit) {
      REQUIRE(q->header_b_from_data());
      for (const uint32_t bits : {nan, 0x7f800000u /* Inf */, 0xbf800000u /* -1 */}) {
        CAPTURE(bits);
        std::memcpy(bad.data() + 24, &bits, 4);
        REQUIRE_THAT(decode_deferred(bad).first, Contains("the scale is not a finite float >= 0"));
      }
    } else {
      // The first group's first mean (the body: per group two means, then its sign words).
      std::memcpy(bad.data() + wire::kHeaderBytes, &nan, 4);
      REQUIRE_THAT(decode_deferred(bad).first, Contains("a group has a non-finite mean"));
    }
    std::vector<uint8_t> other = good;
    other[8] ^= 1;  // n: the header check's error
    REQUIRE_THAT(decode_deferred(other).first, Contains("the header differs"));
  }
}

// randomk's decoder reads the key (header fields b and c, the data's) on the device: a receiver that
// predicts the rest of the header reads nothing back, decodes the values of the key the payload
// holds, and its other fields are still compared.
TEST_CASE("deferred checks: randomk's key is read on the device", "[quant][cuda]") {
  Context gpu = Context::cuda(0, 1);
  const int64_t n = 1000;
  Tensor gx = floats_on_gpu(normal_data(n, 13));
  auto q = make_quantizer(QuantSpec::defaults(QuantMethod::randomk).set("fraction", 0.1));
  REQUIRE(q->header_b_from_data());
  REQUIRE(q->header_c_from_data());
  const DeferredCase c(gpu, *q, gx, n);
  const std::vector<uint8_t>& good = c.good;
  const std::vector<float>& values = c.values;
  const auto decode_deferred = [&](const std::vector<uint8_t>& payload) { return c.decode_deferred(payload); };
  // Another key (its high word) is another valid payload: other positions, no error.
  std::vector<uint8_t> other_key = good;
  other_key[28] ^= 1;
  const auto [still_none, moved] = decode_deferred(other_key);
  REQUIRE(still_none.empty());
  REQUIRE(moved != values);
  std::vector<uint8_t> other = good;
  other[4] ^= 1;  // a: k
  REQUIRE_THAT(decode_deferred(other).first, Contains("the header differs"));
}

// adaptive's size is its count. Encoded into a slot (Quantizer::encode_slot) the count stays in the
// header on the device; a receiver given the sender's column decodes the whole slot, reading the count
// there and checking it (with the length field and the body's count) at settle.
TEST_CASE("deferred checks: adaptive's count stays on the device in a slot", "[quant][cuda]") {
  Context gpu = Context::cuda(0, 1);
  const int64_t n = 3000, column = 30;
  Tensor gx = floats_on_gpu(normal_data(n, 17));
  for (const QuantSpec& s :
       {QuantSpec::defaults(QuantMethod::adaptive), QuantSpec::defaults(QuantMethod::adaptive).set("sample", 256)}) {
    CAPTURE(s.str());
    auto q = make_quantizer(s);
    REQUIRE(!q->fixed_size());
    REQUIRE(q->header_c_from_data());
    const size_t slot = q->max_encoded_bytes(n, column);
    QuantState now_state(3, 1, 2), slot_state(3, 1, 2);
    const Encoded now = encode_on(gpu, *q, gx, column, now_state);
    REQUIRE(now.bytes < slot);  // a proportion of 1/32 sends fewer entries than the cap of 4/32
    Tensor in_slot = Tensor::zeros({static_cast<int64_t>(slot)}, DType::u8, Device::cuda(0));
    DeferredChecks checks(gpu);
    {
      const DeferredChecks::Scope scope(checks);
      REQUIRE(q->encode_slot(gpu, std::span<const float>(gx.data<float>(), static_cast<size_t>(n)), column, slot_state,
                             std::span<uint8_t>(in_slot.data<uint8_t>(), slot)) == slot);
    }
    REQUIRE(settle_error(checks).empty());
    // The same payload (its own length, the header's), and the same residual.
    const std::vector<uint8_t> whole = bytes_on_host(gpu, in_slot);
    const auto payload_end = static_cast<std::ptrdiff_t>(now.bytes);
    const std::vector<uint8_t> expected = bytes_on_host(gpu, now.payload);
    REQUIRE(std::vector<uint8_t>(whole.begin(), whole.begin() + payload_end) ==
            std::vector<uint8_t>(expected.begin(), expected.begin() + payload_end));
    REQUIRE(floats_on_host(gpu, slot_state.residual()) == floats_on_host(gpu, now_state.residual()));

    // The whole slot decodes to what the payload decodes to.
    const auto decode_slot_columns = [&](const std::vector<uint8_t>& bytes) {
      return decode_under_scope(gpu, *q, bytes, bytes.size(), n, column);
    };
    const auto [none, values] = decode_slot_columns(whole);
    REQUIRE(none.empty());
    REQUIRE(values == decode_at_once(gpu, *q, now, n));

    uint32_t count = 0;
    std::memcpy(&count, whole.data() + 28, 4);
    const char* count_error = "the entry count or length field";
    // A count beyond the slot's entries, a count that differs from the body's, a length field that
    // differs from the count's: each reported at settle.
    std::vector<uint8_t> bad = whole;
    const uint32_t beyond = static_cast<uint32_t>(slot);
    std::memcpy(bad.data() + 28, &beyond, 4);
    REQUIRE_THAT(decode_slot_columns(bad).first, Contains(count_error));
    bad = whole;
    const uint32_t fewer = count - 1;
    std::memcpy(bad.data() + 28, &fewer, 4);
    REQUIRE_THAT(decode_slot_columns(bad).first, Contains(count_error));
    bad = whole;
    bad[16] ^= 8;  // the length field
    REQUIRE_THAT(decode_slot_columns(bad).first, Contains(count_error));
    // A slot too short for the count the header states.
    const std::vector<uint8_t> short_slot(whole.begin(), whole.begin() + payload_end - 8);
    REQUIRE_THAT(decode_slot_columns(short_slot).first, Contains(count_error));
    // An entry's row beyond its column: reported, and nothing written outside the output.
    bad = whole;
    const size_t entries_offset = wire::kHeaderBytes + 12 * static_cast<size_t>(n / column) + 4;
    const uint16_t far_row = static_cast<uint16_t>((column + 5) << 1);
    std::memcpy(bad.data() + entries_offset, &far_row, 2);
    REQUIRE_THAT(decode_slot_columns(bad).first, Contains(count_error));
    // The other fields are compared: n.
    bad = whole;
    bad[8] ^= 1;
    REQUIRE_THAT(decode_slot_columns(bad).first, Contains("the header differs"));
  }
}
