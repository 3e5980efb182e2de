// adaptive: adaptive quantization (Dryden et al. 2016, LBANN's final version) with error feedback.
// Thresholds over the whole span: t = the k-th largest |v|, k = max(1, round(pi n)); tau+ = t and
// tau- = -t (with `sample`, t comes from sampled values and tau+- get LBANN's refinement). Per column:
// mu+ / mu- = the means of the candidates v >= tau+ (v > 0) / v <= tau- (v < 0), or +-t when a side
// is empty. Entries (row << 1 | positive) in 16 bits for columns up to 32767 rows, else 32; at most
// 4k entries in all (later candidates stay in the residual). Sent: e = v - mu, unsent: e = v.
#include <cstring>

#include "framework/core/philox_batch.h"
#include "quant/adaptive_cuda.h"
#include "quant/adaptive_wire.h"
#include "quant/det_sum.h"
#include "quant/method.h"
#include "quant/numerics.h"
#include "quant/select.h"
#include "quant/wire.h"

namespace qtrain::quant_detail {
namespace {

struct Thresholds {
  float pos = 0, neg = 0;
  bool non_finite = false;
};

template <bool Ef>
struct Span {
  const float* g;
  const float* e;
  float operator()(int64_t i) const { return Ef ? g[i] + e[i] : g[i]; }
};

int64_t entry_cap(double proportion, int64_t n) {
  const int64_t k = wire::count_for_proportion(proportion, n);
  return 4 * k < n ? 4 * k : n;
}

size_t workspace_bytes(int64_t n, int64_t sample) {
  const size_t exact = 4 * static_cast<size_t>(n);
  const size_t sampled = 12 * static_cast<size_t>(sample);
  return exact > sampled ? exact : sampled;
}

template <bool Ef>
Thresholds thresholds(const Span<Ef>& v, int64_t n, double proportion, int64_t sample, PhiloxKey key, void* ws) {
  Thresholds th;
  if (sample == 0 || n <= sample) {
    const Selection s =
        select_kth_largest_abs(v, n, wire::count_for_proportion(proportion, n), static_cast<uint32_t*>(ws));
    th.non_finite = s.non_finite;
    th.pos = bits_float(s.threshold_bits);
    th.neg = -th.pos;
    return th;
  }
  // Sampled: value j of the sample sits at floor(u_j * n / 2^32), u_j = word j of the Philox blocks
  // (j / 4, 0, 0, "SAMP").
  auto* words = static_cast<uint32_t*>(ws);
  auto* pool = reinterpret_cast<float*>(words + sample);
  auto* candidates = words + 2 * sample;
  philox_blocks(key, 0, kStage1, kTagSample, (sample + 3) / 4, words);
  for (int64_t j = 0; j < sample; ++j)
    pool[j] = v(static_cast<int64_t>((static_cast<uint64_t>(words[j]) * static_cast<uint64_t>(n)) >> 32));
  const Selection s = select_kth_largest_abs([pool](int64_t j) { return pool[j]; }, sample,
                                             wire::count_for_proportion(proportion, sample), candidates);
  th.non_finite = s.non_finite;
  if (s.non_finite) return th;
  // LBANN's refinement: tau+ = the smallest positive among the sampled top values and tau- = the
  // negative closest to zero among them, each falling back to the mirror of the other side's t.
  const float t = bits_float(s.threshold_bits);
  float pos_min = 0, neg_max = 0;
  bool has_pos = false, has_neg = false;
  for (int64_t j = 0; j < sample; ++j) {
    const float x = pool[j];
    if (abs_bits(x) < s.threshold_bits) continue;
    if (x > 0.0f && (!has_pos || x < pos_min)) pos_min = x, has_pos = true;
    if (x < 0.0f && (!has_neg || x > neg_max)) neg_max = x, has_neg = true;
  }
  th.pos = has_pos ? pos_min : t;
  th.neg = has_neg ? neg_max : -t;
  return th;
}

struct ColumnTotals {
  int64_t count_pos = 0, count_neg = 0;
  uint32_t non_finite = 0;
};

// Lane sums (quant/det_sum.h) of the candidates of one chunk of a column: sums[0] over v >= tau+
// (v > 0), sums[1] over v <= tau- (v < 0).
template <bool Ef>
void candidate_sums_chunk(const Span<Ef>& v, int64_t first, int64_t len, Thresholds th, float* sums,
                          ColumnTotals& totals) {
  const uint32_t pos_bits = float_bits(th.pos), neg_bits = float_bits(th.neg);
  float lp[kSumLanes] = {}, ln[kSumLanes] = {};
  int32_t cp[kSumLanes] = {}, cn[kSumLanes] = {};
  uint32_t bad[kSumLanes] = {};
  auto lane = [&](int64_t i, int j) {
    const float x = v(first + i);
    const bool p = adaptive_positive(float_bits(x), pos_bits);
    const bool q = adaptive_negative(float_bits(x), neg_bits);
    lp[j] += masked(x, p);
    ln[j] += masked(x, q);
    cp[j] += p ? 1 : 0;
    cn[j] += q ? 1 : 0;
    bad[j] |= abs_bits(x) >= kNonFinite ? 1u : 0u;
  };
  int64_t t = 0;
  for (; t + kSumLanes <= len; t += kSumLanes)
    for (int j = 0; j < kSumLanes; ++j) lane(t + j, j);
  for (int j = 0; t + j < len; ++j) lane(t + j, j);
  for (int j = 0; j < kSumLanes; ++j) {
    totals.count_pos += cp[j];
    totals.count_neg += cn[j];
    totals.non_finite |= bad[j];
  }
  sums[0] = fold_lanes(lp);
  sums[1] = fold_lanes(ln);
}

// e = v - mu for the candidates of a column (all of them sent), e = v for the rest. p and q exclude
// each other, and v - (+0) is v exactly, so one masked subtraction covers both.
void update_residual(const float* __restrict g, float* __restrict e, int64_t len, Thresholds th, float mu_pos,
                     float mu_neg) {
  const uint32_t pos_bits = float_bits(mu_pos), neg_bits = float_bits(mu_neg);
  const uint32_t tp = float_bits(th.pos), tn = float_bits(th.neg);
  for (int64_t r = 0; r < len; ++r) {
    const float x = g[r] + e[r];
    const uint32_t xb = float_bits(x);
    const uint32_t p = 0u - static_cast<uint32_t>(adaptive_positive(xb, tp));
    const uint32_t q = 0u - static_cast<uint32_t>(adaptive_negative(xb, tn));
    e[r] = x - bits_float((pos_bits & p) | (neg_bits & q));
  }
}

template <bool Ef, typename Entry>
int64_t encode_columns(const EncodeArgs& a, const wire::AdaptiveLayout& l, Thresholds th, int64_t cap) {
  const Span<Ef> v{a.in, a.residual};
  auto* entries = reinterpret_cast<Entry*>(a.out + l.entries_offset);
  const uint32_t pos_bits = float_bits(th.pos), neg_bits = float_bits(th.neg);
  int64_t sent = 0;
  for (int64_t c = 0; c < l.columns; ++c) {
    const int64_t base = c * l.column;
    float sums[2];
    ColumnTotals totals;
    det_sums<2>(
        [&](int64_t first, int64_t len, float* s) { candidate_sums_chunk(v, base + first, len, th, s, totals); },
        l.column, sums);
    if (totals.non_finite)
      throw NonFiniteInputError(fmt::format("adaptive encode: the input of {} values holds NaN or Inf", a.n));
    const float mu_pos = totals.count_pos > 0 ? sums[0] / static_cast<float>(totals.count_pos) : th.pos;
    const float mu_neg = totals.count_neg > 0 ? sums[1] / static_cast<float>(totals.count_neg) : th.neg;
    // Finite values near the float maximum can sum beyond it: an Inf mean would make a payload that
    // decode rejects (and NaN residuals).
    if (abs_bits(mu_pos) >= kNonFinite || abs_bits(mu_neg) >= kNonFinite)
      throw NonFiniteInputError(
          fmt::format("adaptive encode: the sum of the {} values sent from column {} exceeds the float range",
                      abs_bits(mu_pos) >= kNonFinite ? "positive" : "negative", c));
    uint8_t* head = a.out + wire::kHeaderBytes + 12 * static_cast<size_t>(c);
    const auto first = static_cast<uint32_t>(sent);
    std::memcpy(head, &first, 4);
    std::memcpy(head + 4, &mu_pos, 4);
    std::memcpy(head + 8, &mu_neg, 4);
    const int64_t candidates = totals.count_pos + totals.count_neg;
    if (sent + candidates < cap) {
      // The whole column fits under the cap (the usual case). Compaction without branches: every row
      // writes the next entry slot, only candidates advance (the slot after the last one is within
      // the bound because sent + candidates < cap, and is overwritten or lies in the padding).
      Entry* next = entries + sent;
      int64_t k = 0;
      for (int64_t r = 0; r < l.column; ++r) {
        const float x = v(base + r);
        const bool p = adaptive_positive(float_bits(x), pos_bits);
        const bool q = adaptive_negative(float_bits(x), neg_bits);
        next[k] = static_cast<Entry>((static_cast<uint32_t>(r) << 1) | (p ? 1u : 0u));
        k += (p | q) ? 1 : 0;
      }
      sent += k;
      if (Ef) update_residual(a.in + base, a.residual + base, l.column, th, mu_pos, mu_neg);
      continue;
    }
    for (int64_t r = 0; r < l.column; ++r) {
      const float x = v(base + r);
      const bool p = adaptive_positive(float_bits(x), pos_bits);
      const bool q = adaptive_negative(float_bits(x), neg_bits);
      if ((p || q) && sent < cap) {
        entries[sent++] = static_cast<Entry>((static_cast<uint32_t>(r) << 1) | (p ? 1u : 0u));
        if (Ef) a.residual[base + r] = x - (p ? mu_pos : mu_neg);
      } else if (Ef) {
        a.residual[base + r] = x;
      }
    }
  }
  return sent;
}

template <bool Add, typename Entry>
void decode_columns(const wire::AdaptiveLayout& l, const uint8_t* in, float* out) {
  const auto* entries = reinterpret_cast<const Entry*>(in + l.entries_offset);
  if (!Add) std::memset(out, 0, 4 * static_cast<size_t>(l.n));
  for (int64_t c = 0; c < l.columns; ++c) {
    const uint8_t* head = in + wire::kHeaderBytes + 12 * static_cast<size_t>(c);
    uint32_t first = 0, next = static_cast<uint32_t>(l.entries);
    float mu[2];
    std::memcpy(&first, head, 4);
    std::memcpy(&mu[0], head + 8, 4);  // mu- for sign 0
    std::memcpy(&mu[1], head + 4, 4);  // mu+ for sign 1
    if (c + 1 < l.columns) std::memcpy(&next, head + 12, 4);
    float* col = out + c * l.column;
    for (uint32_t j = first; j < next; ++j) {
      const uint32_t e = entries[j];
      col[e >> 1] = Add ? col[e >> 1] + mu[e & 1u] : mu[e & 1u];
    }
  }
}

class AdaptiveQuantizer final : public Quantizer {
 public:
  explicit AdaptiveQuantizer(const QuantSpec& spec)
      : Quantizer(spec), proportion_(spec.number("proportion")), sample_(spec.integer("sample")) {}

