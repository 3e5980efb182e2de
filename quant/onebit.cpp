// onebit: 1-bit SGD (Seide et al. 2014) with error feedback. Per group (a column, or a bucket of the
// flattened span), m0 = mean of v < 0 and m1 = mean of v >= 0 (an empty side gives 0); bit = v >= 0,
// decoded as m1, else m0. Two passes per group: the two sums (deterministic order, shared with CUDA),
// then bits and residuals; a group is usually small enough that the second pass reads from cache.
#include "quant/cpu_memory.h"
#include "quant/det_sum.h"
#include "quant/method.h"
#include "quant/numerics.h"
#include "quant/onebit_cuda.h"
#include "quant/onebit_wire.h"
#include "quant/wire.h"

namespace qtrain::quant_detail {
namespace {

struct SideTotals {
  int64_t negatives = 0;
  uint32_t non_finite = 0;
};

// Lane sums of the negative and the non-negative values of one chunk (len <= kSumChunk).
template <bool Ef>
void side_sums_chunk(const float* __restrict g, const float* __restrict e, int64_t len, float* sums,
                     SideTotals& totals) {
  float neg[kSumLanes] = {}, pos[kSumLanes] = {};
  int32_t count[kSumLanes] = {};
  uint32_t bad[kSumLanes] = {};
  int64_t t = 0;
  for (; t + kSumLanes <= len; t += kSumLanes) {
    for (int j = 0; j < kSumLanes; ++j) {
      const float v = Ef ? g[t + j] + e[t + j] : g[t + j];
      const bool m = v < 0.0f;
      neg[j] += masked(v, m);
      pos[j] += masked(v, !m);
      count[j] += m ? 1 : 0;
      bad[j] |= abs_bits(v) >= kNonFinite ? 1u : 0u;
    }
  }
  for (int j = 0; t + j < len; ++j) {
    const float v = Ef ? g[t + j] + e[t + j] : g[t + j];
    const bool m = v < 0.0f;
    neg[j] += masked(v, m);
    pos[j] += masked(v, !m);
    count[j] += m ? 1 : 0;
    bad[j] |= abs_bits(v) >= kNonFinite ? 1u : 0u;
  }
  for (int j = 0; j < kSumLanes; ++j) {
    totals.negatives += count[j];
    totals.non_finite |= bad[j];
  }
  sums[0] = fold_lanes(neg);
  sums[1] = fold_lanes(pos);
}

// side_sums_chunk for a group shorter than one row of lanes (the 3-value columns of a 3x3 convolution
// weight): fold_used_lanes gives the same bits without the fixed cost of 32 lanes per group, which
// made such columns encode at 0.06 GB/s.
template <bool Ef>
void side_sums_short(const float* __restrict g, const float* __restrict e, int64_t len, float* sums,
                     SideTotals& totals) {
  float neg[kSumLanes], pos[kSumLanes];
  for (int64_t j = 0; j < len; ++j) {
    const float v = Ef ? g[j] + e[j] : g[j];
    const bool m = v < 0.0f;
    neg[j] = 0.0f + masked(v, m);
    pos[j] = 0.0f + masked(v, !m);
    totals.negatives += m ? 1 : 0;
    totals.non_finite |= abs_bits(v) >= kNonFinite ? 1u : 0u;
  }
  sums[0] = fold_used_lanes(neg, len);
  sums[1] = fold_used_lanes(pos, len);
}

// Bits (LSB first) and residuals of one group.
template <bool Ef>
void pack_group(const float* __restrict g, float* __restrict e, int64_t len, float m0, float m1,
                uint32_t* __restrict words) {
  int64_t w = 0;
  for (; 32 * (w + 1) <= len; ++w) {
    const float* gw = g + 32 * w;
    float* ew = Ef ? e + 32 * w : nullptr;
    uint32_t word = 0;
    for (int j = 0; j < 32; ++j) {
      const float v = Ef ? gw[j] + ew[j] : gw[j];
      const bool pos = !(v < 0.0f);
      word |= static_cast<uint32_t>(pos) << j;
      if (Ef) ew[j] = v - (pos ? m1 : m0);
    }
    words[w] = word;
  }
  if (32 * w < len) {
    uint32_t word = 0;
    for (int64_t i = 32 * w; i < len; ++i) {
      const float v = Ef ? g[i] + e[i] : g[i];
      const bool pos = !(v < 0.0f);
      word |= static_cast<uint32_t>(pos) << (i - 32 * w);
      if (Ef) e[i] = v - (pos ? m1 : m0);
    }
    words[w] = word;
  }
}

// Values [first, first + count) of one group into out[0..count).
template <bool Add>
void unpack_group(const uint32_t* __restrict words, int64_t first, int64_t count, float m0, float m1,
                  float* __restrict out) {
  auto value = [&](int64_t j) { return (words[j / 32] >> (j % 32)) & 1u ? m1 : m0; };
  int64_t i = 0;
  for (; i < count && (first + i) % 32 != 0; ++i) out[i] = Add ? out[i] + value(first + i) : value(first + i);
  const uint32_t* w = words + (first + i) / 32;
  float* o = out + i;
  const int64_t full = (count - i) / 32;
  for (int64_t k = 0; k < full; ++k) {
    const uint32_t word = w[k];
    for (int j = 0; j < 32; ++j) {
      const float v = (word >> j) & 1u ? m1 : m0;
      o[32 * k + j] = Add ? o[32 * k + j] + v : v;
    }
  }
  for (i += 32 * full; i < count; ++i) out[i] = Add ? out[i] + value(first + i) : value(first + i);
}

template <bool Add>
void decode_range(const wire::OnebitLayout& l, const uint8_t* in, int64_t begin, int64_t end, float* out) {
  for (int64_t grp = begin / l.group; grp < l.groups && grp * l.group < end; ++grp) {
    const int64_t start = grp * l.group;
    const int64_t lo = begin > start ? begin : start;
    const int64_t hi = end < start + l.len(grp) ? end : start + l.len(grp);
    const uint8_t* p = in + l.offset(grp);
    const auto* means = reinterpret_cast<const float*>(p);
    unpack_group<Add>(reinterpret_cast<const uint32_t*>(p + 8), lo - start, hi - lo, means[0], means[1],
                      out + (lo - begin));
  }
}

template <bool Ef>
void encode_groups(const EncodeArgs& a, const wire::OnebitLayout& l) {
  for (int64_t grp = 0; grp < l.groups; ++grp) {
    const int64_t len = l.len(grp);
    const float* g = a.in + grp * l.group;
    float* e = Ef ? a.residual + grp * l.group : nullptr;
    float sums[2];
    SideTotals totals;
    if (len < kSumLanes) {
      side_sums_short<Ef>(g, e, len, sums, totals);
    } else {
      det_sums<2>([&](int64_t base, int64_t chunk,
                      float* s) { side_sums_chunk<Ef>(g + base, Ef ? e + base : nullptr, chunk, s, totals); },
                  len, sums);
    }
    if (totals.non_finite)
      throw NonFiniteInputError(fmt::format("onebit encode: the input of {} values holds NaN or Inf", a.n));
    const int64_t positives = len - totals.negatives;
    const float m0 = totals.negatives > 0 ? sums[0] / static_cast<float>(totals.negatives) : 0.0f;
    const float m1 = positives > 0 ? sums[1] / static_cast<float>(positives) : 0.0f;
    // Finite values near the float maximum can sum beyond it: an Inf mean would make a payload that
    // decode rejects (and NaN residuals).
    if (abs_bits(m0) >= kNonFinite || abs_bits(m1) >= kNonFinite)
      throw NonFiniteInputError(
          fmt::format("onebit encode: the sum of the {} values of group {} exceeds the float range",
                      abs_bits(m0) >= kNonFinite ? "negative" : "non-negative", grp));
    uint8_t* p = a.out + l.offset(grp);
    auto* means = reinterpret_cast<float*>(p);
    means[0] = m0;
    means[1] = m1;
    pack_group<Ef>(g, e, len, m0, m1, reinterpret_cast<uint32_t*>(p + 8));
  }
}

class OnebitQuantizer final : public Quantizer {
 public:
  explicit OnebitQuantizer(const QuantSpec& spec) : Quantizer(spec) {}

