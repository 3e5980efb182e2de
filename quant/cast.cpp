// fp32 (identity), fp16 and bf16 (round to nearest even): the casts. Body: n values of 4 / 2 / 2
// bytes. NaN and Inf pass through (the trainer's NaN guard sees them after decode). With the optional
// error feedback the residual keeps what the rounding lost.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "quant/cast_cuda.h"
#include "quant/cpu_memory.h"
#include "quant/method.h"
#include "quant/numerics.h"
#include "quant/wire.h"

namespace qtrain::quant_detail {
namespace {

// The wire body of fp32 / fp16 / bf16: a = b = c = 0; n values of 4 / 2 / 2 bytes.
size_t cast_value_bytes(QuantMethod method) { return method == QuantMethod::fp32 ? 4 : 2; }

template <bool Bf16, bool Ef>
void encode_half_loop(const float* __restrict in, float* __restrict residual, uint16_t* __restrict out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = Ef ? in[i] + residual[i] : in[i];
    const uint16_t h = Bf16 ? float_to_bf16(v) : float_to_half(v);
    out[i] = h;
    if (Ef) residual[i] = v - (Bf16 ? bf16_to_float(h) : half_to_float(h));
  }
}

template <bool Bf16, bool Add>
void decode_half_loop(const uint16_t* __restrict in, float* __restrict out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = Bf16 ? bf16_to_float(in[i]) : half_to_float(in[i]);
    out[i] = Add ? out[i] + v : v;
  }
}

class CastQuantizer final : public Quantizer {
 public:
  explicit CastQuantizer(const QuantSpec& spec) : Quantizer(spec) {}

 protected:
  size_t max_body_bytes(int64_t n, int64_t) const override {
    return wire::kHeaderBytes + cast_value_bytes(method()) * static_cast<size_t>(n);
  }

  WireHeader header(int64_t n) const {
    WireHeader h;
    h.method = method();
    h.n = static_cast<uint64_t>(n);
    h.total = wire::pad8(max_body_bytes(n, 1));
    return h;
  }

  size_t encode_cpu(const EncodeArgs& a) const override {
    wire::write_header(a.out, header(a.n));
    uint8_t* body = a.out + wire::kHeaderBytes;
    if (method() == QuantMethod::fp32) {
      std::memcpy(body, a.in, 4 * static_cast<size_t>(a.n));
    } else {
      auto* h = reinterpret_cast<uint16_t*>(body);
      const bool bf16 = method() == QuantMethod::bf16;
      if (bf16 && a.residual)
        encode_half_loop<true, true>(a.in, a.residual, h, a.n);
      else if (bf16)
        encode_half_loop<true, false>(a.in, nullptr, h, a.n);
      else if (a.residual)
        encode_half_loop<false, true>(a.in, a.residual, h, a.n);
      else
        encode_half_loop<false, false>(a.in, nullptr, h, a.n);
    }
    return max_body_bytes(a.n, 1);
  }

#if QTRAIN_QUANT_CUDA
  std::optional<WireHeader> shape_header(int64_t n, int64_t) const override { return header(n); }

  size_t encode_cuda(Context& ctx, const EncodeArgs& a) const override {
    cuda_write_header(ctx, a.out, header(a.n));
    cast_encode_cuda(ctx, method(), a.in, a.residual, a.out + wire::kHeaderBytes, a.n);
    return max_body_bytes(a.n, 1);
  }
#endif

  void decode_cpu(const WireHeader& h, std::span<const uint8_t> in, float* out, bool add) const override {
    check_body(h);
    const uint8_t* body = in.data() + wire::kHeaderBytes;
    const auto n = static_cast<int64_t>(h.n);
    if (method() == QuantMethod::fp32) {
      const auto* v = reinterpret_cast<const float*>(body);
      if (add) {
        for (int64_t i = 0; i < n; ++i) out[i] += v[i];
      } else {
        std::memcpy(out, v, 4 * static_cast<size_t>(n));
      }
      return;
    }
    const auto* v = reinterpret_cast<const uint16_t*>(body);
    const bool bf16 = method() == QuantMethod::bf16;
    decode_tiled(out, n, add, [&](int64_t b, int64_t e, float* dst) {
      if (bf16 && add)
        decode_half_loop<true, true>(v + b, dst, e - b);
      else if (bf16)
        decode_half_loop<true, false>(v + b, dst, e - b);
      else if (add)
        decode_half_loop<false, true>(v + b, dst, e - b);
      else
        decode_half_loop<false, false>(v + b, dst, e - b);
    });
  }

#if QTRAIN_QUANT_CUDA
  void decode_cuda(Context& ctx, const WireHeader& h, std::span<const uint8_t> in, float* out,
                   bool add) const override {
    check_body(h);
    cast_decode_cuda(ctx, method(), in.data() + wire::kHeaderBytes, out, static_cast<int64_t>(h.n), add);
  }
#endif

 private:
  void check_body(const WireHeader& h) const {
    if (h.a != 0 || h.b != 0 || h.c != 0) wire::bad_payload(method(), "parameter fields must be zero");
    const size_t expect = wire::pad8(max_body_bytes(static_cast<int64_t>(h.n), 1));
    if (h.total != expect)
      wire::bad_payload(method(), fmt::format("length field {} bytes, {} values take {}", h.total, h.n, expect));
  }
};

}  // namespace

namespace {
std::unique_ptr<Quantizer> make_cast(const QuantSpec& spec) { return std::make_unique<CastQuantizer>(spec); }
}  // namespace

const QuantMethodInfo& fp32_method_info() {
  static const QuantMethodInfo info = [] {
    QuantMethodInfo m;
    m.id = QuantMethod::fp32;
    m.name = "fp32";
    m.error_feedback_allowed = false;
    m.algorithm = "allreduce";
    m.cast_bits = 32;
    m.within_bound = [](const QuantSpec&, const RoundTripValue& v) { return v.y == v.x; };
    m.variants = {"fp32"};
    m.make = make_cast;
    return m;
  }();
  return info;
}

// fp16 and bf16: round to nearest even, a relative half ulp for normal results (fp16 subnormals have
// the absolute spacing 2^-24).
const QuantMethodInfo& fp16_method_info() {
  static const QuantMethodInfo info = [] {
    QuantMethodInfo m;
    m.id = QuantMethod::fp16;
    m.name = "fp16";
    m.algorithm = "allreduce";
    m.cast_bits = 16;
    m.within_bound = [](const QuantSpec&, const RoundTripValue& v) {
      return std::fabs(v.y - v.x) <= std::max(std::fabs(v.x) * 0x1p-11, 0x1p-25);
    };
    m.variants = {"fp16"};
    m.make = make_cast;
    return m;
  }();
  return info;
}

const QuantMethodInfo& bf16_method_info() {
  static const QuantMethodInfo info = [] {
    QuantMethodInfo m;
    m.id = QuantMethod::bf16;
    m.name = "bf16";
    m.algorithm = "allreduce";
    m.cast_bits = 16;
    m.brain_float = true;
    m.within_bound = [](const QuantSpec&, const RoundTripValue& v) {
      return std::fabs(v.y - v.x) <= std::fabs(v.x) * 0x1p-8;
    };
    m.variants = {"bf16"};
    m.make = make_cast;
    return m;
  }();
  return info;
}

}  // namespace qtrain::quant_detail
