// topk: gradient dropping (Aji & Heafield 2017): keep the k = max(1, round(fraction * n)) values of
// largest magnitude as (index, value) pairs, exactly k of them (ties at the threshold go to the lowest
// indices), with error feedback. The threshold comes from an exact radix selection (quant/select.h);
// the payload lists indices in increasing order. The values travel exactly (value_bits: 32, e = 0 at
// the sent positions) or, as SparseLoCo sends them, quantized to 2, 4 or 8 bits (quant/topk_values.h:
// sign and level between the smallest and largest sent magnitude of each range of value_block
// entries); then e = v - decoded at the sent positions. Dropped positions always keep e = v.
#include <cfloat>
#include <cmath>
#include <cstring>

#include "quant/method.h"
#include "quant/numerics.h"
#include "quant/select.h"
#include "quant/topk_cuda.h"
#include "quant/topk_values.h"
#include "quant/topk_wire.h"
#include "quant/wire.h"

namespace qtrain::quant_detail {
namespace {

// The selected values in index order into indices/values. Exact: e = 0 at the sent positions; else
// quantize() writes e there once the values' ranges are known. Dropped positions: e = v.
template <bool Ef, bool Exact>
int64_t compact(const float* __restrict in, float* __restrict residual, int64_t n, Selection sel,
                uint32_t* __restrict indices, float* __restrict values) {
  int64_t j = 0, ties = sel.ties_to_take;
  for (int64_t i = 0; i < n; ++i) {
    const float v = Ef ? in[i] + residual[i] : in[i];
    const uint32_t b = abs_bits(v);
    const bool tie = b == sel.threshold_bits && ties > 0;
    ties -= tie ? 1 : 0;
    if (b > sel.threshold_bits || tie) {
      indices[j] = static_cast<uint32_t>(i);
      values[j] = v;
      ++j;
      if (Ef && Exact) residual[i] = 0.0f;
    } else if (Ef) {
      residual[i] = v;
    }
  }
  return j;
}

// Ranges and codes of the k selected values (index order); with a residual, e = v - decoded at the
// sent positions.
void quantize(const float* values, const uint32_t* indices, const wire::TopkLayout& l, uint8_t* out, float* residual) {
  auto* ranges = reinterpret_cast<float*>(out + l.ranges);
  uint8_t* codes = out + l.codes;
  std::memset(codes, 0, l.end - l.codes);
  const uint32_t top = topk_top_level(l.bits);
  for (int64_t g = 0; g < l.groups; ++g) {
    const int64_t first = g * l.group, last = first + l.group < l.k ? first + l.group : l.k;
    uint32_t lo = ~0u, hi = 0u;
    for (int64_t j = first; j < last; ++j) {
      const uint32_t b = abs_bits(values[j]);
      lo = b < lo ? b : lo;
      hi = b > hi ? b : hi;
    }
    const float flo = bits_float(lo), fhi = bits_float(hi), step = topk_step(flo, fhi, top);
    ranges[2 * g] = flo;
    ranges[2 * g + 1] = fhi;
    for (int64_t j = first; j < last; ++j) {
      const uint32_t code = topk_code(values[j], flo, step, top, l.bits);
      const auto bit = static_cast<size_t>(j) * static_cast<size_t>(l.bits);
      codes[bit / 8] = static_cast<uint8_t>(codes[bit / 8] | (code << (bit % 8)));
      if (residual) residual[indices[j]] = values[j] - topk_decoded(code, flo, fhi, step, top, l.bits);
    }
  }
}

class TopkQuantizer final : public Quantizer {
 public:
  explicit TopkQuantizer(const QuantSpec& spec)
      : Quantizer(spec),
        fraction_(spec.number("fraction")),
        bits_(static_cast<int>(spec.integer("value_bits"))),
        block_(bits_ == 32 ? 0 : spec.integer("value_block")) {}

 protected:
  size_t max_body_bytes(int64_t n, int64_t) const override { return layout(n).end; }

  // The layout of n values' payload (k follows from n).
  wire::TopkLayout layout(int64_t n) const {
    const int64_t k = wire::count_for_proportion(fraction_, n);
    return wire::topk_layout(k, bits_, block_ > 0 ? block_ : (k > 0 ? k : 1));
  }

  WireHeader header(int64_t n) const {
    const wire::TopkLayout l = layout(n);
    WireHeader h;
    h.method = QuantMethod::topk;
    h.a = bits_ == 32 ? wire::kTopkExactValues : static_cast<uint32_t>(bits_);
    h.b = static_cast<uint32_t>(l.k);
    h.c = static_cast<uint32_t>(l.group);
    h.n = static_cast<uint64_t>(n);
    h.total = wire::pad8(l.end);
    return h;
  }

