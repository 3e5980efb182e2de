// codebook: quantile binning with a table of bin means, the int8 pseudo-gradient quantization of
// INTELLECT-1's int8 all-reduce (Prime Intellect, arXiv 2412.01152; hivemind's Quantile8BitQuantization;
// prime's own ring bins uniformly within +-3 sigma instead, docs/quantizers.md compares them).
// The span's values go into B = 2^bits bins (256 by default, 16 with bits 4) between the B-quantiles
// of the span (spans of up to `sample` values) or of `sample` values drawn from the span's own random
// stream; each value sends its bin index, and the payload carries the table of the B bin means, so
// decode is a table lookup. The bin decisions and the table arithmetic are quant/codebook_bins.h's,
// shared with the kernels: integer arithmetic on float bits, so the CPU and CUDA bytes are identical.
// Encoding is a max pass (M, and the NaN check), the pool of keys and its sort, one binning pass (codes
// and the fixed-point bin sums), the table, and with error feedback a residual pass.
#include <algorithm>
#include <cstring>

#include "framework/core/philox_batch.h"
#include "quant/codebook_bins.h"
#include "quant/codebook_cuda.h"
#include "quant/codebook_wire.h"
#include "quant/cpu_loops.h"
#include "quant/cpu_memory.h"
#include "quant/method.h"
#include "quant/numerics.h"
#include "quant/wire.h"