 protected:
  int64_t group_length(int64_t n, int64_t column) const {
    return mode() == OnebitMode::bucket ? spec().integer("bucket") : column;
  }

  size_t max_body_bytes(int64_t n, int64_t column) const override {
    return wire::onebit_layout(n, group_length(n, column)).body_end;
  }

  WireHeader header(const wire::OnebitLayout& l) const {
    WireHeader h;
    h.method = QuantMethod::onebit;
    h.a = static_cast<uint32_t>(mode());
    h.b = static_cast<uint32_t>(l.group);
    h.n = static_cast<uint64_t>(l.n);
    h.total = wire::pad8(l.body_end);
    return h;
  }

  size_t encode_cpu(const EncodeArgs& a) const override {
    const wire::OnebitLayout l = wire::onebit_layout(a.n, group_length(a.n, a.column));
    wire::write_header(a.out, header(l));
    if (a.residual)
      encode_groups<true>(a, l);
    else
      encode_groups<false>(a, l);
    return l.body_end;
  }

#if QTRAIN_QUANT_CUDA
  std::optional<WireHeader> shape_header(int64_t n, int64_t column) const override {
    return header(wire::onebit_layout(n, group_length(n, column)));
  }

  size_t encode_cuda(Context& ctx, const EncodeArgs& a) const override {
    const wire::OnebitLayout l = wire::onebit_layout(a.n, group_length(a.n, a.column));
    onebit_encode_cuda(ctx, a, l, header(l));
    return l.body_end;
  }
#endif

