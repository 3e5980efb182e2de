// terngrad: ternary gradients (Wen et al., NeurIPS 2017). Per bucket (the whole span by default, the
// paper's per-layer scaler), the values are clipped to c * sigma (the paper's gradient clipping; c =
// `clip`, 0 = off) and s = max |clipped v|; each value becomes s * sign(v) * Bernoulli(|clip(v)| / s),
// i.e. one of {-s, 0, +s}, 2 bits, with E[decode] = clip(v). The Bernoulli draws are qsgd's two-stage
// stochastic rounding (quant/numerics.h) under the tag "TERN". The bucket's scale, clip bound and the
// code of one value are the shared functions of quant/numerics.h, so the CUDA kernels write these bytes.
#include <cfloat>
#include <cmath>
#include <cstring>

#include "framework/core/philox_batch.h"
#include "quant/cpu_memory.h"
#include "quant/det_sum.h"
#include "quant/method.h"
#include "quant/numerics.h"
#include "quant/qsgd_wire.h"
#include "quant/terngrad_cuda.h"
#include "quant/terngrad_wire.h"
#include "quant/wire.h"

namespace qtrain::quant_detail {
namespace {

template <bool Ef>
struct TernBucket {
  const float* g;
  float* e;
  int64_t len;
  int64_t first;  // index of the bucket's first value in the span (the random counter)

  float value(int64_t i) const { return Ef ? g[i] + e[i] : g[i]; }

  uint32_t max_abs() const {
    uint32_t m = 0;
    for (int64_t i = 0; i < len; ++i) {
      const uint32_t b = abs_bits(value(i));
      m = b > m ? b : m;
    }
    return m;
  }

  float scale(uint32_t max_bits, float clip) const {
    if (clip == 0.0f || max_bits < 0x00800000u) return terngrad_scale(max_bits, 0.0f, len, clip);
    const float r = terngrad_inverse_max(max_bits);
    const float mean = det_sum_of([&](int64_t i) { return value(i) * r; }, len) / static_cast<float>(len);
    const float squares = det_sum_of(
        [&](int64_t i) {
          const float x = value(i) * r - mean;
          return x * x;
        },
        len);
    return terngrad_scale(max_bits, squares, len, clip);
  }

  // Codes of the bucket into its words (16 per word), and the residuals. The stage-1 uniforms come
  // from batched Philox blocks, kChunk values (a whole number of words) at a time.
  void encode(float s, PhiloxKey key, uint32_t* words) const {
    constexpr int64_t kChunk = 1024;
    alignas(64) uint32_t rnd[4 * (kChunk / kValuesPerBlock + 1)];
    const float inv = inverse_scale(float_bits(s), 1.0f);
    const float neg_s = -s;
    for (int64_t c = 0; c < len; c += kChunk) {
      const int64_t clen = len - c < kChunk ? len - c : kChunk;
      // Blocks of the span's values [first + c, first + c + clen): the first may start mid-block.
      const int64_t block0 = (first + c) / kValuesPerBlock;
      const int64_t blocks = (first + c + clen - 1) / kValuesPerBlock - block0 + 1;
      philox_blocks(key, static_cast<uint64_t>(block0), kStage1, kTagTerngrad, blocks, rnd);
      // Little-endian words: 16-bit half h of a block is uint16 number h of its 16 bytes.
      const uint16_t* u = reinterpret_cast<const uint16_t*>(rnd) + (first + c - block0 * kValuesPerBlock);
      // Stage 1 for every value (a branch-free loop GCC vectorizes); a tie parks v in the residual.
      alignas(64) uint32_t codes[kChunk];
      uint32_t any_tie = 0;
      for (int64_t t = 0; t < clen; ++t) {
        const float v = value(c + t);
        const uint32_t code = stage1_code(v, s, inv, u[t]);
        any_tie |= code;
        codes[t] = code;
        if (Ef) e[c + t] = code & kTieMark ? v : v - stage1_value(code, s);
      }
      // Stage 2 for the ties (probability 2^-16 each): terngrad_code decides them.
      if (any_tie & kTieMark) {
        for (int64_t t = 0; t < clen; ++t) {
          if (!(codes[t] & kTieMark)) continue;
          const float v = Ef ? e[c + t] : g[c + t];
          codes[t] = terngrad_code(v, s, inv, key, static_cast<uint64_t>(first + c + t), u[t]);
          if (Ef) e[c + t] = v - (codes[t] == 0 ? 0.0f : (codes[t] == 1 ? s : neg_s));
        }
      }
      for (int64_t w = 0; 16 * w < clen; ++w) {
        uint32_t word = 0;
        const int64_t wlen = clen - 16 * w < 16 ? clen - 16 * w : 16;
        for (int64_t j = 0; j < wlen; ++j) word |= codes[16 * w + j] << (2 * j);
        words[c / 16 + w] = word;
      }
    }
  }

