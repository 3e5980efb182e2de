// Wire header reading and writing, the layouts of each method's body, and the checks every decoder
// runs on an untrusted header before it reads the body (payloads come from the network: a bad one is
// an InputError, never an out-of-bounds access).
#include "quant/wire.h"

#include <cmath>
#include <cstring>

#include "quant/method.h"

namespace qtrain::wire {
namespace {

template <typename T>
void put(uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof v);  // the format is little-endian, as every supported host and GPU
}

template <typename T>
T get(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

bool known_method(uint8_t id) {
  for (const QuantMethodInfo* m : quant_methods())
    if (static_cast<uint8_t>(m->id) == id) return true;
  return false;
}

}  // namespace

void write_header(uint8_t* out, const WireHeader& h) {
  out[0] = 'Q';
  out[1] = 'T';
  out[2] = static_cast<uint8_t>(h.method);
  out[3] = h.version;
  put<uint32_t>(out + 4, h.a);
  put<uint64_t>(out + 8, h.n);
  put<uint64_t>(out + 16, h.total);
  put<uint32_t>(out + 24, h.b);
  put<uint32_t>(out + 28, h.c);
}

WireHeader read_header(const uint8_t* p) {
  WireHeader h;
  h.method = static_cast<QuantMethod>(p[2]);
  h.version = p[3];
  h.a = get<uint32_t>(p + 4);
  h.n = get<uint64_t>(p + 8);
  h.total = get<uint64_t>(p + 16);
  h.b = get<uint32_t>(p + 24);
  h.c = get<uint32_t>(p + 28);
  return h;
}

void bad_payload(QuantMethod method, const std::string& what) {
  throw InputError(fmt::format("{} payload: {}", quant_method_name(method), what));
}

WireHeader check_header(std::span<const uint8_t> in, size_t in_size, QuantMethod expected, int64_t expected_n) {
  if (in_size < kHeaderBytes || in.size() < kHeaderBytes)
    bad_payload(expected,
                fmt::format("truncated: {} bytes, a payload has at least a {}-byte header", in_size, kHeaderBytes));
  if (in[0] != 'Q' || in[1] != 'T')
    bad_payload(expected,
                fmt::format("not a qtrain quantizer payload (magic {:#04x} {:#04x}, expected 'Q' 'T')", in[0], in[1]));
  const WireHeader h = read_header(in.data());
  if (static_cast<QuantMethod>(in[2]) != expected)
    bad_payload(expected, fmt::format("the payload is method {} ({}), this decoder is {}",
                                      known_method(in[2]) ? quant_method_name(h.method) : "unknown", in[2],
                                      quant_method_name(expected)));
  if (h.version != kVersion)
    bad_payload(expected, fmt::format("wire format version {} is not supported (this build reads version {})",
                                      h.version, kVersion));
  if (h.n != static_cast<uint64_t>(expected_n))
    bad_payload(expected, fmt::format("holds {} values, the receiver expects {}", h.n, expected_n));
  if (h.total < kHeaderBytes || h.total % kAlign != 0)
    bad_payload(expected,
                fmt::format("length field {} is not a multiple of {} of at least {}", h.total, kAlign, kHeaderBytes));
  if (h.total > in_size)
    bad_payload(expected, fmt::format("truncated: the header says {} bytes, the buffer holds {}", h.total, in_size));
  return h;
}

int64_t count_for_proportion(double proportion, int64_t n) {
  if (n == 0) return 0;
  const int64_t k = static_cast<int64_t>(std::llround(proportion * static_cast<double>(n)));
  return k < 1 ? 1 : (k > n ? n : k);
}

}  // namespace qtrain::wire