namespace qtrain::quant_detail {
namespace {

constexpr int kMaxBins = 256;

template <bool Ef>
struct Values {
  const float* g;
  const float* e;
  float operator()(int64_t i) const { return Ef ? g[i] + e[i] : g[i]; }
};

// The pool the boundaries come from: the whole span when it has at most `sample` values, else `sample`
// values drawn from it.
int64_t pool_size(int64_t n, int64_t sample) { return n <= sample ? n : sample; }

constexpr uint32_t kPrefixes = 1u << 16;

// The CPU workspace: the pool's keys, a second buffer of keys (the sort's scratch, and the Philox words
// of a sample before it), the fast path's prefix table.
size_t workspace_bytes(int64_t n, int64_t sample) {
  const auto m = static_cast<size_t>(pool_size(n, sample));
  return 4 * m + 16 * ((m + 3) / 4) + 2 * kPrefixes;
}

// Sorts keys[0..m) ascending (any sort gives the same order of keys; the kernels sort with a bitonic
// network): a least-significant-digit radix sort in four passes of 8 bits through `scratch` (m words)
// for pools beyond a few thousand keys, where it is several times faster than std::sort.
void sort_keys(uint32_t* keys, uint32_t* scratch, int64_t m) {
  if (m < 4096) {
    std::sort(keys, keys + m);
    return;
  }
  uint32_t* from = keys;
  uint32_t* to = scratch;
  for (int shift = 0; shift < 32; shift += 8) {
    int64_t start[256] = {};
    for (int64_t i = 0; i < m; ++i) ++start[(from[i] >> shift) & 0xffu];
    int64_t sum = 0;
    for (int64_t& c : start) {
      const int64_t count = c;
      c = sum;
      sum += count;
    }
    for (int64_t i = 0; i < m; ++i) to[start[(from[i] >> shift) & 0xffu]++] = from[i];
    std::swap(from, to);
  }  // four passes: the keys are back in `keys`
}

// Fills pool[0..m) with the keys of the span (m = n) or of sample j at codebook_sample_index(word j of
// the Philox blocks (j / 4, 0, 0, "CBOK") under the encode's key), and sorts them.
template <bool Ef>
void sorted_pool(const Values<Ef>& v, int64_t n, int64_t m, PhiloxKey key, uint32_t* pool, uint32_t* words) {
  if (m == n) {
    for (int64_t i = 0; i < n; ++i) pool[i] = codebook_key(float_bits(v(i)));
  } else {
    philox_blocks(key, 0, kStage1, kTagCodebook, (m + 3) / 4, words);
    for (int64_t j = 0; j < m; ++j) pool[j] = codebook_key(float_bits(v(codebook_sample_index(words[j], n))));
  }
  sort_keys(pool, words, m);
}

// One pass over the span: each value's bin (bin_of(key), the count of boundaries at or below it,
// then the tie rule) into `codes` (packed) and its fixed-point value into its bin's sum. Four
// interleaved copies of the sums, so that neighbouring values of one bin do not wait for each other's
// additions; integer sums, so the copies fold to the same totals in any order.
// Tied: whether two boundaries are equal (else the tie rule cannot apply and is skipped).
template <int Bits, bool Tied, bool Ef, typename BinOf>
void bin_span(const Values<Ef>& v, int64_t n, BinOf bin_of, const uint32_t* t, const uint8_t* run, int shift,
              uint8_t* codes, int64_t* sums, int64_t* counts) {
  constexpr int kBins = 1 << Bits;
  int64_t sum4[4][kBins] = {}, count4[4][kBins] = {};
  auto code = [&](int64_t i, int lane) {
    const uint32_t bits = float_bits(v(i));
    const uint32_t key = codebook_key(bits);
    const uint32_t b = Tied ? codebook_tied_bin(t, run, bin_of(key), key) : bin_of(key);
    sum4[lane][b] += codebook_fixed(bits, shift);
    ++count4[lane][b];
    return b;
  };
  if constexpr (Bits == 8) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
      for (int lane = 0; lane < 4; ++lane) codes[i + lane] = static_cast<uint8_t>(code(i + lane, lane));
    for (; i < n; ++i) codes[i] = static_cast<uint8_t>(code(i, 0));
  } else {
    const int64_t half = (n + 1) / 2;
    for (int64_t j = 0; j < half; ++j) {
      uint32_t byte = code(j, static_cast<int>(j & 1));
      if (j + half < n) byte |= code(j + half, 2 + static_cast<int>(j & 1)) << 4;
      codes[j] = static_cast<uint8_t>(byte);
    }
  }
  for (int b = 0; b < kBins; ++b) {
    sums[b] = sum4[0][b] + sum4[1][b] + sum4[2][b] + sum4[3][b];
    counts[b] = count4[0][b] + count4[1][b] + count4[2][b] + count4[3][b];
  }
}

// The fast path's prefix table: entry h, for the keys whose top 16 bits are h, is the number of
// boundaries at or below key h << 16, plus kCrowded when more than two boundaries lie above that key
// within the prefix. The count of a key of prefix h is then the entry plus at most two steps over the
// boundaries that follow it (sentinels past the last one end them), without branches; a crowded
// prefix takes the binary search. The prefix is the sign, the exponent and 7 mantissa bits: a relative
// width of 2^-7, narrower than the bins of gradient-like data except where values crowd at one point.
constexpr uint16_t kCrowded = 0x8000u;
void build_prefix_table(const uint32_t* t, int bins, uint16_t* table) {
  int below = 0;  // boundaries <= h << 16
  for (uint32_t h = 0; h < kPrefixes; ++h) {
    const uint32_t first = h << 16;
    while (below < bins - 1 && t[below] <= first) ++below;
    int inside = below;
    while (inside < bins - 1 && (t[inside] >> 16) == h) ++inside;
    table[h] = static_cast<uint16_t>(below | (inside - below > 2 ? kCrowded : 0u));
  }
}

template <int Bits, bool Tied, bool Ef>
void bin_values(CpuPath path, const Values<Ef>& v, int64_t n, const uint32_t* t, const uint8_t* run, int shift,
                uint16_t* table, uint8_t* codes, int64_t* sums, int64_t* counts) {
  if (path == CpuPath::reference) {
    bin_span<Bits, Tied>(
        v, n, [t](uint32_t key) { return codebook_bin(t, Bits, key); }, t, run, shift, codes, sums, counts);
    return;
  }
  build_prefix_table(t, 1 << Bits, table);
  auto bin_of = [t, table](uint32_t key) {
    const uint32_t entry = table[key >> 16];
    if (entry & kCrowded) [[unlikely]]
      return codebook_bin(t, Bits, key);
    uint32_t b = entry;
    b += t[b] <= key ? 1u : 0u;
    b += t[b] <= key ? 1u : 0u;
    return b;
  };
  bin_span<Bits, Tied>(v, n, bin_of, t, run, shift, codes, sums, counts);
}

template <typename F>
void with_bits(int bits, F&& f) {
  if (bits == 4)
    f(std::integral_constant<int, 4>{});
  else
    f(std::integral_constant<int, 8>{});
}

}  // namespace

