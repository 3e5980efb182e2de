// dettmers8: 8-bit approximation (Dettmers 2016), variants dynamic_tree (clusterNet's table) and
// linear (7-bit magnitude), one scale M = max|v| per span in the header. Byte: bit 7 sign, bits 0..6
// an index; dynamic_tree: 0..125 table entry, 126 zero, 127 saturation (+-M); linear: level q, value
// q * M / 127. Encoding is two passes: max|v|, then one branch-free pass (one table read per value;
// the dynamic_tree pass has an AVX2 version, quant/cpu_loops.h). dynamic_tree with `search:
// clusternet` takes clusterNet's bisection instead of the nearest entry (quant/dettmers8_codes.h).
#include <cfloat>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "quant/cpu_loops.h"
#include "quant/cpu_memory.h"
#include "quant/dettmers8_codes.h"
#include "quant/dettmers8_cuda.h"
#include "quant/dettmers8_wire.h"
#include "quant/dettmers_table.h"
#include "quant/method.h"
#include "quant/numerics.h"
#include "quant/wire.h"

namespace qtrain::quant_detail {
namespace {

// The 256 decoded values for scale M (the same arithmetic as the CUDA decode: one float multiply).
void decode_table(Dettmers8Variant variant, float m, float* d) {
  const DettmersTables& t = dettmers_tables();
  if (variant == Dettmers8Variant::dynamic_tree) {
    for (int i = 0; i < DettmersTables::kEntries; ++i) d[i] = t.value[i] * m;
    d[DettmersTables::kZeroCode] = 0.0f;
    d[DettmersTables::kSatCode] = m;
  } else {
    const float step = m / 127.0f;
    for (int i = 0; i < 128; ++i) d[i] = static_cast<float>(i) * step;
  }
  for (int i = 0; i < 128; ++i) d[i + 128] = -d[i];
}

template <bool Ef>
void encode_tree(const float* __restrict in, float* __restrict residual, uint8_t* __restrict out, int64_t n, float r,
                 const float* __restrict d) {
  const DettmersTables& t = dettmers_tables();
  const uint32_t* __restrict lut = t.lut;
  const uint32_t first = t.lut_first, last = static_cast<uint32_t>(t.lut_size - 1);
  const uint32_t zero_bits = t.zero_bits, sat_bits = t.sat_bits;
  for (int64_t i = 0; i < n; ++i) {
    const float v = Ef ? in[i] + residual[i] : in[i];
    const uint32_t a = float_bits(__builtin_fabsf(v) * r);
    // Values below the first bucket wrap to a large index and clamp to the last bucket; they are
    // below the zero threshold and get the zero code anyway.
    uint32_t b = (a >> DettmersTables::kLutShift) - first;
    b = b > last ? last : b;
    const uint32_t entry = lut[b];
    int32_t idx = static_cast<int32_t>(entry >> DettmersTables::kLutShift);
    idx += static_cast<int32_t>((a & DettmersTables::kLowMask) > (entry & DettmersTables::kLowMask));
    idx = a < zero_bits ? DettmersTables::kZeroCode : idx;
    idx = a > sat_bits ? DettmersTables::kSatCode : idx;
    const uint32_t code = static_cast<uint32_t>(idx) | ((float_bits(v) >> 31) << 7);
    out[i] = static_cast<uint8_t>(code);
    if (Ef) residual[i] = v - d[code];
  }
}

#if defined(__AVX2__)
// encode_tree, eight values per vector: the same integer operations on the float bits (every compared
// quantity is below 2^31, so the signed vector compares order them as the unsigned scalar ones do) and
// 32 codes narrowed to bytes per store. The table reads are eight scalar loads through a stack copy of
// the indices: on Zen 3 that is about 12% faster than vpgatherdd for the whole loop (measured).
template <bool Ef>
void encode_tree_avx2(const float* __restrict in, float* __restrict residual, uint8_t* __restrict out, int64_t n,
                      float r, const float* __restrict d) {
  const DettmersTables& t = dettmers_tables();
  const uint32_t* lut = t.lut;
  const auto* d_bits = reinterpret_cast<const uint32_t*>(d);
  auto lookup8 = [](const uint32_t* table, __m256i index) {
    alignas(32) uint32_t k[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(k), index);
    return _mm256_setr_epi32(static_cast<int>(table[k[0]]), static_cast<int>(table[k[1]]),
                             static_cast<int>(table[k[2]]), static_cast<int>(table[k[3]]),
                             static_cast<int>(table[k[4]]), static_cast<int>(table[k[5]]),
                             static_cast<int>(table[k[6]]), static_cast<int>(table[k[7]]));
  };
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(kAbsMask)));
  const __m256 rv = _mm256_set1_ps(r);
  const __m256i first = _mm256_set1_epi32(static_cast<int>(t.lut_first));
  const __m256i last = _mm256_set1_epi32(t.lut_size - 1);
  const __m256i low_mask = _mm256_set1_epi32(static_cast<int>(DettmersTables::kLowMask));
  const __m256i zero_bits = _mm256_set1_epi32(static_cast<int>(t.zero_bits));
  const __m256i sat_bits = _mm256_set1_epi32(static_cast<int>(t.sat_bits));
  const __m256i zero_code = _mm256_set1_epi32(DettmersTables::kZeroCode);
  const __m256i sat_code = _mm256_set1_epi32(DettmersTables::kSatCode);
  const __m256i sign_bit = _mm256_set1_epi32(0x80);
  auto codes8 = [&](int64_t i) {
    __m256 v = _mm256_loadu_ps(in + i);
    if (Ef) v = _mm256_add_ps(v, _mm256_loadu_ps(residual + i));
    const __m256i a = _mm256_castps_si256(_mm256_mul_ps(_mm256_and_ps(v, abs_mask), rv));
    const __m256i b = _mm256_min_epu32(_mm256_sub_epi32(_mm256_srli_epi32(a, DettmersTables::kLutShift), first), last);
    const __m256i entry = lookup8(lut, b);
    const __m256i above = _mm256_cmpgt_epi32(_mm256_and_si256(a, low_mask), _mm256_and_si256(entry, low_mask));
    __m256i idx = _mm256_sub_epi32(_mm256_srli_epi32(entry, DettmersTables::kLutShift), above);  // + 1 where above
    idx = _mm256_blendv_epi8(idx, zero_code, _mm256_cmpgt_epi32(zero_bits, a));
    idx = _mm256_blendv_epi8(idx, sat_code, _mm256_cmpgt_epi32(a, sat_bits));
    const __m256i code =
        _mm256_or_si256(idx, _mm256_and_si256(_mm256_srli_epi32(_mm256_castps_si256(v), 24), sign_bit));
    if (Ef) _mm256_storeu_ps(residual + i, _mm256_sub_ps(v, _mm256_castsi256_ps(lookup8(d_bits, code))));
    return code;
  };
  // packus narrows within 128-bit halves; the permute puts the four groups of eight back in order.
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i c0 = codes8(i), c1 = codes8(i + 8), c2 = codes8(i + 16), c3 = codes8(i + 24);
    const __m256i bytes = _mm256_packus_epi16(_mm256_packus_epi32(c0, c1), _mm256_packus_epi32(c2, c3));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm256_permutevar8x32_epi32(bytes, order));
  }
  encode_tree<Ef>(in + i, Ef ? residual + i : nullptr, out + i, n - i, r, d);
}
#endif

