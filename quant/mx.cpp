// mx: the OCP Microscaling formats (OCP MX v1.0, section 6.3): blocks of 32 values share one E8M0
// scale 2^X, X = floor(log2(max|v| of the block)) - emax_elem, clamped below at -127 (E8M0's smallest
// value; a finite fp32 block never needs more than 127 - emax_elem), and each value becomes the element
// code of v / 2^X (FP8 E4M3/E5M2, FP6 E3M2/E2M3 or FP4 E2M1), rounded to nearest even (or
// stochastically) and saturated to the element's largest normal (quant/minifloat.h). v / 2^X is an
// exact float multiply by 2^-X (a result in the float subnormals is far below every element's
// smallest subnormal, so its rounding cannot change a code). One pass over memory, a chunk of 32
// blocks at a time (maxima, scales, codes), so the chunk stays in L1.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "framework/core/philox_batch.h"
#include "quant/cpu_memory.h"
#include "quant/method.h"
#include "quant/minifloat.h"
#include "quant/minifloat_bound.h"
#include "quant/mx_cuda.h"
#include "quant/mx_wire.h"
#include "quant/numerics.h"
#include "quant/wire.h"

namespace qtrain::quant_detail {
namespace {

constexpr int64_t kBlock = wire::kMxBlock;

// The element codes of one block of Len values (Len = 0: `len`) under E8M0 code sc, packed into out
// (packed_bytes(len) bytes); `words`: the block's random words (Sr).
template <class F, bool Ef, bool Sr, int64_t Len>
void block_codes(const float* __restrict g, float* __restrict e, int64_t len, uint32_t sc,
                 const uint32_t* __restrict words, uint8_t* __restrict out) {
  const int64_t count = Len ? Len : len;
  const int32_t x = static_cast<int32_t>(sc) - 127;
  const float inv = bits_float(static_cast<uint32_t>(127 - x) << 23);  // 2^-X: X <= 127 - emax keeps it normal
  const float scale = pow2_float(x);
  if constexpr (code_bits<F>() == 8) {
    // Codes staged as 32-bit words, so that the rounding loop has only 32-bit types (full-width
    // vectors), then narrowed into the payload (measured faster for 8 bits only).
    alignas(64) uint32_t wide[kBlock];
    for (int64_t t = 0; t < count; ++t) {
      const float v = Ef ? g[t] + e[t] : g[t];
      const uint32_t code = minifloat_code<F, Sr>(v, inv, Sr ? words[t] : 0u);
      wide[t] = code;
      if (Ef) e[t] = v - minifloat_value<F>(code) * scale;
    }
    for (int64_t t = 0; t < count; ++t) out[t] = static_cast<uint8_t>(wide[t]);
  } else if constexpr (code_bits<F>() == 4) {
    // As for 8 bits, and packed from the 32-bit codes (pack_block's order: byte j = code j | code j + h << 4).
    alignas(64) uint32_t wide[kBlock] = {};  // codes past the end stay zero
    for (int64_t t = 0; t < count; ++t) {
      const float v = Ef ? g[t] + e[t] : g[t];
      const uint32_t code = minifloat_code<F, Sr>(v, inv, Sr ? words[t] : 0u);
      wide[t] = code;
      if (Ef) e[t] = v - minifloat_value<F>(code) * scale;
    }
    const int64_t h = (count + 1) / 2;
    for (int64_t j = 0; j < h; ++j) out[j] = static_cast<uint8_t>(wide[j] | (wide[j + h] << 4));
  } else {
    alignas(64) uint8_t codes[kBlock] = {};  // codes past the end stay zero
    for (int64_t t = 0; t < count; ++t) {
      const float v = Ef ? g[t] + e[t] : g[t];
      const uint32_t code = minifloat_code<F, Sr>(v, inv, Sr ? words[t] : 0u);
      codes[t] = static_cast<uint8_t>(code);
      if (Ef) e[t] = v - minifloat_value<F>(code) * scale;
    }
    pack_block<code_bits<F>(), kBlock>(codes, count, out);
  }
}

// Chunks of 32 blocks in three phases: the blocks' maxima, their E8M0 codes, their element codes
// (short loops with long dependency chains one after another per block ran at half the speed).
template <class F, bool Ef, bool Sr>
void encode_all(const EncodeArgs& a, const wire::MxLayout& l) {
  uint8_t* scales = a.out + l.scales_offset;
  constexpr int64_t kChunkBlocks = 32;
  alignas(64) uint32_t words[Sr ? kChunkBlocks * kBlock : 1];
  alignas(64) uint32_t maxes[kChunkBlocks];
  const bool last_partial = l.blocks > 0 && l.len(l.blocks - 1) != kBlock;
  for (int64_t b0 = 0; b0 < l.blocks; b0 += kChunkBlocks) {
    const int64_t nb = std::min(kChunkBlocks, l.blocks - b0);
    const int64_t full = b0 + nb == l.blocks && last_partial ? nb - 1 : nb;
    if (Sr) {
      const int64_t values = std::min(kChunkBlocks * kBlock, a.n - b0 * kBlock);
      philox_blocks(a.key, static_cast<uint64_t>(b0 * kBlock / kWordsPerBlock), 0, kTagFloat,
                    (values + kWordsPerBlock - 1) / kWordsPerBlock, words);
    }
    const float* g = a.in + b0 * kBlock;
    float* e = Ef ? a.residual + b0 * kBlock : nullptr;
    uint32_t top = 0;
    for (int64_t k = 0; k < full; ++k) {
      maxes[k] = max_abs_bits<Ef, kBlock>(g + k * kBlock, Ef ? e + k * kBlock : nullptr, kBlock);
      top = maxes[k] > top ? maxes[k] : top;
    }
    if (full < nb) {
      maxes[full] = max_abs_bits<Ef, 0>(g + full * kBlock, Ef ? e + full * kBlock : nullptr, l.len(b0 + full));
      top = maxes[full] > top ? maxes[full] : top;
    }
    if (top >= kNonFinite)
      throw NonFiniteInputError(fmt::format("mx encode: the input of {} values holds NaN or Inf", a.n));
    for (int64_t k = 0; k < nb; ++k) scales[b0 + k] = static_cast<uint8_t>(mx_scale_code<F>(maxes[k]));
    for (int64_t k = 0; k < full; ++k)
      block_codes<F, Ef, Sr, kBlock>(g + k * kBlock, Ef ? e + k * kBlock : nullptr, kBlock, scales[b0 + k],
                                     Sr ? words + k * kBlock : nullptr, a.out + l.elements_offset(b0 + k));
    if (full < nb)
      block_codes<F, Ef, Sr, 0>(g + full * kBlock, Ef ? e + full * kBlock : nullptr, l.len(b0 + full),
                                scales[b0 + full], Sr ? words + full * kBlock : nullptr,
                                a.out + l.elements_offset(b0 + full));
  }
}

// Values [begin, end) of the span (whole blocks but the last) into out[0..end - begin).
template <class F, bool Add>
void decode_range(const wire::MxLayout& l, const uint8_t* payload, int64_t begin, int64_t end, float* out) {
  constexpr int kBits = code_bits<F>();
  const uint8_t* scales = payload + l.scales_offset;
  alignas(64) uint8_t codes[kBlock];
  // 8-bit elements: runs of whole blocks take the element values in one long loop (which vectorizes
  // far better than 32 at a time), then each block's scale in a second pass over the L1 tile.
  constexpr int64_t kRunBlocks = 32;
  alignas(64) float values[kBits == 8 ? kRunBlocks * kBlock : 1];
  const int64_t whole_end = std::min(end, l.n / kBlock * kBlock) / kBlock;  // first block not whole or past end
  for (int64_t b = begin / kBlock; b * kBlock < end; ++b) {
    if constexpr (kBits == 8) {
      const int64_t run = std::min(kRunBlocks, whole_end - b);
      if (run > 1) {
        const uint8_t* in = payload + l.elements_offset(b);
        for (int64_t t = 0; t < run * kBlock; ++t) values[t] = minifloat_value<F>(in[t]);
        for (int64_t k = 0; k < run; ++k) {
          const float scale = pow2_float(static_cast<int32_t>(scales[b + k]) - 127);
          float* o = out + ((b + k) * kBlock - begin);
          const float* v = values + k * kBlock;
          for (int64_t t = 0; t < kBlock; ++t) {
            const float y = v[t] * scale;
            o[t] = Add ? o[t] + y : y;
          }
        }
        b += run - 1;
        continue;
      }
    }
    const int64_t len = l.len(b);
    const float scale = pow2_float(static_cast<int32_t>(scales[b]) - 127);
    const uint8_t* in = payload + l.elements_offset(b);
    float* o = out + (b * kBlock - begin);
    if (len == kBlock && kBits == 4) {
      // Byte j holds values j and j + 16 (pack_block): two contiguous runs of 16 outputs.
      // The bytes widened first, so that the value loop has only 32-bit types (full-width vectors).
      constexpr int64_t kHalf = kBlock / 2;
      alignas(64) uint32_t wide[kHalf];
      for (int64_t j = 0; j < kHalf; ++j) wide[j] = in[j];
      for (int64_t j = 0; j < kHalf; ++j) {
        const uint32_t byte = wide[j];
        const float y0 = minifloat_value<F>(byte & 0xfu) * scale;
        const float y1 = minifloat_value<F>(byte >> 4) * scale;
        o[j] = Add ? o[j] + y0 : y0;
        o[j + kHalf] = Add ? o[j + kHalf] + y1 : y1;
      }
    } else if (len == kBlock) {
      unpack_block<kBits, kBlock>(in, kBlock, codes);
      for (int64_t t = 0; t < kBlock; ++t) {
        const float y = minifloat_value<F>(codes[t]) * scale;
        o[t] = Add ? o[t] + y : y;
      }
    } else {
      unpack_block<kBits, kBlock>(in, len, codes);
      for (int64_t t = 0; t < len; ++t) {
        const float y = minifloat_value<F>(codes[t]) * scale;
        o[t] = Add ? o[t] + y : y;
      }
    }
  }
}

// Element codes the encoder never writes (E4M3's NaN, E5M2's Inf and NaN); FP6 and FP4 have none.
template <class F>
bool any_invalid_element(const uint8_t* __restrict elements, int64_t n) {
  if constexpr (code_bits<F>() != 8) {
    (void)elements, (void)n;
    return false;
  } else {
    uint32_t bad = 0;
    for (int64_t i = 0; i < n; ++i) bad |= invalid_magnitude<F>(elements[i] & 0x7fu) ? 1u : 0u;
    return bad != 0;
  }
}

class MxQuantizer final : public Quantizer {
 public:
  explicit MxQuantizer(const QuantSpec& spec)
      : Quantizer(spec),
        element_(static_cast<MxElement>(spec.integer("element"))),
        stochastic_(spec.choice("rounding") == "stochastic") {}