void codebook_bin_values(CpuPath path, int bits, const float* in, const float* residual, int64_t n, const uint32_t* t,
                         const uint8_t* run, int shift, uint16_t* prefix_table, uint8_t* codes, int64_t* sums,
                         int64_t* counts) {
  bool tied = false;
  for (int j = 1; j + 1 < (1 << bits); ++j) tied |= t[j] == t[j - 1];
  with_bits(bits, [&](auto b) {
    auto with_ties = [&](auto ties) {
      if (residual)
        bin_values<b(), ties()>(path, Values<true>{in, residual}, n, t, run, shift, prefix_table, codes, sums, counts);
      else
        bin_values<b(), ties()>(path, Values<false>{in, nullptr}, n, t, run, shift, prefix_table, codes, sums, counts);
    };
    if (tied)
      with_ties(std::true_type{});
    else
      with_ties(std::false_type{});
  });
}

namespace {

// The code of value i (4 bits: the low nibbles hold values [0, half), the high ones the rest).
template <int Bits>
uint32_t code_at(const uint8_t* codes, int64_t half, int64_t i) {
  if constexpr (Bits == 8) return codes[i];
  return i < half ? codes[i] & 0xfu : static_cast<uint32_t>(codes[i - half] >> 4);
}

// e = v - table[code]: what the payload leaves out, with error feedback.
template <int Bits>
void update_residual(const float* __restrict g, float* __restrict e, const wire::CodebookLayout& l,
                     const uint8_t* __restrict codes, const float* __restrict table) {
  for (int64_t i = 0; i < l.n; ++i) e[i] = (g[i] + e[i]) - table[code_at<Bits>(codes, l.half, i)];
}

// Values [begin, end) into dst[0 .. end - begin): table lookups (added to dst with Add).
template <int Bits, bool Add>
void decode_range(const uint8_t* __restrict codes, const float* __restrict table, int64_t half, int64_t begin,
                  int64_t end, float* __restrict dst) {
  auto put = [dst, begin](int64_t i, float y) { dst[i - begin] = Add ? dst[i - begin] + y : y; };
  if constexpr (Bits == 8) {
    for (int64_t i = begin; i < end; ++i) put(i, table[codes[i]]);
  } else {
    const int64_t split = std::clamp(half, begin, end);
    for (int64_t i = begin; i < split; ++i) put(i, table[codes[i] & 0xfu]);
    for (int64_t i = split; i < end; ++i) put(i, table[codes[i - half] >> 4]);
  }
}

class CodebookQuantizer final : public Quantizer {
 public:
  explicit CodebookQuantizer(const QuantSpec& spec)
      : Quantizer(spec), bits_(static_cast<int>(spec.integer("bits"))), sample_(spec.integer("sample")) {}

 protected:
  size_t max_body_bytes(int64_t n, int64_t) const override { return wire::codebook_layout(n, bits_).body_end; }