  // terngrad_code without its stage 2: the same code unless the stage-1 uniform ties the cut, which
  // sets kTieMark (written out so that GCC vectorizes the loop that inlines it; equal to
  // terngrad_code's arithmetic for every finite v).
  static constexpr uint32_t kTieMark = 0x80000000u;
  static uint32_t stage1_code(float v, float s, float inv, uint32_t u16) {
    // a = min(|v|, s) / s <= about 1 for finite v: qsgd_level's clamp (for NaN) never acts.
    const float absv = __builtin_fabsf(v);
    const float a = (absv < s ? absv : s) * inv;
    const auto l = static_cast<int32_t>(a);
    const auto h = static_cast<int32_t>((a - static_cast<float>(l)) * 65536.0f);
    const auto r = static_cast<int32_t>(u16);
    // Branch-free (the comparisons are random): code = nz | (nz & neg) << 1.
    const uint32_t nz = static_cast<uint32_t>(l + (r < h ? 1 : 0) != 0);
    const uint32_t neg = static_cast<uint32_t>(v < 0.0f);
    return nz | ((nz & neg) << 1) | (static_cast<uint32_t>(r == h) << 31);
  }
  // The decoded value of a stage-1 code (0, s, or -s for code 3), the tie mark ignored; branch-free.
  static float stage1_value(uint32_t code, float s) {
    return bits_float(float_bits(masked(s, (code & 1u) != 0)) ^ ((code & 2u) << 30));
  }
};

template <bool Ef>
void encode_buckets(const EncodeArgs& a, const wire::QsgdLayout& l, float clip) {
  auto* scales = reinterpret_cast<float*>(a.out + wire::kHeaderBytes);
  for (int64_t b = 0; b < l.buckets; ++b) {
    const TernBucket<Ef> bucket{a.in + b * l.bucket, Ef ? a.residual + b * l.bucket : nullptr, l.len(b), b * l.bucket};
    const uint32_t max_bits = bucket.max_abs();
    if (max_bits >= kNonFinite)
      throw NonFiniteInputError(fmt::format("terngrad encode: the input of {} values holds NaN or Inf", a.n));
    scales[b] = bucket.scale(max_bits, clip);
    bucket.encode(scales[b], a.key, reinterpret_cast<uint32_t*>(a.out + l.words_offset(b)));
  }
}

// The value of a code (0, 1 = +s, 3 = -s; decode checked that 2 does not occur), branch-free (the
// codes are random).
inline float code_value(uint32_t code, float s) {
  return bits_float(float_bits(masked(s, (code & 1u) != 0)) ^ ((code & 2u) << 30));
}

// Values [begin, end) of the span into out[0 .. end - begin), bucket by bucket; whole words of 16
// codes in a fixed-length loop.
template <bool Add>
void decode_range(const wire::QsgdLayout& l, const uint8_t* in, int64_t begin, int64_t end, float* out) {
  const auto* scales = reinterpret_cast<const float*>(in + wire::kHeaderBytes);
  for (int64_t b = begin / l.bucket; b < l.buckets && b * l.bucket < end; ++b) {
    const int64_t start = b * l.bucket;
    const int64_t lo = begin > start ? begin - start : 0;
    const int64_t hi = end < start + l.len(b) ? end - start : l.len(b);
    const auto* words = reinterpret_cast<const uint32_t*>(in + l.words_offset(b));
    const float s = scales[b];
    float* dst = out + (start + lo - begin);
    auto one = [&](int64_t o) {
      const float v = code_value(words[o / 16] >> (2 * (o % 16)) & 3u, s);
      dst[o - lo] = Add ? dst[o - lo] + v : v;
    };
    int64_t o = lo;
    for (; o < hi && o % 16 != 0; ++o) one(o);
    for (; o + 16 <= hi; o += 16) {
      const uint32_t word = words[o / 16];
      float* __restrict d = dst + (o - lo);
      for (int j = 0; j < 16; ++j) {
        const float v = code_value(word >> (2 * j) & 3u, s);
        d[j] = Add ? d[j] + v : v;
      }
    }
    for (; o < hi; ++o) one(o);
  }
}

class TerngradQuantizer final : public Quantizer {
 public:
  explicit TerngradQuantizer(const QuantSpec& spec)
      : Quantizer(spec), clip_(static_cast<float>(spec.number("clip"))), bucket_(spec.integer("bucket")) {}

 protected:
  // Bucket 0: the span is one bucket.
  int64_t bucket_for(int64_t n) const { return bucket_ > 0 ? bucket_ : (n > 0 ? n : 1); }

  size_t max_body_bytes(int64_t n, int64_t) const override { return wire::terngrad_layout(n, bucket_for(n)).body_end; }

