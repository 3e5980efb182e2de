// The Quantizer entry points (argument checks once, dispatch on the device, padding, header checks),
// QuantSpec defaults and validation, QuantState, and make_quantizer. The method classes implement
// only the per-device bodies; everything a caller can get wrong is checked here, once.
#include "quant/quantizer.h"

#include <cstring>

#include "quant/kernels.h"
#include "quant/methods.h"
#include "quant/wire.h"

namespace qtrain {
namespace {

struct MethodName {
  QuantMethod method;
  const char* name;
};
constexpr MethodName kMethodNames[] = {
    {QuantMethod::fp32, "fp32"},         {QuantMethod::fp16, "fp16"},   {QuantMethod::bf16, "bf16"},
    {QuantMethod::dettmers8, "dettmers8"}, {QuantMethod::onebit, "onebit"}, {QuantMethod::qsgd, "qsgd"},
    {QuantMethod::adaptive, "adaptive"}, {QuantMethod::topk, "topk"},
};

bool uses_columns(const QuantSpec& spec) {
  return (spec.method == QuantMethod::onebit && spec.mode == OnebitMode::column) ||
         spec.method == QuantMethod::adaptive;
}

}  // namespace

const char* quant_method_name(QuantMethod method) {
  for (const auto& m : kMethodNames)
    if (m.method == method) return m.name;
  return "unknown";
}

QuantMethod quant_method_from_name(const std::string& name) {
  std::string known;
  for (const auto& m : kMethodNames) {
    if (name == m.name) return m.method;
    known += (known.empty() ? "" : ", ") + std::string(m.name);
  }
  input_error("unknown quantization method '{}' (known: {})", name, known);
}

bool default_error_feedback(QuantMethod method) {
  return method == QuantMethod::onebit || method == QuantMethod::adaptive || method == QuantMethod::topk;
}

namespace quant_detail {
int64_t default_bucket(QuantMethod method, int bits) {
  if (method == QuantMethod::onebit) return 64;
  if (method == QuantMethod::qsgd) return bits == 2 ? 128 : (bits == 16 ? 8192 : 512);
  return 0;
}
}  // namespace quant_detail

QuantSpec QuantSpec::defaults(QuantMethod method) {
  QuantSpec s;
  s.method = method;
  s.error_feedback = default_error_feedback(method);
  return s;
}

void QuantSpec::validate() const {
  const char* name = quant_method_name(method);
  if (std::string(name) == "unknown") input_error("quantization method id {} is unknown", static_cast<int>(method));
  if (method == QuantMethod::fp32 && error_feedback)
    input_error("fp32 sends values exactly: error_feedback does not apply");
  if (bucket < 0 || bucket > wire::kMaxValues) input_error("{}: bucket must be in [1, {}], got {}", name, wire::kMaxValues, bucket);
  if (method == QuantMethod::qsgd && bits != 2 && bits != 4 && bits != 8 && bits != 16)
    input_error("qsgd: bits must be one of 2, 4, 8, 16, got {}", bits);
  if (method == QuantMethod::adaptive) {
    if (!(proportion > 0.0 && proportion <= 1.0)) input_error("adaptive: proportion must be in (0, 1], got {}", proportion);
    if (sample != 0 && (sample < 64 || sample > (int64_t{1} << 24)))
      input_error("adaptive: sample must be 0 (exact) or in [64, {}], got {}", int64_t{1} << 24, sample);
  }
  if (method == QuantMethod::topk && !(fraction > 0.0 && fraction <= 1.0))
    input_error("topk: fraction must be in (0, 1], got {}", fraction);
}

std::string QuantSpec::str() const {
  const int64_t b = bucket > 0 ? bucket : quant_detail::default_bucket(method, bits);
  const std::string ef = error_feedback != default_error_feedback(method)
                             ? fmt::format(", error_feedback={}", error_feedback ? "true" : "false")
                             : "";
  switch (method) {
    case QuantMethod::fp32:
    case QuantMethod::fp16:
    case QuantMethod::bf16:
      return ef.empty() ? std::string(quant_method_name(method)) : fmt::format("{}({})", quant_method_name(method), ef.substr(2));
    case QuantMethod::dettmers8:
      return fmt::format("dettmers8(variant={}{})", variant == Dettmers8Variant::linear ? "linear" : "dynamic_tree", ef);
    case QuantMethod::onebit:
      return mode == OnebitMode::column ? fmt::format("onebit(mode=column{})", ef)
                                        : fmt::format("onebit(mode=bucket, bucket={}{})", b, ef);
    case QuantMethod::qsgd:
      return fmt::format("qsgd(bits={}, bucket={}, norm={}{})", bits, b, norm == QsgdNorm::l2 ? "l2" : "max", ef);
    case QuantMethod::adaptive:
      return fmt::format("adaptive(proportion={:g}{}{})", proportion,
                         sample > 0 ? fmt::format(", sample={}", sample) : std::string(), ef);
    case QuantMethod::topk: return fmt::format("topk(fraction={:g}{})", fraction, ef);
  }
  return "unknown";
}

// ---- QuantState ----------------------------------------------------------------------------------

void QuantState::reset() {
  if (residual_.defined()) residual_.zero_();
}

std::vector<std::pair<std::string, Tensor>> QuantState::state() {
  std::vector<std::pair<std::string, Tensor>> out;
  if (residual_.defined()) out.emplace_back("residual", residual_);
  return out;
}

void* QuantState::workspace(Device device, size_t bytes) {
  if (!workspace_.defined() || workspace_.device() != device || workspace_.nbytes() < bytes) {
    // Grow geometrically so a tensor whose data-dependent needs creep up does not reallocate each step.
    const size_t grown = workspace_.defined() && workspace_.device() == device ? workspace_.nbytes() * 3 / 2 : 0;
    workspace_ = Tensor::empty({static_cast<int64_t>(bytes > grown ? bytes : grown)}, DType::u8, device);
  }
  return workspace_.raw();
}

// ---- Quantizer -----------------------------------------------------------------------------------

Quantizer::Quantizer(QuantSpec spec) : spec_(spec) {}

size_t Quantizer::max_encoded_bytes(int64_t n, int64_t column) const {
  QT_CHECK(n >= 0 && n <= wire::kMaxValues, "{}: spans of 0..{} values are supported, got {}", spec_.str(),
           wire::kMaxValues, n);
  QT_CHECK(column >= 1, "{}: column length must be >= 1, got {}", spec_.str(), column);
  return wire::pad8(max_body_bytes(n, column));
}

void Quantizer::init_state(QuantState& state, int64_t n, Device device) const {
  if (!spec_.error_feedback) return;
  if (!state.residual_.defined() || state.residual_.numel() != n || state.residual_.device() != device)
    state.residual_ = Tensor::zeros({n}, DType::f32, device);
}

size_t Quantizer::encode(Context& ctx, std::span<const float> in, int64_t column, QuantState& state,
                         std::span<uint8_t> out) const {
  const int64_t n = static_cast<int64_t>(in.size());
  const size_t need = max_encoded_bytes(n, column);
  QT_CHECK(!uses_columns(spec_) || n % column == 0, "{}: the column length {} must divide the span's {} values",
           spec_.str(), column, n);
  QT_CHECK(out.size() >= need, "{}: output buffer of {} bytes, max_encoded_bytes({}, {}) is {}", spec_.str(),
           out.size(), n, column, need);
  QT_CHECK(reinterpret_cast<uintptr_t>(out.data()) % wire::kAlign == 0, "{}: output buffer must be {}-byte aligned",
           spec_.str(), wire::kAlign);
  EncodeArgs args;
  args.in = in.data();
  args.n = n;
  args.column = column;
  args.out = out.data();
  args.key = state.rng_key(ctx.step());
  args.state = &state;
  if (spec_.error_feedback) {
    if (!state.residual_.defined()) init_state(state, n, ctx.device());
    QT_CHECK(state.residual_.numel() == n && state.residual_.device() == ctx.device(),
             "{}: this QuantState's residual has {} values on {}, the span {} values on {} (one state per tensor)",
             spec_.str(), state.residual_.numel(), state.residual_.device().str(), n, ctx.device().str());
    args.residual = state.residual_.data<float>();
  }
  size_t body = 0;
  if (ctx.device().is_cpu()) {
    body = encode_cpu(args);
    std::memset(out.data() + body, 0, wire::pad8(body) - body);
  } else {
    body = encode_cuda(ctx, args);
    quant_detail::cuda_zero_bytes(ctx, out.data() + body, wire::pad8(body) - body);
  }
  QT_CHECK(wire::pad8(body) <= need, "{}: wrote {} bytes, more than the bound {}", spec_.str(), wire::pad8(body), need);
  return wire::pad8(body);
}

void Quantizer::decode(Context& ctx, std::span<const uint8_t> in, int64_t n, std::span<float> out) const {
  decode_into(ctx, in, n, out, false);
}

void Quantizer::decode_add(Context& ctx, std::span<const uint8_t> in, int64_t n, std::span<float> acc) const {
  decode_into(ctx, in, n, acc, true);
}

void Quantizer::decode_into(Context& ctx, std::span<const uint8_t> in, int64_t n, std::span<float> out,
                            bool add) const {
  QT_CHECK(n >= 0 && n <= wire::kMaxValues, "{}: spans of 0..{} values are supported, got {}", spec_.str(),
           wire::kMaxValues, n);
  QT_CHECK(static_cast<int64_t>(out.size()) == n, "{}: decoding {} values into a span of {}", spec_.str(), n,
           out.size());
  QT_CHECK(reinterpret_cast<uintptr_t>(in.data()) % 4 == 0, "{}: payload buffer must be 4-byte aligned", spec_.str());
  // The header is checked on the host; on a GPU its 32 bytes come back first.
  uint8_t head[wire::kHeaderBytes] = {};
  const size_t head_bytes = in.size() < wire::kHeaderBytes ? in.size() : wire::kHeaderBytes;
  if (ctx.device().is_cpu()) {
    if (head_bytes > 0) std::memcpy(head, in.data(), head_bytes);
  } else if (head_bytes > 0) {
    quant_detail::cuda_copy_to_host(ctx, head, in.data(), head_bytes);
  }
  const WireHeader h =
      wire::check_header(std::span<const uint8_t>(head, head_bytes), in.size(), spec_.method, n);
  const std::span<const uint8_t> payload = in.first(h.total);
  if (ctx.device().is_cpu()) decode_cpu(h, payload, out.data(), add);
  else decode_cuda(ctx, h, payload, out.data(), add);
}

std::unique_ptr<Quantizer> make_quantizer(const QuantSpec& spec_in) {
  spec_in.validate();
  QuantSpec spec = spec_in;
  if (spec.bucket == 0) spec.bucket = quant_detail::default_bucket(spec.method, spec.bits);
  switch (spec.method) {
    case QuantMethod::fp32:
    case QuantMethod::fp16:
    case QuantMethod::bf16: return quant_detail::make_cast_quantizer(spec);
    case QuantMethod::dettmers8: return quant_detail::make_dettmers8_quantizer(spec);
    case QuantMethod::onebit: return quant_detail::make_onebit_quantizer(spec);
    case QuantMethod::qsgd: return quant_detail::make_qsgd_quantizer(spec);
    case QuantMethod::adaptive: return quant_detail::make_adaptive_quantizer(spec);
    case QuantMethod::topk: return quant_detail::make_topk_quantizer(spec);
  }
  input_error("quantization method id {} is unknown", static_cast<int>(spec.method));
}

}  // namespace qtrain