  size_t encode_cpu(const EncodeArgs& a) const override {
    const wire::CodebookLayout l = wire::codebook_layout(a.n, bits_);
    wire::write_header(a.out, header(a.n));
    auto* table = reinterpret_cast<float*>(a.out + l.table_offset);
    if (a.n == 0) {
      std::memset(table, 0, 4 * static_cast<size_t>(l.bins));
      return l.body_end;
    }
    const uint32_t max_bits =
        a.residual ? max_abs_bits<true>(a.in, a.residual, a.n) : max_abs_bits<false>(a.in, nullptr, a.n);
    if (max_bits >= kNonFinite)
      throw NonFiniteInputError(fmt::format("codebook encode: the input of {} values holds NaN or Inf", a.n));
    const int64_t m = pool_size(a.n, sample_);
    auto* pool = static_cast<uint32_t*>(a.state->workspace(Device::cpu(), workspace_bytes(a.n, sample_)));
    uint32_t* words = pool + m;
    auto* prefix_table = reinterpret_cast<uint16_t*>(words + 4 * ((m + 3) / 4));
    // The boundaries, then sentinels (above every finite key) for the fast path's steps past the last.
    uint32_t t[kMaxBins + 1];
    uint8_t run[kMaxBins];
    int64_t sums[kMaxBins], counts[kMaxBins];
    const int shift = codebook_shift(max_bits, a.n);
    uint8_t* codes = a.out + l.codes_offset;
    with_bits(bits_, [&](auto bits) {
      if (a.residual)
        sorted_pool(Values<true>{a.in, a.residual}, a.n, m, a.key, pool, words);
      else
        sorted_pool(Values<false>{a.in, nullptr}, a.n, m, a.key, pool, words);
      for (int j = 1; j < l.bins; ++j) t[j - 1] = pool[codebook_boundary_index(j, m, l.bins)];
      t[l.bins - 1] = t[l.bins] = 0xffffffffu;
      for (int b = 0; b < l.bins; ++b) run[b] = codebook_run_start(t, b);
      // The prefix table pays for itself from about 2^14 values.
      const CpuPath path = a.n >= (int64_t{1} << 14) ? CpuPath::fast : CpuPath::reference;
      codebook_bin_values(path, bits(), a.in, a.residual, a.n, t, run, shift, prefix_table, codes, sums, counts);
      for (int b = 0; b < l.bins; ++b)
        table[b] = codebook_entry(sums[b], counts[b], codebook_lo_key(t, b, max_bits),
                                  codebook_hi_key(t, b, l.bins, max_bits), shift);
      if (a.residual) update_residual<bits()>(a.in, a.residual, l, codes, table);
    });
    return l.body_end;
  }

#if QTRAIN_QUANT_CUDA
  std::optional<WireHeader> shape_header(int64_t n, int64_t) const override { return header(n); }

  size_t encode_cuda(Context& ctx, const EncodeArgs& a) const override {
    const wire::CodebookLayout l = wire::codebook_layout(a.n, bits_);
    codebook_encode_cuda(ctx, a, l, pool_size(a.n, sample_), header(a.n));
    return l.body_end;
  }
#endif

  void decode_cpu(const WireHeader& h, std::span<const uint8_t> in, float* out, bool add) const override {
    const wire::CodebookLayout l = check_header_fields(h);
    const auto* table = reinterpret_cast<const float*>(in.data() + l.table_offset);
    const uint8_t* codes = in.data() + l.codes_offset;
    for (int b = 0; b < l.bins; ++b) {
      if (abs_bits(table[b]) >= kNonFinite) wire::bad_payload(method(), fmt::format("table entry {} is not finite", b));
      if (b > 0 && !(table[b - 1] <= table[b]))
        wire::bad_payload(method(),
                          fmt::format("table entries {} and {} decrease ({} > {})", b - 1, b, table[b - 1], table[b]));
    }
    if (l.bits == 4 && l.n % 2 == 1 && (codes[l.half - 1] >> 4) != 0)
      wire::bad_payload(method(), "the unused high nibble of the last code byte is set");
    with_bits(l.bits, [&](auto bits) {
      decode_tiled(out, l.n, add, [&](int64_t b, int64_t e, float* dst) {
        if (add)
          decode_range<bits(), true>(codes, table, l.half, b, e, dst);
        else
          decode_range<bits(), false>(codes, table, l.half, b, e, dst);
      });
    });
  }

#if QTRAIN_QUANT_CUDA
  void decode_cuda(Context& ctx, const WireHeader& h, std::span<const uint8_t> in, float* out,
                   bool add) const override {
    codebook_decode_cuda(ctx, check_header_fields(h), in.data(), out, add);
  }
#endif