template <bool Ef>
void encode_linear(const float* __restrict in, float* __restrict residual, uint8_t* __restrict out, int64_t n, float m,
                   float r127, const float* __restrict d) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = Ef ? in[i] + residual[i] : in[i];
    const uint32_t code = dettmers8_linear_level(__builtin_fabsf(v), m, r127) | ((float_bits(v) >> 31) << 7);
    out[i] = static_cast<uint8_t>(code);
    if (Ef) residual[i] = v - d[code];
  }
}

// search: clusternet (quant/dettmers8_codes.h): a bisection per value, scalar; it exists to reproduce
// the paper's figures, not for speed.
template <bool Ef>
void encode_clusternet(const float* __restrict in, float* __restrict residual, uint8_t* __restrict out, int64_t n,
                       float m, const float* __restrict d) {
  const float* table = dettmers_tables().value;
  for (int64_t i = 0; i < n; ++i) {
    const float v = Ef ? in[i] + residual[i] : in[i];
    const uint32_t code = dettmers8_clusternet_index(__builtin_fabsf(v), m, table) | ((float_bits(v) >> 31) << 7);
    out[i] = static_cast<uint8_t>(code);
    if (Ef) residual[i] = v - d[code];
  }
}

template <bool Add>
void decode_loop(const uint8_t* __restrict codes, float* __restrict out, int64_t n, const float* __restrict d) {
  for (int64_t i = 0; i < n; ++i) out[i] = Add ? out[i] + d[codes[i]] : d[codes[i]];
}

}  // namespace