  // The payload holds the values sent, however many passed the threshold.
  bool fixed_size() const override { return false; }

 protected:
  size_t max_body_bytes(int64_t n, int64_t column) const override {
    return wire::adaptive_layout(n, column, entry_cap(proportion_, n)).body_end;
  }

  size_t encode_cpu(const EncodeArgs& a) const override {
    const int64_t cap = entry_cap(proportion_, a.n);
    Thresholds th;
    if (a.n > 0) {
      void* ws = a.state->workspace(Device::cpu(), workspace_bytes(a.n, sample_));
      th = a.residual ? thresholds(Span<true>{a.in, a.residual}, a.n, proportion_, sample_, a.key, ws)
                      : thresholds(Span<false>{a.in, nullptr}, a.n, proportion_, sample_, a.key, ws);
      if (th.non_finite)
        throw NonFiniteInputError(fmt::format("adaptive encode: the input of {} values holds NaN or Inf", a.n));
    }
    const wire::AdaptiveLayout bound = wire::adaptive_layout(a.n, a.column, cap);
    int64_t sent = 0;
    if (bound.entry_bytes == 2) {
      sent = a.residual ? encode_columns<true, uint16_t>(a, bound, th, cap)
                        : encode_columns<false, uint16_t>(a, bound, th, cap);
    } else {
      sent = a.residual ? encode_columns<true, uint32_t>(a, bound, th, cap)
                        : encode_columns<false, uint32_t>(a, bound, th, cap);
    }
    const wire::AdaptiveLayout l = wire::adaptive_layout(a.n, a.column, sent);
    const auto count = static_cast<uint32_t>(sent);
    std::memcpy(a.out + l.count_offset, &count, 4);
    wire::write_header(a.out, header(l));
    return l.body_end;
  }

#if QTRAIN_QUANT_CUDA
  size_t encode_cuda(Context& ctx, const EncodeArgs& a) const override {
    const int64_t cap = entry_cap(proportion_, a.n);
    const wire::AdaptiveLayout bound = wire::adaptive_layout(a.n, a.column, cap);
    const std::optional<int64_t> sent =
        adaptive_encode_cuda(ctx, a, bound, proportion_, sample_, cap, workspace_bytes(a.n, sample_));
    // The kernels wrote the padding too.
    return sent ? wire::pad8(wire::adaptive_layout(a.n, a.column, *sent).body_end) : kSizeOnDevice;
  }
#endif

