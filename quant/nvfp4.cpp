// nvfp4: NVIDIA's NVFP4 with its two-level scaling: one fp32 tensor scale t = max|v| / (6 * 448), and
// per block of 16 values an FP8 E4M3 scale, the block's max|v| / 6 / (max|v| / (6 * 448)) rounded
// exactly to E4M3 (quant/minifloat.h, nvfp4_block_scale_code); each value is
// the FP4 E2M1 code of v / (E4M3 scale * t), rounded to nearest even (or stochastically) and saturated
// at 6 (quant/minifloat.h). The division is a multiply by the reciprocal of the block's decode scale
// (0 when that scale is below FLT_MIN: the block encodes as zeros). Two passes: max|v|, then a chunk
// of 64 blocks at a time (maxima, scales, codes) in L1.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "framework/core/philox_batch.h"
#include "quant/cpu_memory.h"
#include "quant/method.h"
#include "quant/minifloat.h"
#include "quant/minifloat_bound.h"
#include "quant/numerics.h"
#include "quant/nvfp4_cuda.h"
#include "quant/nvfp4_wire.h"
#include "quant/wire.h"

namespace qtrain::quant_detail {
namespace {

constexpr int64_t kBlock = wire::kNvfp4Block;

// The E2M1 codes of one block under the reciprocal decode scale inv, packed into out (ceil(len / 2)
// bytes in quant/minifloat.h's pack_block order); the residual keeps v - value(code) * d.
template <bool Ef, bool Sr, int64_t Len>
void block_codes(const float* __restrict g, float* __restrict e, int64_t len, float d, float inv,
                 const uint32_t* __restrict words, uint8_t* __restrict out) {
  const int64_t count = Len ? Len : len;
  // Codes staged as 32-bit words, so that the rounding loop has only 32-bit types (full-width
  // vectors), then packed from them in pack_block's order (byte j = code j | code j + h << 4).
  alignas(64) uint32_t wide[kBlock] = {};  // codes past the end stay zero
  for (int64_t i = 0; i < count; ++i) {
    const float v = Ef ? g[i] + e[i] : g[i];
    const uint32_t code = minifloat_code<FloatE2M1, Sr>(v, inv, Sr ? words[i] : 0u);
    wide[i] = code;
    if (Ef) e[i] = v - minifloat_value<FloatE2M1>(code) * d;
  }
  const int64_t h = (count + 1) / 2;
  for (int64_t j = 0; j < h; ++j) out[j] = static_cast<uint8_t>(wide[j] | (wide[j + h] << 4));
}

// Chunks of 64 blocks in three phases: the blocks' maxima, their scales (a loop over blocks, so the
// divisions of 16 blocks run in one vector instead of one after another), their codes.
template <bool Ef, bool Sr>
void encode_all(const EncodeArgs& a, const wire::Nvfp4Layout& l, uint32_t m, float t) {
  uint8_t* scales = a.out + l.scales_offset;
  uint8_t* elements = a.out + wire::kHeaderBytes;
  constexpr int64_t kChunkBlocks = 64;
  alignas(64) uint32_t words[Sr ? kChunkBlocks * kBlock : 1];
  alignas(64) uint32_t maxes[kChunkBlocks];
  alignas(64) float d[kChunkBlocks], inv[kChunkBlocks];
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
    for (int64_t k = 0; k < full; ++k)
      maxes[k] = max_abs_bits<Ef, kBlock>(g + k * kBlock, Ef ? e + k * kBlock : nullptr, kBlock);
    if (full < nb)
      maxes[full] = max_abs_bits<Ef, 0>(g + full * kBlock, Ef ? e + full * kBlock : nullptr, l.len(b0 + full));
    for (int64_t k = 0; k < nb; ++k) {
      const uint32_t sc = nvfp4_block_scale_code(maxes[k], m);
      scales[b0 + k] = static_cast<uint8_t>(sc);
      d[k] = nvfp4_decode_scale(sc, t);
      inv[k] = inverse_scale(float_bits(d[k]), 1.0f);
    }
    uint8_t* out = elements + b0 * kBlock / 2;
    for (int64_t k = 0; k < full; ++k)
      block_codes<Ef, Sr, kBlock>(g + k * kBlock, Ef ? e + k * kBlock : nullptr, kBlock, d[k], inv[k],
                                  Sr ? words + k * kBlock : nullptr, out + k * kBlock / 2);
    if (full < nb)
      block_codes<Ef, Sr, 0>(g + full * kBlock, Ef ? e + full * kBlock : nullptr, l.len(b0 + full), d[full], inv[full],
                             Sr ? words + full * kBlock : nullptr, out + full * kBlock / 2);
  }
}

// Values [begin, end) (begin a multiple of the block) into out[0..end - begin).
template <bool Add>
void decode_range(const wire::Nvfp4Layout& l, const uint8_t* payload, float t, int64_t begin, int64_t end,
                  float* __restrict out) {
  const uint8_t* scales = payload + l.scales_offset;
  const uint8_t* elements = payload + wire::kHeaderBytes;
  for (int64_t b = begin / kBlock; b * kBlock < end; ++b) {
    const float d = nvfp4_decode_scale(scales[b], t);
    const uint8_t* in = elements + b * kBlock / 2;
    float* o = out + (b * kBlock - begin);
    const int64_t len = l.len(b);
    if (len == kBlock) {
      // Byte j holds values j and j + 8 (pack_block): two contiguous runs of 8 outputs.
      // The bytes widened first, so that the value loop has only 32-bit types (full-width vectors).
      constexpr int64_t kHalf = kBlock / 2;
      alignas(32) uint32_t wide[kHalf];
      for (int64_t j = 0; j < kHalf; ++j) wide[j] = in[j];
      for (int64_t j = 0; j < kHalf; ++j) {
        const uint32_t byte = wide[j];
        const float y0 = minifloat_value<FloatE2M1>(byte & 0xfu) * d;
        const float y1 = minifloat_value<FloatE2M1>(byte >> 4) * d;
        o[j] = Add ? o[j] + y0 : y0;
        o[j + kHalf] = Add ? o[j + kHalf] + y1 : y1;
      }
    } else {
      alignas(16) uint8_t codes[kBlock];
      unpack_block<4, kBlock>(in, len, codes);
      for (int64_t i = 0; i < len; ++i) {
        const float y = minifloat_value<FloatE2M1>(codes[i]) * d;
        o[i] = Add ? o[i] + y : y;
      }
    }
  }
}

// The largest decoded value, 6 * (448 * t), must be a float.
bool tensor_scale_in_range(float t) { return 6.0f * nvfp4_decode_scale(FloatE4M3::kMaxCode, t) <= FLT_MAX; }

class Nvfp4Quantizer final : public Quantizer {
 public:
  explicit Nvfp4Quantizer(const QuantSpec& spec)
      : Quantizer(spec), stochastic_(spec.choice("rounding") == "stochastic") {}