 protected:
  size_t max_body_bytes(int64_t n, int64_t) const override { return layout(n).body_end; }

  size_t encode_cpu(const EncodeArgs& a) const override {
    const wire::MxLayout l = layout(a.n);
    wire::write_header(a.out, header(l));
    with_mx_element(static_cast<uint32_t>(element_), [&](auto f) {
      using F = decltype(f);
      if (a.residual) {
        if (stochastic_)
          encode_all<F, true, true>(a, l);
        else
          encode_all<F, true, false>(a, l);
      } else {
        if (stochastic_)
          encode_all<F, false, true>(a, l);
        else
          encode_all<F, false, false>(a, l);
      }
    });
    return l.body_end;
  }

#if QTRAIN_QUANT_CUDA
  std::optional<WireHeader> shape_header(int64_t n, int64_t) const override { return header(layout(n)); }

  size_t encode_cuda(Context& ctx, const EncodeArgs& a) const override {
    const wire::MxLayout l = layout(a.n);
    mx_encode_cuda(ctx, a, element_, stochastic_, l, header(l));
    return l.body_end;
  }
#endif

  void decode_cpu(const WireHeader& h, std::span<const uint8_t> in, float* out, bool add) const override {
    const wire::MxLayout l = check_body(h);
    const uint8_t* payload = in.data();
    with_mx_element(h.a, [&](auto f) {
      using F = decltype(f);
      check_values<F>(l, payload);
      decode_tiled(out, l.n, add, [&](int64_t b, int64_t e, float* dst) {
        if (add)
          decode_range<F, true>(l, payload, b, e, dst);
        else
          decode_range<F, false>(l, payload, b, e, dst);
      });
    });
  }

#if QTRAIN_QUANT_CUDA
  void decode_cuda(Context& ctx, const WireHeader& h, std::span<const uint8_t> in, float* out,
                   bool add) const override {
    const wire::MxLayout l = check_body(h);
    mx_decode_cuda(ctx, static_cast<MxElement>(h.a), l, in.data(), out, add);
  }
#endif