  void decode_cpu(const WireHeader& h, std::span<const uint8_t> in, float* out, bool add) const override {
    const wire::AdaptiveLayout l = check_body(h, in.data());
    if (l.entry_bytes == 2) {
      if (add)
        decode_columns<true, uint16_t>(l, in.data(), out);
      else
        decode_columns<false, uint16_t>(l, in.data(), out);
    } else {
      if (add)
        decode_columns<true, uint32_t>(l, in.data(), out);
      else
        decode_columns<false, uint32_t>(l, in.data(), out);
    }
  }

#if QTRAIN_QUANT_CUDA
  void decode_cuda(Context& ctx, const WireHeader& h, std::span<const uint8_t> in, float* out,
                   bool add) const override {
    wire::AdaptiveLayout l = check_header_fields(h);
    // The most entries the payload may hold: the header's count where the host read it (`in` is then
    // the payload), else (shape_header's, the largest payload's) the cap, or what `in` holds if less.
    if (in.size() < l.entries_offset)
      wire::bad_payload(method(), fmt::format("truncated: {} columns take {} bytes, the buffer holds {}", l.columns,
                                              l.entries_offset, in.size()));
    const auto fits = static_cast<int64_t>((in.size() - l.entries_offset) / static_cast<size_t>(l.entry_bytes));
    if (fits < l.entries) l = wire::adaptive_layout(l.n, l.column, fits);
    adaptive_decode_cuda(ctx, l, in.data(), out, add);
  }
#endif