 protected:
  size_t max_body_bytes(int64_t n, int64_t) const override { return wire::nvfp4_layout(n).body_end; }

  WireHeader header(const wire::Nvfp4Layout& l, uint32_t t_bits) const {
    WireHeader h;
    h.method = QuantMethod::nvfp4;
    h.a = static_cast<uint32_t>(l.block);
    h.b = t_bits;
    h.n = static_cast<uint64_t>(l.n);
    h.total = wire::pad8(l.body_end);
    return h;
  }

  size_t encode_cpu(const EncodeArgs& a) const override {
    const wire::Nvfp4Layout l = wire::nvfp4_layout(a.n);
    const uint32_t m = a.residual ? max_abs_bits<true>(a.in, a.residual, a.n) : max_abs_bits<false>(a.in, nullptr, a.n);
    if (m >= kNonFinite)
      throw NonFiniteInputError(fmt::format("nvfp4 encode: the input of {} values holds NaN or Inf", a.n));
    const float t = bits_float(m) / kNvfp4TensorDivisor;
    if (!tensor_scale_in_range(t))
      throw NonFiniteInputError(
          fmt::format("nvfp4 encode: the largest |value| {:g} is too close to the float maximum to scale (its decoded "
                      "value would be beyond the float range)",
                      bits_float(m)));
    wire::write_header(a.out, header(l, float_bits(t)));
    if (a.residual) {
      if (stochastic_)
        encode_all<true, true>(a, l, m, t);
      else
        encode_all<true, false>(a, l, m, t);
    } else {
      if (stochastic_)
        encode_all<false, true>(a, l, m, t);
      else
        encode_all<false, false>(a, l, m, t);
    }
    return l.body_end;
  }

#if QTRAIN_QUANT_CUDA
  size_t encode_cuda(Context& ctx, const EncodeArgs& a) const override {
    const wire::Nvfp4Layout l = wire::nvfp4_layout(a.n);
    nvfp4_encode_cuda(ctx, a, stochastic_, l, header(l, 0));
    return l.body_end;
  }
#endif

