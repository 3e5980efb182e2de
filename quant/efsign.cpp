// efsign: EF-signSGD (Karimireddy et al., ICML 2019), the scaled sign with error feedback. Over the
// span (v = g + e), scale = ||v||_1 / n; each value sends one bit (v >= 0) and decodes to +scale or
// -scale; e = v - decode. The scale is computed as max * (sum(|v| / max) / n) (for a max below
// FLT_MIN: sum(|v|) / n), the sum in the deterministic order of quant/numerics.h, so that finite
// input never overflows it and the CUDA path gets the same bits.
#include <cfloat>

#include "quant/cpu_memory.h"
#include "quant/det_sum.h"
#include "quant/efsign_cuda.h"
#include "quant/method.h"
#include "quant/numerics.h"
#include "quant/sign_words.h"
#include "quant/wire.h"

namespace qtrain::quant_detail {
namespace {

template <bool Ef>
float l1_scale(const float* g, const float* e, int64_t n, int64_t method_n) {
  uint32_t max_bits = 0;
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t b = abs_bits(Ef ? g[i] + e[i] : g[i]);
    max_bits = b > max_bits ? b : max_bits;
  }
  if (max_bits >= kNonFinite)
    throw NonFiniteInputError(fmt::format("efsign encode: the input of {} values holds NaN or Inf", method_n));
  if (n == 0) return 0.0f;
  const float r = efsign_inverse_max(max_bits);
  const float sum = det_sum_of([&](int64_t i) { return __builtin_fabsf(Ef ? g[i] + e[i] : g[i]) * r; }, n);
  return efsign_scale(max_bits, sum, n);
}

template <bool Ef>
void pack_signs(const float* __restrict g, float* __restrict e, int64_t n, float scale, uint32_t* __restrict words) {
  for (int64_t w = 0; 32 * w < n; ++w) {
    const int64_t end = 32 * w + 32 < n ? 32 * w + 32 : n;
    uint32_t word = 0;
    for (int64_t i = 32 * w; i < end; ++i) {
      const float v = Ef ? g[i] + e[i] : g[i];
      const bool pos = !(v < 0.0f);
      word |= static_cast<uint32_t>(pos) << (i - 32 * w);
      if (Ef) e[i] = v - (pos ? scale : -scale);
    }
    words[w] = word;
  }
}

class EfsignQuantizer final : public Quantizer {
 public:
  explicit EfsignQuantizer(const QuantSpec& spec) : Quantizer(spec) {}

 protected:
  size_t max_body_bytes(int64_t n, int64_t) const override { return wire::sign_body_end(n); }
  // The header but the scale (field b, from the data: the CUDA decoder reads and checks it there).
  std::optional<WireHeader> shape_header(int64_t n, int64_t) const override { return header(n, 0.0f); }
  bool header_b_from_data() const override { return true; }

  WireHeader header(int64_t n, float scale) const {
    WireHeader h;
    h.method = QuantMethod::efsign;
    h.b = float_bits(scale);
    h.n = static_cast<uint64_t>(n);
    h.total = wire::pad8(wire::sign_body_end(n));
    return h;
  }

  size_t encode_cpu(const EncodeArgs& a) const override {
    auto* words = reinterpret_cast<uint32_t*>(a.out + wire::kHeaderBytes);
    if (a.residual) {
      const float scale = l1_scale<true>(a.in, a.residual, a.n, a.n);
      wire::write_header(a.out, header(a.n, scale));
      pack_signs<true>(a.in, a.residual, a.n, scale, words);
    } else {
      const float scale = l1_scale<false>(a.in, nullptr, a.n, a.n);
      wire::write_header(a.out, header(a.n, scale));
      pack_signs<false>(a.in, nullptr, a.n, scale, words);
    }
    return wire::sign_body_end(a.n);
  }

#if QTRAIN_QUANT_CUDA
  size_t encode_cuda(Context& ctx, const EncodeArgs& a) const override {
    efsign_encode_cuda(ctx, a, header(a.n, 0.0f));
    return wire::sign_body_end(a.n);
  }
#endif

  void decode_cpu(const WireHeader& h, std::span<const uint8_t> in, float* out, bool add) const override {
    const float scale = check_body(h);
    const auto* words = reinterpret_cast<const uint32_t*>(in.data() + wire::kHeaderBytes);
    decode_tiled(out, static_cast<int64_t>(h.n), add, [&](int64_t b, int64_t e, float* dst) {
      if (add)
        unpack_signs<true>(words, b, e, scale, -scale, dst);
      else
        unpack_signs<false>(words, b, e, scale, -scale, dst);
    });
  }

#if QTRAIN_QUANT_CUDA
  void decode_cuda(Context& ctx, const WireHeader& h, std::span<const uint8_t> in, float* out,
                   bool add) const override {
    check_body(h);
    sign_decode_cuda(ctx, in.data() + wire::kHeaderBytes, static_cast<int64_t>(h.n), 0.0f, 0.0f, out, add,
                     /*scaled=*/in.data());
  }
#endif

 private:
  float check_body(const WireHeader& h) const {
    if (h.a != 0 || h.c != 0) wire::bad_payload(method(), "reserved fields must be zero");
    // The encoder's scale is a mean of magnitudes: finite and >= 0 (float bits below +Inf's).
    if (h.b >= kNonFinite)
      wire::bad_payload(method(), fmt::format("scale field {:#010x} is not a finite value >= 0", h.b));
    const size_t want = wire::pad8(wire::sign_body_end(static_cast<int64_t>(h.n)));
    if (h.total != want)
      wire::bad_payload(method(), fmt::format("length field {} bytes, the layout takes {}", h.total, want));
    return bits_float(h.b);
  }
};

}  // namespace

const QuantMethodInfo& efsign_method_info() {
  static const QuantMethodInfo info = [] {
    QuantMethodInfo m;
    m.id = QuantMethod::efsign;
    m.name = "efsign";
    m.error_feedback = true;
    m.algorithm = "allgather";
    // |y| is the payload's scale and y has x's sign (+ for x = 0).
    m.within_bound = [](const QuantSpec&, const RoundTripValue& v) {
      float scale;
      std::memcpy(&scale, v.payload.data() + 24, 4);
      return std::fabs(v.y) == scale && (v.x == 0 || (v.y < 0) == (v.x < 0));
    };
    m.variants = {"efsign"};
    m.make = [](const QuantSpec& spec) -> std::unique_ptr<Quantizer> {
      return std::make_unique<EfsignQuantizer>(spec);
    };
    return m;
  }();
  return info;
}

}  // namespace qtrain::quant_detail