 private:
  wire::MxLayout layout(int64_t n) const { return wire::mx_layout(n, element_bits(element_)); }

  static int element_bits(MxElement e) {
    int bits = 8;
    with_mx_element(static_cast<uint32_t>(e), [&](auto f) { bits = code_bits<decltype(f)>(); });
    return bits;
  }

  WireHeader header(const wire::MxLayout& l) const {
    WireHeader h;
    h.method = QuantMethod::mx;
    h.a = static_cast<uint32_t>(element_);
    h.b = static_cast<uint32_t>(l.block);
    h.n = static_cast<uint64_t>(l.n);
    h.total = wire::pad8(l.body_end);
    return h;
  }

  wire::MxLayout check_body(const WireHeader& h) const {
    if (h.a > 4)
      wire::bad_payload(method(), fmt::format("element field {} (0 fp8_e4m3, 1 fp8_e5m2, 2 fp6_e3m2, 3 fp6_e2m3, "
                                              "4 fp4_e2m1)",
                                              h.a));
    if (h.b != static_cast<uint32_t>(wire::kMxBlock))
      wire::bad_payload(method(), fmt::format("block size field {} (MX blocks are {})", h.b, wire::kMxBlock));
    if (h.c != 0) wire::bad_payload(method(), "reserved field c must be zero");
    const wire::MxLayout l = wire::mx_layout(static_cast<int64_t>(h.n), element_bits(static_cast<MxElement>(h.a)));
    if (h.total != wire::pad8(l.body_end))
      wire::bad_payload(method(),
                        fmt::format("length field {} bytes, the layout takes {}", h.total, wire::pad8(l.body_end)));
    return l;
  }