  // The largest payload's header (the entry cap's): the count (c) and the length are the data's, read
  // and checked by the CUDA decoder on the device.
  std::optional<WireHeader> shape_header(int64_t n, int64_t column) const override {
    return header(wire::adaptive_layout(n, column, entry_cap(proportion_, n)));
  }
  bool header_c_from_data() const override { return true; }

 private:
  WireHeader header(const wire::AdaptiveLayout& l) const {
    WireHeader h;
    h.method = QuantMethod::adaptive;
    h.a = static_cast<uint32_t>(l.entry_bytes);
    h.b = static_cast<uint32_t>(l.column);
    h.c = static_cast<uint32_t>(l.entries);
    h.n = static_cast<uint64_t>(l.n);
    h.total = wire::pad8(l.body_end);
    return h;
  }

  // The header alone (the CUDA path checks the body on the device).
  wire::AdaptiveLayout check_header_fields(const WireHeader& h) const {
    const auto n = static_cast<int64_t>(h.n);
    if (h.b == 0) wire::bad_payload(method(), "column length 0");
    if (n % h.b != 0) wire::bad_payload(method(), fmt::format("column length {} does not divide {} values", h.b, n));
    if (h.a != static_cast<uint32_t>(wire::adaptive_entry_bytes(h.b)))
      wire::bad_payload(method(), fmt::format("entry width {} bytes, columns of {} rows use {}", h.a, h.b,
                                              wire::adaptive_entry_bytes(h.b)));
    if (h.c > h.n) wire::bad_payload(method(), fmt::format("{} entries for {} values", h.c, h.n));
    const wire::AdaptiveLayout l = wire::adaptive_layout(n, h.b, h.c);
    if (h.total != wire::pad8(l.body_end))
      wire::bad_payload(method(),
                        fmt::format("length field {} bytes, the layout takes {}", h.total, wire::pad8(l.body_end)));
    return l;
  }