  WireHeader header(const wire::QsgdLayout& l) const {
    WireHeader h;
    h.method = QuantMethod::terngrad;
    h.b = static_cast<uint32_t>(l.bucket);
    h.n = static_cast<uint64_t>(l.n);
    h.total = wire::pad8(l.body_end);
    return h;
  }

  size_t encode_cpu(const EncodeArgs& a) const override {
    const wire::QsgdLayout l = wire::terngrad_layout(a.n, bucket_for(a.n));
    wire::write_header(a.out, header(l));
    if (a.residual)
      encode_buckets<true>(a, l, clip_);
    else
      encode_buckets<false>(a, l, clip_);
    return l.body_end;
  }

#if QTRAIN_QUANT_CUDA
  std::optional<WireHeader> shape_header(int64_t n, int64_t) const override {
    return header(wire::terngrad_layout(n, bucket_for(n)));
  }

  size_t encode_cuda(Context& ctx, const EncodeArgs& a) const override {
    const wire::QsgdLayout l = wire::terngrad_layout(a.n, bucket_for(a.n));
    terngrad_encode_cuda(ctx, a, l, clip_, header(l));
    return l.body_end;
  }
#endif

  void decode_cpu(const WireHeader& h, std::span<const uint8_t> in, float* out, bool add) const override {
    const wire::QsgdLayout l = check_body(h);
    const auto* scales = reinterpret_cast<const float*>(in.data() + wire::kHeaderBytes);
    for (int64_t b = 0; b < l.buckets; ++b) {
      if (float_bits(scales[b]) >= kNonFinite)
        wire::bad_payload(method(), fmt::format("bucket {} has scale {}, not a finite value >= 0", b, scales[b]));
      const auto* words = reinterpret_cast<const uint32_t*>(in.data() + l.words_offset(b));
      for (int64_t w = 0; w < wire::ceil_div(l.len(b), 16); ++w)
        if (terngrad_bad_codes(words[w]))
          wire::bad_payload(method(),
                            fmt::format("bucket {} word {} holds code 2 (the codes are 0, 1 = +s, 3 = -s)", b, w));
    }
    decode_tiled(out, l.n, add, [&](int64_t b, int64_t e, float* dst) {
      if (add)
        decode_range<true>(l, in.data(), b, e, dst);
      else
        decode_range<false>(l, in.data(), b, e, dst);
    });
  }

#if QTRAIN_QUANT_CUDA
  void decode_cuda(Context& ctx, const WireHeader& h, std::span<const uint8_t> in, float* out,
                   bool add) const override {
    const wire::QsgdLayout l = check_body(h);
    terngrad_decode_cuda(ctx, l, in.data(), out, add);
  }
#endif

 private:
  wire::QsgdLayout check_body(const WireHeader& h) const {
    if (h.a != 0 || h.c != 0) wire::bad_payload(method(), "reserved fields must be zero");
    if (h.b == 0) wire::bad_payload(method(), "bucket size 0");
    const wire::QsgdLayout l = wire::terngrad_layout(static_cast<int64_t>(h.n), h.b);
    if (h.total != wire::pad8(l.body_end))
      wire::bad_payload(method(),
                        fmt::format("length field {} bytes, the layout takes {}", h.total, wire::pad8(l.body_end)));
    return l;
  }

  float clip_;
  int64_t bucket_;
};

}  // namespace

const QuantMethodInfo& terngrad_method_info() {
  static const QuantMethodInfo info = [] {
    QuantMethodInfo m;
    m.id = QuantMethod::terngrad;
    m.name = "terngrad";
    m.params = {
        {.key = "clip", .kind = QuantParamDef::Kind::real, .fallback = 2.5, .min = 0, .max = 1000},
        {.key = "bucket", .fallback = 0, .min = 0, .max = static_cast<double>(wire::kMaxValues)},
    };
    m.algorithm = "reduce_scatter_allgather";
    // Decoded to 0 or to +-s of the value's bucket with the value's sign (unbiased for clip(x): the
    // expectation s * P(level 1) lies between 0 and s on x's side).
    m.within_bound = [](const QuantSpec&, const RoundTripValue& v) {
      uint32_t bucket;
      float scale;
      std::memcpy(&bucket, v.payload.data() + 24, 4);
      std::memcpy(&scale, v.payload.data() + wire::kHeaderBytes + 4 * (v.index / bucket), 4);
      return v.y == 0 || (std::fabs(v.y) == scale && (v.y < 0) == (v.x < 0));
    };
    m.variants = {"terngrad", "terngrad:clip=0", "terngrad:bucket=100"};
    m.make = [](const QuantSpec& spec) -> std::unique_ptr<Quantizer> {
      return std::make_unique<TerngradQuantizer>(spec);
    };
    return m;
  }();
  return info;
}

}  // namespace qtrain::quant_detail
