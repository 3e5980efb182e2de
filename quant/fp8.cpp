// fp8: OCP FP8 (E4M3 or E5M2) with one fp32 scale per tensor, s = max|v| / the format's largest finite
// magnitude (448 or 57344), so the largest value maps to the format's maximum. Each value becomes one
// byte, the code of |v| * (max / max|v|) rounded to nearest even (or stochastically) and saturated
// (quant/minifloat.h), with v's sign; it decodes to the code's value * s. Two passes: max|v|, then
// one branch-free pass of integer operations on the float bits that GCC vectorizes.
#include <cfloat>
#include <cmath>
#include <cstring>

#include "framework/core/philox_batch.h"
#include "quant/cpu_memory.h"
#include "quant/fp8_cuda.h"
#include "quant/fp8_wire.h"
#include "quant/method.h"
#include "quant/minifloat.h"
#include "quant/minifloat_bound.h"
#include "quant/numerics.h"
#include "quant/wire.h"

namespace qtrain::quant_detail {
namespace {

template <typename Fn>
void with_fp8_format(Fp8Format format, Fn&& f) {
  if (format == Fp8Format::e4m3)
    f(FloatE4M3{});
  else
    f(FloatE5M2{});
}

template <class F>
float max_value() {
  return minifloat_abs_value<F>(F::kMaxCode);
}

// Codes of values [0, n) (span index first + i) into out; `words` holds n random words when Sr.
// Codes are staged as 32-bit words a tile at a time, so that the rounding loop has only 32-bit types
// (full-width vectors), then narrowed.
template <class F, bool Ef, bool Sr>
void encode_range(const float* __restrict in, float* __restrict residual, uint8_t* __restrict out, int64_t n, float inv,
                  float scale, const uint32_t* __restrict words) {
  constexpr int64_t kTile = 256;
  alignas(64) uint32_t wide[kTile];
  for (int64_t c = 0; c < n; c += kTile) {
    const int64_t len = n - c < kTile ? n - c : kTile;
    for (int64_t i = 0; i < len; ++i) {
      const float v = Ef ? in[c + i] + residual[c + i] : in[c + i];
      const uint32_t code = minifloat_code<F, Sr>(v, inv, Sr ? words[c + i] : 0u);
      wide[i] = code;
      if (Ef) residual[c + i] = v - minifloat_value<F>(code) * scale;
    }
    for (int64_t i = 0; i < len; ++i) out[c + i] = static_cast<uint8_t>(wide[i]);
  }
}

template <class F, bool Ef, bool Sr>
void encode_all(const EncodeArgs& a, float inv, float scale) {
  uint8_t* codes = a.out + wire::kHeaderBytes;
  if constexpr (!Sr) {
    encode_range<F, Ef, false>(a.in, a.residual, codes, a.n, inv, scale, nullptr);
  } else {
    // Random words a chunk at a time (kWordsPerBlock per Philox block), so they stay in L1.
    constexpr int64_t kChunk = 1024;
    alignas(64) uint32_t words[kChunk];
    for (int64_t c = 0; c < a.n; c += kChunk) {
      const int64_t len = a.n - c < kChunk ? a.n - c : kChunk;
      philox_blocks(a.key, static_cast<uint64_t>(c / kWordsPerBlock), 0, kTagFloat,
                    (len + kWordsPerBlock - 1) / kWordsPerBlock, words);
      encode_range<F, Ef, true>(a.in + c, Ef ? a.residual + c : nullptr, codes + c, len, inv, scale, words);
    }
  }
}

template <class F, bool Add>
void decode_range(const uint8_t* __restrict codes, float* __restrict out, int64_t n, float scale) {
  for (int64_t i = 0; i < n; ++i) {
    const float y = minifloat_value<F>(codes[i]) * scale;
    out[i] = Add ? out[i] + y : y;
  }
}

// Whether any code is one the encoder never writes (E4M3's NaN, E5M2's Inf and NaN).
template <class F>
bool any_invalid_code(const uint8_t* __restrict codes, int64_t n) {
  uint32_t bad = 0;
  for (int64_t i = 0; i < n; ++i) bad |= invalid_magnitude<F>(codes[i] & 0x7fu) ? 1u : 0u;
  return bad != 0;
}

class Fp8Quantizer final : public Quantizer {
 public:
  explicit Fp8Quantizer(const QuantSpec& spec)
      : Quantizer(spec),
        format_(static_cast<Fp8Format>(spec.integer("format"))),
        stochastic_(spec.choice("rounding") == "stochastic") {}

 protected:
  size_t max_body_bytes(int64_t n, int64_t) const override { return wire::fp8_body_end(n); }

  WireHeader header(int64_t n, uint32_t scale_bits) const {
    WireHeader h;
    h.method = QuantMethod::fp8;
    h.a = static_cast<uint32_t>(format_);
    h.b = scale_bits;
    h.n = static_cast<uint64_t>(n);
    h.total = wire::pad8(wire::fp8_body_end(n));
    return h;
  }