void dettmers8_tree_codes(CpuPath path, const float* in, float* residual, uint8_t* out, int64_t n, float r,
                          const float* d) {
#if defined(__AVX2__)
  if (path == CpuPath::fast) {
    if (residual)
      encode_tree_avx2<true>(in, residual, out, n, r, d);
    else
      encode_tree_avx2<false>(in, nullptr, out, n, r, d);
    return;
  }
#endif
  (void)path;
  if (residual)
    encode_tree<true>(in, residual, out, n, r, d);
  else
    encode_tree<false>(in, nullptr, out, n, r, d);
}

void dettmers8_decode_values(CpuPath path, const uint8_t* codes, float* out, int64_t n, const float* d, bool add) {
  // One loop for both paths: GCC's version (eight scalar loads assembled into a vector) is faster on
  // Zen 3 than an AVX2 gather (0.7 against 1.0 cycles per value, measured).
  (void)path;
  if (add)
    decode_loop<true>(codes, out, n, d);
  else
    decode_loop<false>(codes, out, n, d);
}

namespace {

class Dettmers8Quantizer final : public Quantizer {
 public:
  explicit Dettmers8Quantizer(const QuantSpec& spec) : Quantizer(spec) {}

 protected:
  size_t max_body_bytes(int64_t n, int64_t) const override { return wire::kHeaderBytes + static_cast<size_t>(n); }
  // The header but the scale M (field b, from the data: the CUDA decoder reads and checks it there).
  std::optional<WireHeader> shape_header(int64_t n, int64_t) const override { return header(n, 0); }
  bool header_b_from_data() const override { return true; }

  WireHeader header(int64_t n, uint32_t max_bits) const {
    WireHeader h;
    h.method = QuantMethod::dettmers8;
    h.a = static_cast<uint32_t>(variant());
    h.b = max_bits;
    h.n = static_cast<uint64_t>(n);
    h.total = wire::pad8(max_body_bytes(n, 1));
    return h;
  }

  size_t encode_cpu(const EncodeArgs& a) const override {
    const uint32_t m = a.residual ? max_abs_bits<true>(a.in, a.residual, a.n) : max_abs_bits<false>(a.in, nullptr, a.n);
    if (m >= kNonFinite)
      throw NonFiniteInputError(fmt::format("dettmers8 encode: the input of {} values holds NaN or Inf", a.n));
    wire::write_header(a.out, header(a.n, m));
    float d[256];
    decode_table(variant(), bits_float(m), d);
    uint8_t* codes = a.out + wire::kHeaderBytes;
    if (clusternet()) {
      if (a.residual)
        encode_clusternet<true>(a.in, a.residual, codes, a.n, bits_float(m), d);
      else
        encode_clusternet<false>(a.in, nullptr, codes, a.n, bits_float(m), d);
    } else if (variant() == Dettmers8Variant::dynamic_tree) {
      const float r = inverse_scale(m, 1.0f);
      dettmers8_tree_codes(CpuPath::fast, a.in, a.residual, codes, a.n, r, d);
    } else {
      const float r127 = inverse_scale(m, 127.0f);
      if (a.residual)
        encode_linear<true>(a.in, a.residual, codes, a.n, bits_float(m), r127, d);
      else
        encode_linear<false>(a.in, nullptr, codes, a.n, bits_float(m), r127, d);
    }
    return max_body_bytes(a.n, 1);
  }

#if QTRAIN_QUANT_CUDA
  size_t encode_cuda(Context& ctx, const EncodeArgs& a) const override {
    dettmers8_encode_cuda(ctx, variant(), clusternet(), a);
    return max_body_bytes(a.n, 1);
  }
#endif