  void decode_cpu(const WireHeader& h, std::span<const uint8_t> in, float* out, bool add) const override {
    const wire::OnebitLayout l = check_body(h);
    // Every mean is checked before anything is written.
    for (int64_t grp = 0; grp < l.groups; ++grp) {
      const auto* means = reinterpret_cast<const float*>(in.data() + l.offset(grp));
      if (abs_bits(means[0]) >= kNonFinite || abs_bits(means[1]) >= kNonFinite)
        wire::bad_payload(method(), fmt::format("group {} has a non-finite mean", grp));
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
    const wire::OnebitLayout l = check_body(h);
    onebit_decode_cuda(ctx, l, in.data(), out, add);
  }
#endif

 private:
  OnebitMode mode() const { return static_cast<OnebitMode>(spec().integer("mode")); }

  wire::OnebitLayout check_body(const WireHeader& h) const {
    if (h.a > 1) wire::bad_payload(method(), fmt::format("mode field {} (0 column, 1 bucket)", h.a));
    if (h.b == 0) wire::bad_payload(method(), "group length 0");
    if (h.c != 0) wire::bad_payload(method(), "reserved field must be zero");
    const auto n = static_cast<int64_t>(h.n);
    if (h.a == 0 && n % h.b != 0)
      wire::bad_payload(method(), fmt::format("column length {} does not divide {} values", h.b, n));
    const wire::OnebitLayout l = wire::onebit_layout(n, h.b);
    if (h.total != wire::pad8(l.body_end))
      wire::bad_payload(method(),
                        fmt::format("length field {} bytes, the layout takes {}", h.total, wire::pad8(l.body_end)));
    return l;
  }
};

}  // namespace

// A value decodes to the mean of its group's side (without error feedback): its sign, and within |x| +
// the largest magnitude.
bool onebit_like_within_bound(const QuantSpec&, const RoundTripValue& v) {
  return std::fabs(v.y - v.x) <= std::fabs(v.x) + v.max_abs && (v.y == 0 || (v.y < 0) == (v.x < 0));
}

const QuantMethodInfo& onebit_method_info() {
  static const QuantMethodInfo info = [] {
    QuantMethodInfo m;
    m.id = QuantMethod::onebit;
    m.name = "onebit";
    const auto bucket_mode = [](const QuantSpec& s) { return s.choice("mode") == "bucket"; };
    m.params = {
        {.key = "mode", .kind = QuantParamDef::Kind::name, .choices = {"column", "bucket"}},
        {.key = "bucket",
         .fallback = 64,
         .min = 1,
         .max = static_cast<double>(wire::kMaxValues),
         .applies = bucket_mode,
         .why_not = "applies to onebit mode: bucket only (mode: column uses the tensor's columns)"},
    };
    m.error_feedback = true;
    m.algorithm = "reduce_scatter_allgather";
    m.columnar = [bucket_mode](const QuantSpec& s) { return !bucket_mode(s); };
    m.within_bound = onebit_like_within_bound;
    m.variants = {"onebit", "onebit:mode=bucket"};
    m.make = [](const QuantSpec& spec) -> std::unique_ptr<Quantizer> {
      return std::make_unique<OnebitQuantizer>(spec);
    };
    return m;
  }();
  return info;
}

}  // namespace qtrain::quant_detail
