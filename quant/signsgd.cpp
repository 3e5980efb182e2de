// signsgd: signSGD with majority vote (Bernstein et al., ICML 2018 and ICLR 2019), and signum, its
// momentum variant. Each value sends one bit, sign(v) (bit 1 for v >= 0), and decodes to +1 or -1:
// no scale, the learning rate sets the step. With momentum beta > 0 (signum) each worker keeps
// m = beta m + (1 - beta) g in its QuantState (checkpointed with it) and sends sign(m). The exchange
// finishes the sum of the decoded signs with the vote (QuantCombine::vote): sign(sum), +1 on ties;
// under reduce-scatter + allgather the owner re-encodes the vote without momentum (owner_spec), so
// one bit goes up per value and the vote's bit comes back. The input is checked for NaN and Inf
// before the momentum is touched.
#include "quant/cpu_memory.h"
#include "quant/method.h"
#include "quant/numerics.h"
#include "quant/sign_words.h"
#include "quant/signsgd_cuda.h"
#include "quant/wire.h"

namespace qtrain::quant_detail {
namespace {

template <bool Momentum>
void pack_signs(const float* __restrict g, float* __restrict m, int64_t n, float beta, float one_minus_beta,
                uint32_t* __restrict words) {
  for (int64_t w = 0; 32 * w < n; ++w) {
    const int64_t end = 32 * w + 32 < n ? 32 * w + 32 : n;
    uint32_t word = 0;
    for (int64_t i = 32 * w; i < end; ++i) {
      float v = g[i];
      if (Momentum) {
        m[i] = signum_momentum(m[i], v, beta, one_minus_beta);
        v = m[i];
      }
      word |= static_cast<uint32_t>(!(v < 0.0f)) << (i - 32 * w);
    }
    words[w] = word;
  }
}

class SignsgdQuantizer final : public Quantizer {
 public:
  explicit SignsgdQuantizer(const QuantSpec& spec)
      : Quantizer(spec), beta_(static_cast<float>(spec.number("momentum"))), one_minus_beta_(1.0f - beta_) {}

 protected:
  bool keeps_momentum() const override { return beta_ != 0.0f; }

  size_t max_body_bytes(int64_t n, int64_t) const override { return wire::sign_body_end(n); }

  WireHeader header(int64_t n) const {
    WireHeader h;
    h.method = QuantMethod::signsgd;
    h.n = static_cast<uint64_t>(n);
    h.total = wire::pad8(wire::sign_body_end(n));
    return h;
  }

  size_t encode_cpu(const EncodeArgs& a) const override {
    uint32_t bad = 0;
    for (int64_t i = 0; i < a.n; ++i) bad |= abs_bits(a.in[i]) >= kNonFinite ? 1u : 0u;
    if (bad) throw NonFiniteInputError(fmt::format("signsgd encode: the input of {} values holds NaN or Inf", a.n));
    wire::write_header(a.out, header(a.n));
    auto* words = reinterpret_cast<uint32_t*>(a.out + wire::kHeaderBytes);
    if (a.momentum)
      pack_signs<true>(a.in, a.momentum, a.n, beta_, one_minus_beta_, words);
    else
      pack_signs<false>(a.in, nullptr, a.n, beta_, one_minus_beta_, words);
    return wire::sign_body_end(a.n);
  }

#if QTRAIN_QUANT_CUDA
  std::optional<WireHeader> shape_header(int64_t n, int64_t) const override { return header(n); }

  size_t encode_cuda(Context& ctx, const EncodeArgs& a) const override {
    signsgd_encode_cuda(ctx, a, beta_, one_minus_beta_, header(a.n));
    return wire::sign_body_end(a.n);
  }
#endif

  void decode_cpu(const WireHeader& h, std::span<const uint8_t> in, float* out, bool add) const override {
    check_body(h);
    const auto* words = reinterpret_cast<const uint32_t*>(in.data() + wire::kHeaderBytes);
    decode_tiled(out, static_cast<int64_t>(h.n), add, [&](int64_t b, int64_t e, float* dst) {
      if (add)
        unpack_signs<true>(words, b, e, 1.0f, -1.0f, dst);
      else
        unpack_signs<false>(words, b, e, 1.0f, -1.0f, dst);
    });
  }

#if QTRAIN_QUANT_CUDA
  void decode_cuda(Context& ctx, const WireHeader& h, std::span<const uint8_t> in, float* out,
                   bool add) const override {
    check_body(h);
    sign_decode_cuda(ctx, in.data() + wire::kHeaderBytes, static_cast<int64_t>(h.n), 1.0f, -1.0f, out, add);
  }
#endif

 private:
  void check_body(const WireHeader& h) const {
    if (h.a != 0 || h.b != 0 || h.c != 0) wire::bad_payload(method(), "reserved fields must be zero");
    const size_t want = wire::pad8(wire::sign_body_end(static_cast<int64_t>(h.n)));
    if (h.total != want)
      wire::bad_payload(method(), fmt::format("length field {} bytes, the layout takes {}", h.total, want));
  }

  float beta_, one_minus_beta_;
};

}  // namespace

const QuantMethodInfo& signsgd_method_info() {
  static const QuantMethodInfo info = [] {
    QuantMethodInfo m;
    m.id = QuantMethod::signsgd;
    m.name = "signsgd";
    // 0: signSGD; 0.9: signum (Bernstein et al. 2018's setting).
    m.params = {{.key = "momentum", .kind = QuantParamDef::Kind::real, .fallback = 0, .min = 0, .max = 1}};
    m.check = [](const QuantSpec& s) -> std::optional<std::pair<std::string, std::string>> {
      if (s.number("momentum") >= 1)
        return std::pair{std::string("momentum"), std::string("must be below 1 (1 never lets a gradient in)")};
      return std::nullopt;
    };
    // The sign is the whole message; efsign is the method that carries what it loses.
    m.error_feedback_allowed = false;
    m.no_error_feedback_because = "sends the sign alone (efsign is the sign with error feedback)";
    m.algorithm = "reduce_scatter_allgather";
    m.combine = QuantCombine::vote;
    m.owner_spec = [](const QuantSpec& s) {
      QuantSpec owner = s;
      owner.set("momentum", 0.0);
      return owner;
    };
    // +-1 with x's sign (+1 for x = 0); with momentum, the first encode's m = (1 - beta) x has x's sign.
    m.within_bound = [](const QuantSpec&, const RoundTripValue& v) {
      return std::fabs(v.y) == 1.0 && (v.x == 0 || (v.y < 0) == (v.x < 0));
    };
    m.variants = {"signsgd", "signsgd:momentum=0.9"};
    m.make = [](const QuantSpec& spec) -> std::unique_ptr<Quantizer> {
      return std::make_unique<SignsgdQuantizer>(spec);
    };
    return m;
  }();
  return info;
}

}  // namespace qtrain::quant_detail