  // The body's scales and elements, before anything is written: no NaN scale, no scale above what a
  // finite block has (2^(127 - emax_elem): the element's largest value times it would overflow), no
  // NaN or Inf element, zero bits after the last element.
  template <class F>
  void check_values(const wire::MxLayout& l, const uint8_t* payload) const {
    constexpr uint32_t kTop = 254 - F::kEmax;
    const uint8_t* scales = payload + l.scales_offset;
    uint32_t top = 0;
    for (int64_t b = 0; b < l.blocks; ++b) top = scales[b] > top ? scales[b] : top;
    if (top > kTop) {
      int64_t b = 0;
      while (scales[b] <= kTop) ++b;
      if (scales[b] == 0xff) wire::bad_payload(method(), fmt::format("block {} has the NaN scale 0xff", b));
      wire::bad_payload(method(), fmt::format("block {} has scale 2^{}, above 2^{}, the largest a finite block "
                                              "has with this element format",
                                              b, scales[b] - 127, kTop - 127));
    }
    if (any_invalid_element<F>(payload + wire::kHeaderBytes, l.n))
      wire::bad_payload(method(), "an element is a NaN or Inf code, which the encoder never writes");
    const int64_t used_bits = l.n * l.bits % 8;
    if (used_bits != 0 && (payload[l.scales_offset - 1] >> used_bits) != 0)
      wire::bad_payload(method(), "the bits after the last element must be zero");
  }

  MxElement element_;
  bool stochastic_;
};

FloatFormatBound element_bound(const std::string& element) {
  if (element == "fp8_e4m3") return {3, -6, 448};
  if (element == "fp8_e5m2") return {2, -14, 57344};
  if (element == "fp6_e3m2") return {2, -2, 28};
  if (element == "fp6_e2m3") return {3, 0, 7.5};
  return {1, 0, 6};
}

}  // namespace

const QuantMethodInfo& mx_method_info() {
  static const QuantMethodInfo info = [] {
    QuantMethodInfo m;
    m.id = QuantMethod::mx;
    m.name = "mx";
    // The choices' order is the wire value of the element field.
    m.params = {{.key = "element",
                 .kind = QuantParamDef::Kind::name,
                 .choices = {"fp8_e4m3", "fp8_e5m2", "fp6_e3m2", "fp6_e2m3", "fp4_e2m1"}},
                {.key = "rounding", .kind = QuantParamDef::Kind::name, .choices = {"nearest", "stochastic"}}};
    // Blocks are not summable: decode in fp32, sum in fp32, re-encode the owner's stripe.
    m.algorithm = "reduce_scatter_allgather";
    // The element format's rounding under the block's scale 2^X (its E8M0 byte).
    m.within_bound = [](const QuantSpec& s, const RoundTripValue& v) {
      const int bits = s.choice("element") == "fp4_e2m1" ? 4 : (s.choice("element").rfind("fp6", 0) == 0 ? 6 : 8);
      uint64_t n;
      std::memcpy(&n, v.payload.data() + 8, 8);
      const size_t scales = wire::kHeaderBytes + wire::packed_bytes(static_cast<int64_t>(n), bits);
      const double scale = std::ldexp(1.0, static_cast<int>(v.payload[scales + v.index / wire::kMxBlock]) - 127);
      return float_format_within_bound(element_bound(s.choice("element")), v.x, v.y, scale,
                                       s.choice("rounding") == "stochastic");
    };
    m.variants = {"mx",
                  "mx:element=fp8_e5m2",
                  "mx:element=fp6_e3m2",
                  "mx:element=fp6_e2m3",
                  "mx:element=fp4_e2m1",
                  "mx:rounding=stochastic",
                  "mx:element=fp4_e2m1:rounding=stochastic",
                  "mx:element=fp6_e3m2:rounding=stochastic"};
    m.make = [](const QuantSpec& spec) -> std::unique_ptr<Quantizer> { return std::make_unique<MxQuantizer>(spec); };
    return m;
  }();
  return info;
}

}  // namespace qtrain::quant_detail