  size_t encode_cpu(const EncodeArgs& a) const override {
    const wire::TopkLayout l = layout(a.n);
    const int64_t k = l.k;
    wire::write_header(a.out, header(a.n));
    if (k == 0) return l.end;
    auto* candidates = static_cast<uint32_t*>(a.state->workspace(Device::cpu(), 4 * static_cast<size_t>(a.n)));
    const float* in = a.in;
    const float* res = a.residual;
    const Selection sel =
        res ? select_kth_largest_abs([in, res](int64_t i) { return in[i] + res[i]; }, a.n, k, candidates)
            : select_kth_largest_abs([in](int64_t i) { return in[i]; }, a.n, k, candidates);
    if (sel.non_finite)
      throw NonFiniteInputError(fmt::format("topk encode: the input of {} values holds NaN or Inf", a.n));
    auto* indices = reinterpret_cast<uint32_t*>(a.out + wire::kHeaderBytes);
    int64_t sent = 0;
    if (bits_ == 32) {
      auto* values = reinterpret_cast<float*>(a.out + l.values);
      sent = a.residual ? compact<true, true>(a.in, a.residual, a.n, sel, indices, values)
                        : compact<false, true>(a.in, nullptr, a.n, sel, indices, values);
    } else {
      // The selection is done with the candidates: their words hold the k values until they are coded.
      auto* values = reinterpret_cast<float*>(candidates);
      sent = a.residual ? compact<true, false>(a.in, a.residual, a.n, sel, indices, values)
                        : compact<false, false>(a.in, nullptr, a.n, sel, indices, values);
      quantize(values, indices, l, a.out, a.residual);
    }
    QT_CHECK_EQ(sent, k, "topk: selected values");
    return l.end;
  }

#if QTRAIN_QUANT_CUDA
  std::optional<WireHeader> shape_header(int64_t n, int64_t) const override { return header(n); }

  size_t encode_cuda(Context& ctx, const EncodeArgs& a) const override {
    const wire::TopkLayout l = layout(a.n);
    topk_encode_cuda(ctx, a, l, header(a.n));
    return l.end;
  }
#endif

  void decode_cpu(const WireHeader& h, std::span<const uint8_t> in, float* out, bool add) const override {
    const wire::TopkLayout l = check_body(h);
    const int64_t k = l.k;
    const auto* indices = reinterpret_cast<const uint32_t*>(in.data() + wire::kHeaderBytes);
    const auto n = static_cast<int64_t>(h.n);
    // Everything is checked before anything is written: indices increase strictly and stay below n;
    // ranges are finite with 0 <= lo <= hi; the bits after the last code are zero.
    for (int64_t j = 0; j < k; ++j) {
      if (indices[j] >= n)
        wire::bad_payload(method(), fmt::format("index {} of entry {} is outside [0, {})", indices[j], j, n));
      if (j > 0 && indices[j] <= indices[j - 1])
        wire::bad_payload(method(),
                          fmt::format("indices must increase: entry {} is {} after {}", j, indices[j], indices[j - 1]));
    }
    if (l.bits != 32) check_ranges_and_codes(l, in.data());
    if (!add) std::memset(out, 0, 4 * static_cast<size_t>(n));
    if (l.bits == 32) {
      const auto* values = reinterpret_cast<const float*>(in.data() + l.values);
      if (add)
        for (int64_t j = 0; j < k; ++j) out[indices[j]] += values[j];
      else
        for (int64_t j = 0; j < k; ++j) out[indices[j]] = values[j];
      return;
    }
    const auto* ranges = reinterpret_cast<const float*>(in.data() + l.ranges);
    const uint8_t* codes = in.data() + l.codes;
    const uint32_t top = topk_top_level(l.bits), mask = (1u << l.bits) - 1u;
    for (int64_t g = 0; g < l.groups; ++g) {
      const float lo = ranges[2 * g], hi = ranges[2 * g + 1], step = topk_step(lo, hi, top);
      const int64_t first = g * l.group, last = first + l.group < k ? first + l.group : k;
      for (int64_t j = first; j < last; ++j) {
        const auto bit = static_cast<size_t>(j) * static_cast<size_t>(l.bits);
        const float y = topk_decoded((codes[bit / 8] >> (bit % 8)) & mask, lo, hi, step, top, l.bits);
        out[indices[j]] = add ? out[indices[j]] + y : y;
      }
    }
  }

#if QTRAIN_QUANT_CUDA
  void decode_cuda(Context& ctx, const WireHeader& h, std::span<const uint8_t> in, float* out,
                   bool add) const override {
    topk_decode_cuda(ctx, in.data(), static_cast<int64_t>(h.n), check_body(h), out, add);
  }
#endif

 private:
  // The layout the header states, once its fields agree with each other and with the length.
  wire::TopkLayout check_body(const WireHeader& h) const {
    const bool exact = h.a == wire::kTopkExactValues;
    if (!exact && !wire::topk_known_value_bits(h.a))
      wire::bad_payload(method(), fmt::format("value format (field a) {} is not 0 (f32 values) or 2, 4, 8 bits", h.a));
    if (exact && h.c != 0) wire::bad_payload(method(), "field c must be zero with f32 values");
    if (!exact && h.c == 0) wire::bad_payload(method(), "a range of 0 entries (field c) with quantized values");
    if (h.b > h.n) wire::bad_payload(method(), fmt::format("{} entries for {} values", h.b, h.n));
    const wire::TopkLayout l =
        wire::topk_layout(static_cast<int64_t>(h.b), exact ? 32 : static_cast<int>(h.a), static_cast<int64_t>(h.c));
    if (h.total != wire::pad8(l.end))
      wire::bad_payload(method(),
                        fmt::format("length field {} bytes, {} entries take {}", h.total, l.k, wire::pad8(l.end)));
    return l;
  }