  size_t encode_cpu(const EncodeArgs& a) const override {
    const uint32_t m = a.residual ? max_abs_bits<true>(a.in, a.residual, a.n) : max_abs_bits<false>(a.in, nullptr, a.n);
    if (m >= kNonFinite)
      throw NonFiniteInputError(fmt::format("fp8 encode: the input of {} values holds NaN or Inf", a.n));
    with_fp8_format(format_, [&](auto f) {
      using F = decltype(f);
      const float scale = bits_float(m) / max_value<F>();
      check_scale_range<F>(scale, m);
      // 0 for a max below FLT_MIN: such spans encode as zeros (and stay in the residual).
      const float inv = inverse_scale(m, max_value<F>());
      wire::write_header(a.out, header(a.n, float_bits(scale)));
      if (a.residual) {
        if (stochastic_)
          encode_all<F, true, true>(a, inv, scale);
        else
          encode_all<F, true, false>(a, inv, scale);
      } else {
        if (stochastic_)
          encode_all<F, false, true>(a, inv, scale);
        else
          encode_all<F, false, false>(a, inv, scale);
      }
    });
    return wire::fp8_body_end(a.n);
  }

#if QTRAIN_QUANT_CUDA
  size_t encode_cuda(Context& ctx, const EncodeArgs& a) const override {
    fp8_encode_cuda(ctx, a, format_, stochastic_, header(a.n, 0));
    return wire::fp8_body_end(a.n);
  }
#endif

  void decode_cpu(const WireHeader& h, std::span<const uint8_t> in, float* out, bool add) const override {
    const Fp8Format format = check_body(h);
    const uint8_t* codes = in.data() + wire::kHeaderBytes;
    const float scale = bits_float(h.b);
    with_fp8_format(format, [&](auto f) {
      using F = decltype(f);
      if (any_invalid_code<F>(codes, static_cast<int64_t>(h.n)))
        wire::bad_payload(method(),
                          fmt::format("a code is {}, which the encoder never writes", invalid_codes_name(format)));
      decode_tiled(out, static_cast<int64_t>(h.n), add, [&](int64_t b, int64_t e, float* dst) {
        if (add)
          decode_range<F, true>(codes + b, dst, e - b, scale);
        else
          decode_range<F, false>(codes + b, dst, e - b, scale);
      });
    });
  }

#if QTRAIN_QUANT_CUDA
  void decode_cuda(Context& ctx, const WireHeader& h, std::span<const uint8_t> in, float* out,
                   bool add) const override {
    const Fp8Format format = check_body(h);
    fp8_decode_cuda(ctx, format, in.data(), out, static_cast<int64_t>(h.n), add);
  }
#endif

  std::optional<WireHeader> shape_header(int64_t n, int64_t) const override { return header(n, 0); }
  bool header_b_from_data() const override { return true; }

 private:
  static const char* invalid_codes_name(Fp8Format format) {
    return format == Fp8Format::e4m3 ? "E4M3's NaN (S.1111.111)" : "E5M2's Inf or NaN (exponent field 11111)";
  }

  // The largest code times the scale must be a float: it is for every max|v| but those within a few
  // ulps of FLT_MAX, which the rounding of max|v| / 448 (or 57344) can push over.
  template <class F>
  static void check_scale_range(float scale, uint32_t max_bits) {
    if (!(max_value<F>() * scale <= FLT_MAX))
      throw NonFiniteInputError(
          fmt::format("fp8 encode: the largest |value| {:g} is too close to the float maximum to scale (its decoded "
                      "value would be beyond the float range)",
                      bits_float(max_bits)));
  }

  Fp8Format check_body(const WireHeader& h) const {
    if (h.a > 1) wire::bad_payload(method(), fmt::format("format field {} (0 e4m3, 1 e5m2)", h.a));
    if (h.b >= kNonFinite)
      wire::bad_payload(method(), fmt::format("scale field {:#x} is not a finite non-negative float", h.b));
    const auto format = static_cast<Fp8Format>(h.a);
    bool in_range = true;
    with_fp8_format(format, [&](auto f) { in_range = max_value<decltype(f)>() * bits_float(h.b) <= FLT_MAX; });
    if (!in_range)
      wire::bad_payload(method(), fmt::format("scale {:g} makes the largest code's value overflow", bits_float(h.b)));
    if (h.c != 0) wire::bad_payload(method(), "reserved field c must be zero");
    const size_t expect = wire::pad8(wire::fp8_body_end(static_cast<int64_t>(h.n)));
    if (h.total != expect)
      wire::bad_payload(method(), fmt::format("length field {} bytes, {} values take {}", h.total, h.n, expect));
    return format;
  }

  Fp8Format format_;
  bool stochastic_;
};

}  // namespace

const QuantMethodInfo& fp8_method_info() {
  static const QuantMethodInfo info = [] {
    QuantMethodInfo m;
    m.id = QuantMethod::fp8;
    m.name = "fp8";
    // The choices' order is the wire value of the format field.
    m.params = {{.key = "format", .kind = QuantParamDef::Kind::name, .choices = {"e4m3", "e5m2"}},
                {.key = "rounding", .kind = QuantParamDef::Kind::name, .choices = {"nearest", "stochastic"}}};
    // Bytes are not summable: decode in fp32, sum in fp32, re-encode the owner's stripe.
    m.algorithm = "reduce_scatter_allgather";
    m.within_bound = [](const QuantSpec& s, const RoundTripValue& v) {
      const bool e4m3 = s.choice("format") == "e4m3";
      const FloatFormatBound f = e4m3 ? FloatFormatBound{3, -6, 448} : FloatFormatBound{2, -14, 57344};
      float scale;
      std::memcpy(&scale, v.payload.data() + 24, 4);
      return float_format_within_bound(f, v.x, v.y, scale, s.choice("rounding") == "stochastic");
    };
    m.variants = {"fp8", "fp8:format=e5m2", "fp8:rounding=stochastic", "fp8:format=e5m2:rounding=stochastic"};
    m.make = [](const QuantSpec& spec) -> std::unique_ptr<Quantizer> { return std::make_unique<Fp8Quantizer>(spec); };
    return m;
  }();
  return info;
}

}  // namespace qtrain::quant_detail