  void decode_cpu(const WireHeader& h, std::span<const uint8_t> in, float* out, bool add) const override {
    const auto variant = check_body(h);
    float d[256];
    decode_table(variant, bits_float(h.b), d);
    const uint8_t* codes = in.data() + wire::kHeaderBytes;
    decode_tiled(out, static_cast<int64_t>(h.n), add, [&](int64_t b, int64_t e, float* dst) {
      dettmers8_decode_values(CpuPath::fast, codes + b, dst, e - b, d, add);
    });
  }

#if QTRAIN_QUANT_CUDA
  void decode_cuda(Context& ctx, const WireHeader& h, std::span<const uint8_t> in, float* out,
                   bool add) const override {
    const auto variant = check_body(h);
    dettmers8_decode_cuda(ctx, variant, in.data(), out, static_cast<int64_t>(h.n), add);
  }
#endif

 private:
  Dettmers8Variant variant() const { return static_cast<Dettmers8Variant>(spec().integer("variant")); }
  // The payload does not record the search: decoding is the same table either way.
  bool clusternet() const {
    return variant() == Dettmers8Variant::dynamic_tree && spec().choice("search") == "clusternet";
  }

  Dettmers8Variant check_body(const WireHeader& h) const {
    if (h.a > 1) wire::bad_payload(method(), fmt::format("variant field {} (0 dynamic_tree, 1 linear)", h.a));
    if (h.b >= kNonFinite)
      wire::bad_payload(method(), fmt::format("scale field {:#x} is not a finite non-negative float", h.b));
    if (h.c != 0) wire::bad_payload(method(), "reserved field must be zero");
    const size_t expect = wire::pad8(max_body_bytes(static_cast<int64_t>(h.n), 1));
    if (h.total != expect)
      wire::bad_payload(method(), fmt::format("length field {} bytes, {} values take {}", h.total, h.n, expect));
    return static_cast<Dettmers8Variant>(h.a);
  }
};

}  // namespace

const QuantMethodInfo& dettmers8_method_info() {
  static const QuantMethodInfo info = [] {
    QuantMethodInfo m;
    m.id = QuantMethod::dettmers8;
    m.name = "dettmers8";
    // The choices' order is the wire value of the variant field.
    auto tree = [](const QuantSpec& s) { return s.choice("variant") == "dynamic_tree"; };
    m.params = {{.key = "variant", .kind = QuantParamDef::Kind::name, .choices = {"dynamic_tree", "linear"}},
                {.key = "search",
                 .kind = QuantParamDef::Kind::name,
                 .choices = {"nearest", "clusternet"},
                 .applies = tree,
                 .why_not = "applies to dettmers8 variant: dynamic_tree only (linear has no table to search)",
                 .shown_at_default = false}};
    m.algorithm = "allgather";
    // dynamic_tree: half the widest table gap (the last bin of [0.45, 1]: 0.55 / 32) times the scale
    // (a whole gap with clusterNet's search, which may take the farther neighbour), and the sign kept;
    // linear: half a step of 127 levels. All plus the float rounding.
    m.within_bound = [tree](const QuantSpec& s, const RoundTripValue& v) {
      if (!tree(s)) return std::fabs(v.y - v.x) <= v.max_abs / 254 * (1 + 1e-5);
      const double gaps = s.choice("search") == "clusternet" ? 1.0 : 0.5;
      return std::fabs(v.y - v.x) <= 0.0171875 * gaps * v.max_abs * (1 + 1e-5) &&
             std::signbit(v.y) == std::signbit(v.x);
    };
    m.variants = {"dettmers8", "dettmers8:search=clusternet", "dettmers8:variant=linear"};
    m.make = [](const QuantSpec& spec) -> std::unique_ptr<Quantizer> {
      return std::make_unique<Dettmers8Quantizer>(spec);
    };
    return m;
  }();
  return info;
}

}  // namespace qtrain::quant_detail
