// topk: gradient dropping (Aji & Heafield 2017): keep the k = max(1, round(fraction * n)) values of
// largest magnitude as (index, value) pairs, exactly k of them (ties at the threshold go to the lowest
// indices), with error feedback. The threshold comes from an exact radix selection (quant/select.h);
// the payload lists indices in increasing order. The values travel exactly (value_bits: 32, e = 0 at
// the sent positions) or, as SparseLoCo sends them, quantized to 2, 4 or 8 bits (quant/topk_values.h:
// sign and level between the smallest and largest sent magnitude of each range of value_block
// entries); then e = v - decoded at the sent positions. Dropped positions always keep e = v. With
// `chunk: C` (SparseLoCo's and CCLoco's chunked top-k) the selection is per chunk of C values instead:
// each chunk keeps max(1, round(fraction * its length)) values by the same exact rule, and the
// indices travel as log2(C)-bit chunk-local indices (quant/topk_wire.h).
#include <algorithm>
#include <bit>
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

// The k-th largest |value(i)| of a chunk of len values (1 <= k <= len): select.h's radix selection, or
// for short chunks (whose 2048-bin histograms would cost more than the values) nth_element on the
// magnitudes' bits. Both find the same value, the exact k-th largest, and the same ties.
template <typename F>
Selection select_in_chunk(F value, int64_t len, int64_t k, uint32_t* candidates) {
  constexpr int64_t kShortChunk = 256;
  if (len > kShortChunk) return select_kth_largest_abs(value, len, k, candidates);
  Selection s;
  for (int64_t i = 0; i < len; ++i) {
    candidates[i] = abs_bits(value(i));
    if (candidates[i] >= kNonFinite) s.non_finite = true;
  }
  if (s.non_finite) return s;
  std::nth_element(candidates, candidates + (k - 1), candidates + len, std::greater<>());
  s.threshold_bits = candidates[k - 1];
  int64_t above = 0;
  for (int64_t i = 0; i < len; ++i) above += candidates[i] > s.threshold_bits ? 1 : 0;
  s.ties_to_take = k - above;
  return s;
}