  void check_ranges_and_codes(const wire::TopkLayout& l, const uint8_t* payload) const {
    for (int64_t g = 0; g < l.groups; ++g) {
      uint32_t lo, hi;
      std::memcpy(&lo, payload + l.ranges + 8 * static_cast<size_t>(g), 4);
      std::memcpy(&hi, payload + l.ranges + 8 * static_cast<size_t>(g) + 4, 4);
      if (lo >= kNonFinite || hi >= kNonFinite || lo > hi)  // a sign bit set is above kNonFinite too
        wire::bad_payload(method(), fmt::format("range {} is [{}, {}]; a range must be finite with 0 <= lo <= hi", g,
                                                bits_float(lo), bits_float(hi)));
    }
    const auto used = static_cast<size_t>(l.k) * static_cast<size_t>(l.bits) % 8;
    if (used != 0 && (payload[l.end - 1] >> used) != 0)
      wire::bad_payload(method(), "bits after the last code must be zero");
  }

  double fraction_;
  int bits_;
  int64_t block_;  // value_block: entries per range, 0 = one range for the payload
};

// The entry of `index` in the payload's sorted indices, or -1.
int64_t entry_of(std::span<const uint8_t> payload, int64_t k, size_t index) {
  int64_t lo = 0, hi = k;
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    uint32_t at;
    std::memcpy(&at, payload.data() + wire::kHeaderBytes + 4 * static_cast<size_t>(mid), 4);
    if (at < index)
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo == k) return -1;
  uint32_t at;
  std::memcpy(&at, payload.data() + wire::kHeaderBytes + 4 * static_cast<size_t>(lo), 4);
  return at == index ? lo : -1;
}

// A dropped value decodes to 0; a sent one exactly (32 bits) or with v's sign to a magnitude within
// [lo, hi] of its range and within half a grid step of |v|, plus the float rounding of the level's
// decision and value (2^-20 hi) and, where the step flushes to zero (below FLT_MIN), hi - lo < top
// FLT_MIN.
bool topk_within_bound(const QuantSpec&, const RoundTripValue& v) {
  const WireHeader h = wire::read_header(v.payload.data());
  if (h.a == wire::kTopkExactValues) return v.y == 0 || v.y == v.x;
  const int64_t j = entry_of(v.payload, static_cast<int64_t>(h.b), v.index);
  if (j < 0) return v.y == 0;
  const wire::TopkLayout l = wire::topk_layout(static_cast<int64_t>(h.b), static_cast<int>(h.a), h.c);
  float lo, hi;
  const size_t at = l.ranges + 8 * static_cast<size_t>(j / l.group);
  std::memcpy(&lo, v.payload.data() + at, 4);
  std::memcpy(&hi, v.payload.data() + at + 4, 4);
  const uint32_t top = topk_top_level(l.bits);
  const double step = topk_step(lo, hi, top);
  const double m = std::fabs(v.y);
  return std::signbit(v.y) == std::signbit(v.x) && m >= lo && m <= hi &&
         std::fabs(m - std::fabs(v.x)) <= step / 2 + 0x1p-20 * hi + top * static_cast<double>(FLT_MIN);
}

}  // namespace

const QuantMethodInfo& topk_method_info() {
  static const QuantMethodInfo info = [] {
    QuantMethodInfo m;
    m.id = QuantMethod::topk;
    m.name = "topk";
    auto quantized = [](const QuantSpec& s) { return s.integer("value_bits") != 32; };
    m.params = {{.key = "fraction",
                 .kind = QuantParamDef::Kind::real,
                 .fallback = 0.01,
                 .min = 0,
                 .max = 1,
                 .min_exclusive = true},
                {.key = "value_bits", .fallback = 32, .choices = {"2", "4", "8", "32"}, .shown_at_default = false},
                {.key = "value_block",
                 .fallback = 128,
                 .min = 0,
                 .max = static_cast<double>(wire::kMaxValues),
                 .applies = quantized,
                 .why_not = "applies to topk value_bits: 2, 4 or 8 only (32-bit values are sent exactly)"}};
    m.error_feedback = true;
    m.algorithm = "allgather";
    m.within_bound = topk_within_bound;
    m.variants = {"topk", "topk:value_bits=2:fraction=0.02",
                  // Ranges of 7 entries: neither a whole number of code bytes nor of warps.
                  "topk:value_bits=4:value_block=7",
                  // One range for the whole payload.
                  "topk:value_bits=8:value_block=0"};
    m.make = [](const QuantSpec& spec) -> std::unique_ptr<Quantizer> { return std::make_unique<TopkQuantizer>(spec); };
    return m;
  }();
  return info;
}

}  // namespace qtrain::quant_detail
