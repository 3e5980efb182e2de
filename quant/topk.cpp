// topk: gradient dropping (Aji & Heafield 2017): keep the k = max(1, round(fraction * n)) values of
// largest magnitude as (index, value) pairs, exactly k of them (ties at the threshold go to the lowest
// indices), with error feedback: sent positions leave e = 0, dropped ones e = v. The threshold comes
// from an exact radix selection (quant/select.h); the payload lists indices in increasing order.
#include <cstring>

#include "quant/method.h"
#include "quant/numerics.h"
#include "quant/select.h"
#include "quant/topk_cuda.h"
#include "quant/topk_wire.h"
#include "quant/wire.h"

namespace qtrain::quant_detail {
namespace {

template <bool Ef>
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
      if (Ef) residual[i] = 0.0f;
    } else if (Ef) {
      residual[i] = v;
    }
  }
  return j;
}

class TopkQuantizer final : public Quantizer {
 public:
  explicit TopkQuantizer(const QuantSpec& spec) : Quantizer(spec), fraction_(spec.number("fraction")) {}

 protected:
  size_t max_body_bytes(int64_t n, int64_t) const override {
    return wire::topk_body_end(wire::count_for_proportion(fraction_, n));
  }

  WireHeader header(int64_t n, int64_t k) const {
    WireHeader h;
    h.method = QuantMethod::topk;
    h.b = static_cast<uint32_t>(k);
    h.n = static_cast<uint64_t>(n);
    h.total = wire::pad8(wire::topk_body_end(k));
    return h;
  }

  size_t encode_cpu(const EncodeArgs& a) const override {
    const int64_t k = wire::count_for_proportion(fraction_, a.n);
    wire::write_header(a.out, header(a.n, k));
    if (k == 0) return wire::topk_body_end(0);
    auto* candidates = static_cast<uint32_t*>(a.state->workspace(Device::cpu(), 4 * static_cast<size_t>(a.n)));
    const float* in = a.in;
    const float* res = a.residual;
    const Selection sel =
        res ? select_kth_largest_abs([in, res](int64_t i) { return in[i] + res[i]; }, a.n, k, candidates)
            : select_kth_largest_abs([in](int64_t i) { return in[i]; }, a.n, k, candidates);
    if (sel.non_finite)
      throw NonFiniteInputError(fmt::format("topk encode: the input of {} values holds NaN or Inf", a.n));
    auto* indices = reinterpret_cast<uint32_t*>(a.out + wire::kHeaderBytes);
    auto* values = reinterpret_cast<float*>(a.out + wire::kHeaderBytes + 4 * static_cast<size_t>(k));
    const int64_t sent = a.residual ? compact<true>(a.in, a.residual, a.n, sel, indices, values)
                                    : compact<false>(a.in, nullptr, a.n, sel, indices, values);
    QT_CHECK_EQ(sent, k, "topk: selected values");
    return wire::topk_body_end(k);
  }

#if QTRAIN_QUANT_CUDA
  std::optional<WireHeader> shape_header(int64_t n, int64_t) const override {
    return header(n, wire::count_for_proportion(fraction_, n));
  }

  size_t encode_cuda(Context& ctx, const EncodeArgs& a) const override {
    const int64_t k = wire::count_for_proportion(fraction_, a.n);
    topk_encode_cuda(ctx, a, k, header(a.n, k));
    return wire::topk_body_end(k);
  }
#endif

  void decode_cpu(const WireHeader& h, std::span<const uint8_t> in, float* out, bool add) const override {
    const int64_t k = check_body(h);
    const auto* indices = reinterpret_cast<const uint32_t*>(in.data() + wire::kHeaderBytes);
    const auto* values = reinterpret_cast<const float*>(in.data() + wire::kHeaderBytes + 4 * static_cast<size_t>(k));
    const auto n = static_cast<int64_t>(h.n);
    // Indices must increase strictly and stay below n: checked in full before anything is written.
    for (int64_t j = 0; j < k; ++j) {
      if (indices[j] >= n)
        wire::bad_payload(method(), fmt::format("index {} of entry {} is outside [0, {})", indices[j], j, n));
      if (j > 0 && indices[j] <= indices[j - 1])
        wire::bad_payload(method(),
                          fmt::format("indices must increase: entry {} is {} after {}", j, indices[j], indices[j - 1]));
    }
    if (add) {
      for (int64_t j = 0; j < k; ++j) out[indices[j]] += values[j];
    } else {
      std::memset(out, 0, 4 * static_cast<size_t>(n));
      for (int64_t j = 0; j < k; ++j) out[indices[j]] = values[j];
    }
  }

#if QTRAIN_QUANT_CUDA
  void decode_cuda(Context& ctx, const WireHeader& h, std::span<const uint8_t> in, float* out,
                   bool add) const override {
    const int64_t k = check_body(h);
    topk_decode_cuda(ctx, in.data(), static_cast<int64_t>(h.n), k, out, add);
  }
#endif

 private:
  int64_t check_body(const WireHeader& h) const {
    if (h.a != 0 || h.c != 0) wire::bad_payload(method(), "reserved fields must be zero");
    if (h.b > h.n) wire::bad_payload(method(), fmt::format("{} entries for {} values", h.b, h.n));
    const auto k = static_cast<int64_t>(h.b);
    if (h.total != wire::pad8(wire::topk_body_end(k)))
      wire::bad_payload(method(), fmt::format("length field {} bytes, {} entries take {}", h.total, k,
                                              wire::pad8(wire::topk_body_end(k))));
    return k;
  }

  double fraction_;
};

}  // namespace

const QuantMethodInfo& topk_method_info() {
  static const QuantMethodInfo info = [] {
    QuantMethodInfo m;
    m.id = QuantMethod::topk;
    m.name = "topk";
    m.params = {{.key = "fraction",
                 .kind = QuantParamDef::Kind::real,
                 .fallback = 0.01,
                 .min = 0,
                 .max = 1,
                 .min_exclusive = true}};
    m.error_feedback = true;
    m.algorithm = "allgather";
    // A value is dropped (0) or sent exactly.
    m.within_bound = [](const QuantSpec&, const RoundTripValue& v) { return v.y == 0 || v.y == v.x; };
    m.variants = {"topk"};
    m.make = [](const QuantSpec& spec) -> std::unique_ptr<Quantizer> { return std::make_unique<TopkQuantizer>(spec); };
    return m;
  }();
  return info;
}

}  // namespace qtrain::quant_detail