// The k indices' chunk-local parts (index & (C - 1)) packed in l.index_bits bits LSB first into the
// payload's index words, the bits after the last one zero.
void pack_indices(const uint32_t* indices, const wire::TopkLayout& l, uint8_t* out) {
  auto* words = reinterpret_cast<uint32_t*>(out + wire::kHeaderBytes);
  const uint32_t mask = static_cast<uint32_t>(l.chunks.size) - 1u;
  uint64_t acc = 0;
  int fill = 0;
  for (int64_t j = 0; j < l.k; ++j) {
    acc |= static_cast<uint64_t>(indices[j] & mask) << fill;
    fill += l.index_bits;
    if (fill >= 32) {
      *words++ = static_cast<uint32_t>(acc);
      acc >>= 32;
      fill -= 32;
    }
  }
  if (fill > 0) *words = static_cast<uint32_t>(acc);
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

// The layout a header states (unchecked: TopkQuantizer::check_body checks the fields first).
wire::TopkLayout layout_of(const WireHeader& h) {
  const uint32_t format = h.a & 0xffu;
  const auto shift = static_cast<int>((h.a >> 8) & 0xffu);
  wire::TopkChunks ch;
  if (shift != 0) {
    const int64_t keep = (h.a >> 16) + 1;
    ch = wire::topk_chunks(static_cast<int64_t>(h.n), shift, keep, 0);
    ch.last_keep = static_cast<int64_t>(h.b) - (ch.count - 1) * keep;
  }
  return wire::topk_layout(static_cast<int64_t>(h.b), format == wire::kTopkExactValues ? 32 : static_cast<int>(format),
                           static_cast<int64_t>(h.c), ch);
}

class TopkQuantizer final : public Quantizer {
 public:
  explicit TopkQuantizer(const QuantSpec& spec)
      : Quantizer(spec),
        fraction_(spec.number("fraction")),
        bits_(static_cast<int>(spec.integer("value_bits"))),
        block_(bits_ == 32 ? 0 : spec.integer("value_block")),
        chunk_(spec.integer("chunk")) {}

 protected:
  size_t max_body_bytes(int64_t n, int64_t) const override { return layout(n).end; }

  // The chunks of n values (chunk_ 0: none, the global selection). Each chunk keeps
  // max(1, round(fraction * its length)), at most its length: K for every chunk of chunk_ values.
  wire::TopkChunks chunks(int64_t n) const {
    if (chunk_ == 0) return {};
    wire::TopkChunks ch = wire::topk_chunks(n, std::countr_zero(static_cast<uint64_t>(chunk_)),
                                            wire::count_for_proportion(fraction_, chunk_), 0);
    ch.last_keep = ch.count == 0 ? 0 : wire::count_for_proportion(fraction_, ch.last_size);
    return ch;
  }

  // The layout of n values' payload (k follows from n).
  wire::TopkLayout layout(int64_t n) const {
    const wire::TopkChunks ch = chunks(n);
    const int64_t k = chunk_ == 0 ? wire::count_for_proportion(fraction_, n)
                                  : (ch.count == 0 ? 0 : (ch.count - 1) * ch.keep + ch.last_keep);
    return wire::topk_layout(k, bits_, block_ > 0 ? block_ : (k > 0 ? k : 1), ch);
  }

  WireHeader header(int64_t n) const {
    const wire::TopkLayout l = layout(n);
    WireHeader h;
    h.method = QuantMethod::topk;
    h.a = bits_ == 32 ? wire::kTopkExactValues : static_cast<uint32_t>(bits_);
    if (chunk_ != 0) h.a |= static_cast<uint32_t>(l.chunks.shift) << 8 | static_cast<uint32_t>(l.chunks.keep - 1) << 16;
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
    if (chunk_ != 0) {
      encode_chunked(a, l);
      return l.end;
    }
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

  // Per chunk: the selection, then the compaction into the workspace's global indices and the values
  // (the payload's f32 values, or the workspace's until they are coded); then the indices are packed.
  void encode_chunked(const EncodeArgs& a, const wire::TopkLayout& l) const {
    const wire::TopkChunks& ch = l.chunks;
    const auto k = static_cast<size_t>(l.k);
    const auto longest = static_cast<size_t>(std::min(ch.size, a.n));
    auto* candidates = static_cast<uint32_t*>(a.state->workspace(Device::cpu(), 4 * (longest + 2 * k)));
    uint32_t* indices = candidates + longest;
    float* values = bits_ == 32 ? reinterpret_cast<float*>(a.out + l.values) : reinterpret_cast<float*>(indices + k);
    for (int64_t c = 0; c < ch.count; ++c) {
      const int64_t start = c * ch.size, len = ch.size_of(c), keep = ch.keep_of(c);
      const float* in = a.in + start;
      float* res = a.residual ? a.residual + start : nullptr;
      const Selection sel =
          res ? select_in_chunk([in, res](int64_t i) { return in[i] + res[i]; }, len, keep, candidates)
              : select_in_chunk([in](int64_t i) { return in[i]; }, len, keep, candidates);
      if (sel.non_finite)
        throw NonFiniteInputError(fmt::format("topk encode: the input of {} values holds NaN or Inf", a.n));
      uint32_t* ci = indices + c * ch.keep;
      float* cv = values + c * ch.keep;
      int64_t sent = 0;
      if (bits_ == 32)
        sent =
            res ? compact<true, true>(in, res, len, sel, ci, cv) : compact<false, true>(in, nullptr, len, sel, ci, cv);
      else
        sent = res ? compact<true, false>(in, res, len, sel, ci, cv)
                   : compact<false, false>(in, nullptr, len, sel, ci, cv);
      QT_CHECK_EQ(sent, keep, "topk: selected values of a chunk");
      for (int64_t j = 0; j < keep; ++j) ci[j] += static_cast<uint32_t>(start);
    }
    pack_indices(indices, l, a.out);
    if (bits_ != 32) quantize(values, indices, l, a.out, a.residual);
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
    const auto* words = reinterpret_cast<const uint32_t*>(in.data() + wire::kHeaderBytes);
    const auto n = static_cast<int64_t>(h.n);
    // Everything is checked before anything is written: indices increase strictly and stay below n
    // (chunked: below their chunk's length); ranges are finite with 0 <= lo <= hi; the bits after the
    // last index and the last code are zero.
    check_indices(l, words, n);
    if (l.bits != 32) check_ranges_and_codes(l, in.data());
    if (!add) std::memset(out, 0, 4 * static_cast<size_t>(n));
    if (l.bits == 32) {
      const auto* values = reinterpret_cast<const float*>(in.data() + l.values);
      if (add)
        for (int64_t j = 0; j < k; ++j) out[wire::topk_index(words, l, j)] += values[j];
      else
        for (int64_t j = 0; j < k; ++j) out[wire::topk_index(words, l, j)] = values[j];
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
        const uint32_t i = wire::topk_index(words, l, j);
        out[i] = add ? out[i] + y : y;
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
    const uint32_t format = h.a & 0xffu, shift = (h.a >> 8) & 0xffu, keep = (h.a >> 16) + 1u;
    const bool exact = format == wire::kTopkExactValues;
    if (!exact && !wire::topk_known_value_bits(format))
      wire::bad_payload(method(),
                        fmt::format("value format (field a) {} is not 0 (f32 values) or 2, 4, 8 bits", format));
    if (shift > wire::kTopkMaxChunkShift)
      wire::bad_payload(method(), fmt::format("chunks of 2^{} values (field a bits 8..15); at most 2^{}", shift,
                                              wire::kTopkMaxChunkShift));
    if (shift == 0 && (h.a >> 16) != 0)
      wire::bad_payload(method(), "field a bits 16..31 must be zero with a global selection (no chunks)");
    if (exact && h.c != 0) wire::bad_payload(method(), "field c must be zero with f32 values");
    if (!exact && h.c == 0) wire::bad_payload(method(), "a range of 0 entries (field c) with quantized values");
    if (h.b > h.n) wire::bad_payload(method(), fmt::format("{} entries for {} values", h.b, h.n));
    if (shift != 0) check_chunks(h, static_cast<int>(shift), keep);
    const wire::TopkLayout l = layout_of(h);
    if (h.total != wire::pad8(l.end))
      wire::bad_payload(method(),
                        fmt::format("length field {} bytes, {} entries take {}", h.total, l.k, wire::pad8(l.end)));
    return l;
  }

  // Chunks of 2^shift values, `keep` entries each: the count of entries (field b) must leave the last
  // chunk 1 to its length (`keep` when it is whole).
  void check_chunks(const WireHeader& h, int shift, uint32_t keep) const {
    const int64_t size = int64_t{1} << shift;
    if (keep > size)
      wire::bad_payload(method(), fmt::format("{} entries per chunk (field a) for chunks of {} values", keep, size));
    const wire::TopkChunks ch = wire::topk_chunks(static_cast<int64_t>(h.n), shift, keep, 0);
    if (ch.count == 0) return;  // n = 0: b = 0 (checked, b <= n)
    const int64_t last = static_cast<int64_t>(h.b) - (ch.count - 1) * static_cast<int64_t>(keep);
    if (last < 1 || last > ch.last_size || (ch.last_size == size && last != keep))
      wire::bad_payload(method(),
                        fmt::format("{} entries (field b) do not split into {} chunks of {} entries, the last one "
                                    "of {} values keeping 1 to {}",
                                    h.b, ch.count, keep, ch.last_size, ch.last_size == size ? keep : ch.last_size));
  }

  void check_indices(const wire::TopkLayout& l, const uint32_t* words, int64_t n) const {
    if (l.index_bits == 32) {
      for (int64_t j = 0; j < l.k; ++j) {
        if (words[j] >= n)
          wire::bad_payload(method(), fmt::format("index {} of entry {} is outside [0, {})", words[j], j, n));
        if (j > 0 && words[j] <= words[j - 1])
          wire::bad_payload(method(),
                            fmt::format("indices must increase: entry {} is {} after {}", j, words[j], words[j - 1]));
      }
      return;
    }
    const wire::TopkChunks& ch = l.chunks;
    for (int64_t c = 0; c < ch.count; ++c) {
      const int64_t first = c * ch.keep, last = first + ch.keep_of(c), len = ch.size_of(c);
      for (int64_t j = first; j < last; ++j) {
        const uint32_t at = wire::topk_index_field(words, j, l.index_bits);
        if (at >= len)
          wire::bad_payload(method(),
                            fmt::format("local index {} of entry {} is outside chunk {}'s [0, {})", at, j, c, len));
        const uint32_t before = j > first ? wire::topk_index_field(words, j - 1, l.index_bits) : 0u;
        if (j > first && at <= before)
          wire::bad_payload(
              method(), fmt::format("indices must increase: entry {} is {} after {} in chunk {}", j, at, before, c));
      }
    }
    const auto used = static_cast<uint32_t>(static_cast<uint64_t>(l.k) * static_cast<uint64_t>(l.index_bits) % 32);
    if (used != 0 && (words[l.k * l.index_bits / 32] >> used) != 0)
      wire::bad_payload(method(), "bits after the last index must be zero");
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
  int64_t chunk_;  // values per chunk of the chunk-local selection, 0 = global selection
};

// The entry of `index` in the payload's sorted indices (chunked: its chunk's), or -1.
int64_t entry_of(std::span<const uint8_t> payload, const wire::TopkLayout& l, size_t index) {
  const auto* words = reinterpret_cast<const uint32_t*>(payload.data() + wire::kHeaderBytes);
  int64_t lo = 0, hi = l.k;
  if (l.index_bits != 32) {
    const auto c = static_cast<int64_t>(index >> l.chunks.shift);
    if (c >= l.chunks.count) return -1;
    lo = c * l.chunks.keep;
    hi = lo + l.chunks.keep_of(c);
  }
  const int64_t end = hi;
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (wire::topk_index(words, l, mid) < index)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < end && wire::topk_index(words, l, lo) == index ? lo : -1;
}

// A dropped value decodes to 0; a sent one exactly (32 bits) or with v's sign to a magnitude within
// [lo, hi] of its range and within half a grid step of |v|, plus the float rounding of the level's
// decision and value (2^-20 hi) and, where the step flushes to zero (below FLT_MIN), hi - lo < top
// FLT_MIN.
bool topk_within_bound(const QuantSpec&, const RoundTripValue& v) {
  const WireHeader h = wire::read_header(v.payload.data());
  const wire::TopkLayout l = layout_of(h);
  if (l.bits == 32) return v.y == 0 || v.y == v.x;
  const int64_t j = entry_of(v.payload, l, v.index);
  if (j < 0) return v.y == 0;
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
                 .why_not = "applies to topk value_bits: 2, 4 or 8 only (32-bit values are sent exactly)"},
                {.key = "chunk", .fallback = 0, .min = 0, .max = 65536, .shown_at_default = false}};
    m.check = [](const QuantSpec& s) -> std::optional<std::pair<std::string, std::string>> {
      const int64_t chunk = s.integer("chunk");
      if (chunk != 0 && (chunk < 2 || !std::has_single_bit(static_cast<uint64_t>(chunk))))
        return std::pair<std::string, std::string>{
            "chunk", fmt::format("must be 0 (global selection) or a power of two from 2 to 65536, got {}", chunk)};
      return std::nullopt;
    };
    m.error_feedback = true;
    m.algorithm = "allgather";
    m.within_bound = topk_within_bound;
    m.variants = {"topk", "topk:value_bits=2:fraction=0.02",
                  // Ranges of 7 entries: neither a whole number of code bytes nor of warps.
                  "topk:value_bits=4:value_block=7",
                  // One range for the whole payload.
                  "topk:value_bits=8:value_block=0",
                  // SparseLoCo's chunked selection: 12-bit local indices, 2-bit values.
                  "topk:chunk=4096:value_bits=2",
                  // Chunks of 64 and exact values: most spans end in a short chunk.
                  "topk:chunk=64:fraction=0.1",
                  // Chunks of 2, one entry each (1-bit indices): an odd span's last chunk is 1 value.
                  "topk:chunk=2:fraction=0.5:value_bits=8"};
    m.make = [](const QuantSpec& spec) -> std::unique_ptr<Quantizer> { return std::make_unique<TopkQuantizer>(spec); };
    return m;
  }();
  return info;
}

}  // namespace qtrain::quant_detail
