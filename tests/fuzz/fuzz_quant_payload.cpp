// Fuzz target quant_payload: the payload decoders of every payload quantization method and the
// encode -> decode round trip. The methods come from the registry (payload_method_variants(): every
// variant the descriptors list, less the methods without a payload such as powersgd), so a method
// added to quant/methods.def is fuzzed without a change here.
//
// Input: byte 0 picks the variant; bytes 1-2 the rows (0..255) and byte 3 the column length
// (1..32) of a span of n = rows * column values; byte 4 the step (the random key of stochastic
// methods); byte 5, bit 0, error feedback (where the method allows it). The rest is used twice:
//  - as a payload for n values: decode and decode_add either decode it or reject it with an
//    InputError that leaves their output untouched; decode_add adds exactly what decode writes;
//  - as the values of a round trip, 3 bytes each (a signed 16-bit significand and a power of two in
//    2^-40..2^-1, so magnitudes up to 2^14, within every method's range, fp16's included), repeated
//    to fill n: encode fits max_encoded_bytes, its payload decodes, and every value meets the
//    descriptor's within_bound; with error feedback the residual is the value minus its decoded
//    value, and a second encode of the same span (value plus residual) meets the bound too.
#include <cmath>
#include <cstring>
#include <vector>

#include "quant/method.h"
#include "quant/policy.h"
#include "quant/quantizer.h"
#include "tests/fuzz/fuzz_support.h"

using namespace qtrain;
using namespace qtrain::fuzz;

namespace {

const std::vector<QuantSpec>& variants() {
  static const std::vector<QuantSpec> specs = payload_method_variants();
  return specs;
}

Context& cpu_context() {
  static Context ctx = Context::cpu(1, 1);
  return ctx;
}

bool same_float(float a, float b) { return a == b || (std::isnan(a) && std::isnan(b)); }

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// decode and decode_add of `payload` (copied into a buffer of exactly its size, so that a read past
// it is an AddressSanitizer report) into spans of exactly n values.
void fuzz_decoders(const Quantizer& q, std::span<const uint8_t> payload_bytes, int64_t n) {
  const std::string name = q.spec().str();
  const std::vector<uint8_t> payload(payload_bytes.begin(), payload_bytes.end());
  const auto count = static_cast<size_t>(n);
  std::vector<float> out(count), before(count), acc(count);
  for (size_t i = 0; i < count; ++i) {
    before[i] = static_cast<float>(i % 7) - 3.5f;  // what a rejected payload must leave in place
    acc[i] = static_cast<float>(i % 5) * 0.25f;
  }
  out = before;
  const std::vector<float> acc_before = acc;
  const bool decoded = accepts("decode", [&] { q.decode(cpu_context(), payload, n, out); });
  const bool added = accepts("decode_add", [&] { q.decode_add(cpu_context(), payload, n, acc); });
  FUZZ_REQUIRE(decoded == added, "{}: decode {} the payload but decode_add {} it", name,
               decoded ? "accepted" : "rejected", added ? "accepted" : "rejected");
  if (!decoded) {
    FUZZ_REQUIRE(same_bits(out, before), "{}: a rejected payload changed decode's output", name);
    FUZZ_REQUIRE(same_bits(acc, acc_before), "{}: a rejected payload changed decode_add's accumulator", name);
    return;
  }
  for (size_t i = 0; i < count; ++i)
    FUZZ_REQUIRE(same_float(acc[i], acc_before[i] + out[i]),
                 "{}: value {} of n = {}: decode_add turns {} into {}, but decode gives {}", name, i, n, acc_before[i],
                 acc[i], out[i]);
}

// Values from 3 bytes each (see the header comment), repeated to fill n; zeros without any.
std::vector<float> round_trip_values(std::span<const uint8_t> bytes, int64_t n) {
  std::vector<float> base;
  for (size_t i = 0; i + 3 <= bytes.size(); i += 3) {
    int16_t significand;
    std::memcpy(&significand, bytes.data() + i, 2);
    base.push_back(std::ldexp(static_cast<float>(significand), static_cast<int>(bytes[i + 2] % 40) - 40));
  }
  std::vector<float> x(static_cast<size_t>(n), 0.0f);
  for (size_t i = 0; i < x.size() && !base.empty(); ++i) x[i] = base[i % base.size()];
  return x;
}

void fuzz_round_trip(const Quantizer& q, const std::vector<float>& x, int64_t column) {
  const std::string name = q.spec().str();
  const QuantMethodInfo& info = method_info(q.method());
  const auto n = static_cast<int64_t>(x.size());
  QuantState state(7, 0, 3);
  q.init_state(state, n, Device::cpu());
  std::vector<float> v = x;  // what encode quantizes: x plus the residual
  for (int round = 0; round < (q.error_feedback() ? 2 : 1); ++round) {
    if (q.error_feedback()) {
      const float* e = state.residual().data<float>();
      for (size_t i = 0; i < v.size(); ++i) v[i] = x[i] + e[i];
    }
    std::vector<uint8_t> payload(q.max_encoded_bytes(n, column));
    size_t bytes = 0;
    if (!accepts("encode", [&] { bytes = q.encode(cpu_context(), x, column, state, payload); }))
      finding(
          fmt::format("{}: encode refused finite values of magnitude below 2^14 (n = {}, column {})", name, n, column));
    FUZZ_REQUIRE(bytes <= payload.size() && bytes % 8 == 0, "{}: encode wrote {} bytes, max_encoded_bytes is {}", name,
                 bytes, payload.size());
    payload.resize(bytes);
    std::vector<float> y(x.size());
    if (!accepts("decode", [&] { q.decode(cpu_context(), payload, n, y); }))
      finding(fmt::format("{}: decode refused a payload encode wrote (n = {}, column {})", name, n, column));
    double max_abs = 0;
    for (float value : v) max_abs = std::max(max_abs, std::fabs(static_cast<double>(value)));
    for (size_t i = 0; i < x.size(); ++i) {
      const RoundTripValue rt{.x = v[i], .y = y[i], .max_abs = max_abs, .index = i, .payload = payload};
      FUZZ_REQUIRE(info.within_bound(q.spec(), rt), "{}: value {} of n = {} (column {}): {} decodes to {} (max |x| {})",
                   name, i, n, column, v[i], y[i], max_abs);
      if (q.error_feedback()) {
        const float e = state.residual().data<float>()[i];
        FUZZ_REQUIRE(same_float(e, v[i] - y[i]), "{}: value {}: residual {}, but value {} - decoded {} = {}", name, i,
                     e, v[i], y[i], v[i] - y[i]);
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ByteReader in(data, size);
  QuantSpec spec = variants()[in.u8() % variants().size()];
  const int64_t rows = in.u16() % 256;
  const int64_t column = 1 + in.u8() % 32;
  const int64_t n = rows * column;
  cpu_context().set_step(in.u8());
  const bool error_feedback = (in.u8() & 1) != 0;
  if (method_info(spec.method).error_feedback_allowed) spec.error_feedback = error_feedback;
  std::unique_ptr<Quantizer> q;
  if (!accepts("make_quantizer", [&] { q = make_quantizer(spec); }))
    finding("the registry's variant " + spec.str() + " does not make a quantizer");
  fuzz_decoders(*q, in.rest(), n);
  fuzz_round_trip(*q, round_trip_values(in.rest(), n), column);
  return 0;
}