 private:
  WireHeader header(int64_t n) const {
    WireHeader h;
    h.method = QuantMethod::codebook;
    h.a = static_cast<uint32_t>(bits_);
    h.n = static_cast<uint64_t>(n);
    h.total = wire::pad8(max_body_bytes(n, 1));
    return h;
  }

  // The header's own fields (the table and the codes are checked where they are read).
  wire::CodebookLayout check_header_fields(const WireHeader& h) const {
    if (h.a != 4 && h.a != 8) wire::bad_payload(method(), fmt::format("bits field {} (4 or 8)", h.a));
    if (h.b != 0 || h.c != 0) wire::bad_payload(method(), "reserved fields must be zero");
    const wire::CodebookLayout l = wire::codebook_layout(static_cast<int64_t>(h.n), static_cast<int>(h.a));
    if (h.total != wire::pad8(l.body_end))
      wire::bad_payload(method(),
                        fmt::format("length field {} bytes, the layout takes {}", h.total, wire::pad8(l.body_end)));
    return l;
  }

  int bits_;
  int64_t sample_;
};

// Value i of the payload: its code and the table entry it names.
struct PayloadValue {
  uint32_t code;
  float entry, below, above;  // table[code], and its neighbours (-+max_abs past the ends)
};

PayloadValue payload_value(const RoundTripValue& v) {
  uint32_t bits = 0;
  uint64_t n = 0;
  std::memcpy(&bits, v.payload.data() + 4, 4);
  std::memcpy(&n, v.payload.data() + 8, 8);
  const wire::CodebookLayout l = wire::codebook_layout(static_cast<int64_t>(n), static_cast<int>(bits));
  const uint8_t* codes = v.payload.data() + l.codes_offset;
  const auto i = static_cast<int64_t>(v.index);
  PayloadValue p{};
  p.code = bits == 8 ? codes[i] : (i < l.half ? codes[i] & 0xfu : static_cast<uint32_t>(codes[i - l.half] >> 4));
  auto entry = [&](int64_t b) {
    float y;
    std::memcpy(&y, v.payload.data() + l.table_offset + 4 * static_cast<size_t>(b), 4);
    return y;
  };
  const auto c = static_cast<int64_t>(p.code);
  p.entry = entry(c);
  p.below = c > 0 ? entry(c - 1) : static_cast<float>(-v.max_abs);
  p.above = c + 1 < l.bins ? entry(c + 1) : static_cast<float>(v.max_abs);
  return p;
}

}  // namespace

const QuantMethodInfo& codebook_method_info() {
  static const QuantMethodInfo info = [] {
    QuantMethodInfo m;
    m.id = QuantMethod::codebook;
    m.name = "codebook";
    m.params = {
        {.key = "bits", .fallback = 8, .choices = {"4", "8"}},
        {.key = "sample", .fallback = 16384, .min = 256, .max = 1 << 24},
    };
    // The paper sends the pseudo-gradient as it is at every outer step; DiLoCo's carried residual is
    // the config's choice.
    m.error_feedback = false;
    // INTELLECT-1's ring re-quantizes each chunk at every hop and its owner re-quantizes the sum: the
    // exchange's reduce-scatter with the owner's re-encoding, then the allgather.
    m.algorithm = "reduce_scatter_allgather";
    // Value x in bin c lies in [t_c, t_(c+1)); the table's entries are clamped into their bins, so x
    // lies between the entries of the neighbouring bins (or -M, +M past the ends), and it decodes to
    // its own bin's entry exactly.
    m.within_bound = [](const QuantSpec&, const RoundTripValue& v) {
      const PayloadValue p = payload_value(v);
      return v.y == static_cast<double>(p.entry) && static_cast<double>(p.below) <= v.x &&
             v.x <= static_cast<double>(p.above);
    };
    // sample 1000: boundaries from a sample already at the tests' sizes (and a pool that is no power of two).
    m.variants = {"codebook", "codebook:bits=4", "codebook:sample=1000"};
    m.make = [](const QuantSpec& spec) -> std::unique_ptr<Quantizer> {
      return std::make_unique<CodebookQuantizer>(spec);
    };
    return m;
  }();
  return info;
}

}  // namespace qtrain::quant_detail