  void decode_cpu(const WireHeader& h, std::span<const uint8_t> in, float* out, bool add) const override {
    const wire::Nvfp4Layout l = check_body(h);
    check_values(l, in.data());
    const float t = bits_float(h.b);
    decode_tiled(out, l.n, add, [&](int64_t b, int64_t e, float* dst) {
      if (add)
        decode_range<true>(l, in.data(), t, b, e, dst);
      else
        decode_range<false>(l, in.data(), t, b, e, dst);
    });
  }

#if QTRAIN_QUANT_CUDA
  void decode_cuda(Context& ctx, const WireHeader& h, std::span<const uint8_t> in, float* out,
                   bool add) const override {
    const wire::Nvfp4Layout l = check_body(h);
    nvfp4_decode_cuda(ctx, l, in.data(), out, add);
  }
#endif

  std::optional<WireHeader> shape_header(int64_t n, int64_t) const override { return header(wire::nvfp4_layout(n), 0); }
  bool header_b_from_data() const override { return true; }

 private:
  wire::Nvfp4Layout check_body(const WireHeader& h) const {
    if (h.a != static_cast<uint32_t>(wire::kNvfp4Block))
      wire::bad_payload(method(), fmt::format("block size field {} (NVFP4 blocks are {})", h.a, wire::kNvfp4Block));
    if (h.b >= kNonFinite)
      wire::bad_payload(method(), fmt::format("tensor scale field {:#x} is not a finite non-negative float", h.b));
    if (!tensor_scale_in_range(bits_float(h.b)))
      wire::bad_payload(method(), fmt::format("tensor scale {:g} makes the largest value overflow", bits_float(h.b)));
    if (h.c != 0) wire::bad_payload(method(), "reserved field c must be zero");
    const wire::Nvfp4Layout l = wire::nvfp4_layout(static_cast<int64_t>(h.n));
    if (h.total != wire::pad8(l.body_end))
      wire::bad_payload(method(),
                        fmt::format("length field {} bytes, the layout takes {}", h.total, wire::pad8(l.body_end)));
    return l;
  }

  // Block scales are unsigned E4M3 values (sign bit 0, never the NaN code 0x7f); the high nibble after
  // an odd number of elements is zero.
  void check_values(const wire::Nvfp4Layout& l, const uint8_t* payload) const {
    const uint8_t* scales = payload + l.scales_offset;
    uint32_t bad = 0;
    for (int64_t b = 0; b < l.blocks; ++b) bad |= scales[b] > FloatE4M3::kMaxCode ? 1u : 0u;
    if (bad) {
      int64_t b = 0;
      while (scales[b] <= FloatE4M3::kMaxCode) ++b;
      wire::bad_payload(method(), fmt::format("block {} has scale code {:#04x}: a block scale is a positive E4M3 "
                                              "value (sign 0, not NaN)",
                                              b, scales[b]));
    }
    if (l.n % 2 == 1 && (payload[l.scales_offset - 1] >> 4) != 0)
      wire::bad_payload(method(), "the bits after the last element must be zero");
  }

  bool stochastic_;
};

}  // namespace

const QuantMethodInfo& nvfp4_method_info() {
  static const QuantMethodInfo info = [] {
    QuantMethodInfo m;
    m.id = QuantMethod::nvfp4;
    m.name = "nvfp4";
    m.params = {{.key = "rounding", .kind = QuantParamDef::Kind::name, .choices = {"nearest", "stochastic"}}};
    // Blocks are not summable: decode in fp32, sum in fp32, re-encode the owner's stripe.
    m.algorithm = "reduce_scatter_allgather";
    // E2M1's rounding under the block's decode scale (E4M3 scale * t).
    m.within_bound = [](const QuantSpec& s, const RoundTripValue& v) {
      uint64_t n;
      float t;
      std::memcpy(&n, v.payload.data() + 8, 8);
      std::memcpy(&t, v.payload.data() + 24, 4);
      const size_t scales = wire::kHeaderBytes + wire::packed_bytes(static_cast<int64_t>(n), 4);
      const double d = nvfp4_decode_scale(v.payload[scales + v.index / wire::kNvfp4Block], t);
      return float_format_within_bound({1, 0, 6}, v.x, v.y, d, s.choice("rounding") == "stochastic");
    };
    m.variants = {"nvfp4", "nvfp4:rounding=stochastic"};
    m.make = [](const QuantSpec& spec) -> std::unique_ptr<Quantizer> { return std::make_unique<Nvfp4Quantizer>(spec); };
    return m;
  }();
  return info;
}

}  // namespace qtrain::quant_detail
