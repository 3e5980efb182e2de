// randomk: random-k sparsification with error feedback (the "Random-k" of Stich et al., NeurIPS 2018,
// and GRACE). k = max(1, round(fraction * n)) positions are drawn from the random stream every rank
// shares (QuantState::shared_rng_key: seed, step and tensor, no rank), so every rank picks the same
// ones and no index crosses the wire: the payload is the header (k and the key) and the k values.
// Position j is uniform within stratum j of k equal strata (wire::randomk_index): each value is sent
// with probability about k / n, the positions are distinct and increasing, and any of them is
// computed on its own (no selection pass). With error feedback the sent positions leave e = 0 and
// the others e = v. Payloads of one tensor and step sum elementwise across ranks (summable_body): the
// exchange all-reduces the k values natively and decodes once.
#include <cstring>

#include "quant/method.h"
#include "quant/numerics.h"
#include "quant/randomk_cuda.h"
#include "quant/randomk_wire.h"
#include "quant/wire.h"

namespace qtrain::quant_detail {
namespace {

class RandomkQuantizer final : public Quantizer {
 public:
  explicit RandomkQuantizer(const QuantSpec& spec) : Quantizer(spec), fraction_(spec.number("fraction")) {}

 protected:
  size_t max_body_bytes(int64_t n, int64_t) const override {
    return wire::randomk_body_end(wire::count_for_proportion(fraction_, n));
  }

  WireHeader header(int64_t n, int64_t k, PhiloxKey key) const {
    WireHeader h;
    h.method = QuantMethod::randomk;
    h.a = static_cast<uint32_t>(k);
    h.b = key.k0;
    h.c = key.k1;
    h.n = static_cast<uint64_t>(n);
    h.total = wire::pad8(wire::randomk_body_end(k));
    return h;
  }

  size_t encode_cpu(const EncodeArgs& a) const override {
    const int64_t k = wire::count_for_proportion(fraction_, a.n);
    wire::write_header(a.out, header(a.n, k, a.shared_key));
    // Every value is checked, sent or not: NaN or Inf would otherwise wait in the residual.
    uint32_t bad = 0;
    if (a.residual) {
      for (int64_t i = 0; i < a.n; ++i) {
        a.residual[i] = a.in[i] + a.residual[i];
        bad |= abs_bits(a.residual[i]) >= kNonFinite ? 1u : 0u;
      }
    } else {
      for (int64_t i = 0; i < a.n; ++i) bad |= abs_bits(a.in[i]) >= kNonFinite ? 1u : 0u;
    }
    if (bad) throw NonFiniteInputError(fmt::format("randomk encode: the input of {} values holds NaN or Inf", a.n));
    auto* values = reinterpret_cast<float*>(a.out + wire::kHeaderBytes);
    for (int64_t j = 0; j < k; ++j) {
      const int64_t i = wire::randomk_index(a.shared_key, j, a.n, k);
      if (a.residual) {
        values[j] = a.residual[i];
        a.residual[i] = 0.0f;
      } else {
        values[j] = a.in[i];
      }
    }
    return wire::randomk_body_end(k);
  }

#if QTRAIN_QUANT_CUDA
  size_t encode_cuda(Context& ctx, const EncodeArgs& a) const override {
    const int64_t k = wire::count_for_proportion(fraction_, a.n);
    randomk_encode_cuda(ctx, a, k, header(a.n, k, a.shared_key));
    return wire::randomk_body_end(k);
  }
#endif

  void decode_cpu(const WireHeader& h, std::span<const uint8_t> in, float* out, bool add) const override {
    const int64_t k = check_body(h);
    const auto n = static_cast<int64_t>(h.n);
    const PhiloxKey key{h.b, h.c};
    const auto* values = reinterpret_cast<const float*>(in.data() + wire::kHeaderBytes);
    if (!add) std::memset(out, 0, 4 * static_cast<size_t>(n));
    for (int64_t j = 0; j < k; ++j) {
      const int64_t i = wire::randomk_index(key, j, n, k);
      out[i] = add ? out[i] + values[j] : values[j];
    }
  }

#if QTRAIN_QUANT_CUDA
  // The kernel reads the key from the payload on the device (b and c are any key's words: nothing to
  // check), so that a receiver that predicts the rest of the header reads nothing back.
  void decode_cuda(Context& ctx, const WireHeader& h, std::span<const uint8_t> in, float* out,
                   bool add) const override {
    const int64_t k = check_body(h);
    randomk_decode_cuda(ctx, in.data(), static_cast<int64_t>(h.n), k, out, add);
  }
#endif

  // k and the length follow from n; the key is the data's (the shared stream of the step and tensor).
  std::optional<WireHeader> shape_header(int64_t n, int64_t) const override {
    return header(n, wire::count_for_proportion(fraction_, n), PhiloxKey{0, 0});
  }
  bool header_b_from_data() const override { return true; }
  bool header_c_from_data() const override { return true; }

 private:
  // k values for n: 1 <= k <= n (none for n = 0), and the length they take. Any key is a valid key.
  int64_t check_body(const WireHeader& h) const {
    const auto k = static_cast<int64_t>(h.a);
    const auto n = static_cast<int64_t>(h.n);
    if (k > n || (n > 0 && k == 0))
      wire::bad_payload(method(), fmt::format("{} values sent of {} (1 <= k <= n)", k, n));
    const size_t want = wire::pad8(wire::randomk_body_end(k));
    if (h.total != want)
      wire::bad_payload(method(), fmt::format("length field {} bytes, {} values take {}", h.total, k, want));
    return k;
  }

  double fraction_;
};

}  // namespace

const QuantMethodInfo& randomk_method_info() {
  static const QuantMethodInfo info = [] {
    QuantMethodInfo m;
    m.id = QuantMethod::randomk;
    m.name = "randomk";
    m.params = {{.key = "fraction",
                 .kind = QuantParamDef::Kind::real,
                 .fallback = 0.01,
                 .min = 0,
                 .max = 1,
                 .min_exclusive = true}};
    m.error_feedback = true;
    m.algorithm = "allreduce_compact";
    m.summable_body = true;
    // A value is dropped (0) or sent exactly.
    m.within_bound = [](const QuantSpec&, const RoundTripValue& v) { return v.y == 0 || v.y == v.x; };
    m.variants = {"randomk", "randomk:fraction=0.3"};
    m.make = [](const QuantSpec& spec) -> std::unique_ptr<Quantizer> {
      return std::make_unique<RandomkQuantizer>(spec);
    };
    return m;
  }();
  return info;
}

}  // namespace qtrain::quant_detail