  // Header, column table and entries, all before anything is written.
  wire::AdaptiveLayout check_body(const WireHeader& h, const uint8_t* in) const {
    const wire::AdaptiveLayout l = check_header_fields(h);
    uint32_t count = 0;
    std::memcpy(&count, in + l.count_offset, 4);
    if (count != l.entries)
      wire::bad_payload(method(), fmt::format("entry count {} in the body, {} in the header", count, l.entries));
    uint32_t previous = 0;
    for (int64_t c = 0; c < l.columns; ++c) {
      const uint8_t* head = in + wire::kHeaderBytes + 12 * static_cast<size_t>(c);
      uint32_t first = 0, mu_pos = 0, mu_neg = 0;
      std::memcpy(&first, head, 4);
      std::memcpy(&mu_pos, head + 4, 4);
      std::memcpy(&mu_neg, head + 8, 4);
      if ((c == 0 && first != 0) || first < previous || first > l.entries)
        wire::bad_payload(method(), fmt::format("column {} starts at entry {} (previous {}, {} entries)", c, first,
                                                previous, l.entries));
      if ((mu_pos & kAbsMask) >= kNonFinite || (mu_neg & kAbsMask) >= kNonFinite)
        wire::bad_payload(method(), fmt::format("column {} has a non-finite mean", c));
      previous = first;
    }
    for (int64_t c = 0; c < l.columns; ++c) {
      uint32_t first = 0, next = static_cast<uint32_t>(l.entries);
      std::memcpy(&first, in + wire::kHeaderBytes + 12 * static_cast<size_t>(c), 4);
      if (c + 1 < l.columns) std::memcpy(&next, in + wire::kHeaderBytes + 12 * static_cast<size_t>(c + 1), 4);
      int64_t last_row = -1;
      for (uint32_t j = first; j < next; ++j) {
        uint32_t e = 0;
        std::memcpy(&e, in + l.entries_offset + static_cast<size_t>(j) * l.entry_bytes,
                    static_cast<size_t>(l.entry_bytes));
        const int64_t row = e >> 1;
        if (row >= l.column || row <= last_row)
          wire::bad_payload(
              method(), fmt::format("entry {} (column {}) has row {}: rows must increase and stay below {}", j, c, row,
                                    l.column));
        last_row = row;
      }
    }
    if (l.columns == 0 && l.entries != 0) wire::bad_payload(method(), "entries without columns");
    return l;
  }

  double proportion_;
  int64_t sample_;
};

}  // namespace

bool onebit_like_within_bound(const QuantSpec&, const RoundTripValue& v);  // onebit.cpp

const QuantMethodInfo& adaptive_method_info() {
  static const QuantMethodInfo info = [] {
    QuantMethodInfo m;
    m.id = QuantMethod::adaptive;
    m.name = "adaptive";
    m.params = {
        {.key = "proportion",
         .kind = QuantParamDef::Kind::real,
         .fallback = 1.0 / 32,
         .min = 0,
         .max = 1,
         .min_exclusive = true},
        {.key = "sample", .fallback = 0, .min = 0, .max = 1 << 24, .shown_at_default = false},
    };
    m.error_feedback = true;
    m.algorithm = "reduce_scatter_allgather";
    m.columnar = [](const QuantSpec&) { return true; };
    m.check = [](const QuantSpec& s) -> std::optional<std::pair<std::string, std::string>> {
      const int64_t sample = s.integer("sample");
      if (sample != 0 && sample < 64)
        return std::pair<std::string, std::string>{"sample", fmt::format("must be 0 (exact) or >= 64, got {}", sample)};
      return std::nullopt;
    };
    // The sent values decode to their column's mean of their side, the others to 0.
    m.within_bound = onebit_like_within_bound;
    m.variants = {"adaptive", "adaptive:sample=256"};
    m.make = [](const QuantSpec& spec) -> std::unique_ptr<Quantizer> {
      return std::make_unique<AdaptiveQuantizer>(spec);
    };
    return m;
  }();
  return info;
}

}  // namespace qtrain::quant_detail
