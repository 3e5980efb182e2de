// The Quantizer entry points (argument checks once, dispatch on the device, padding, header checks),
// QuantSpec defaults and validation, QuantState, and make_quantizer. The method classes implement
// only the per-device bodies; everything a caller can get wrong is checked here, once.
#include "quant/quantizer.h"

#include <cstring>

#include "quant/deferred_checks.h"
#include "quant/header_check.h"
#include "quant/kernels.h"
#include "quant/method.h"
#include "quant/wire.h"

namespace qtrain {

const char* quant_method_name(QuantMethod method) { return method_info(method).name.c_str(); }

QuantMethod quant_method_from_name(const std::string& name) {
  for (const QuantMethodInfo* m : quant_methods())
    if (name == m->name) return m->id;
  input_error("unknown quantization method '{}' (known: {})", name, quant_method_names());
}

bool default_error_feedback(QuantMethod method) { return method_info(method).error_feedback; }

// ---- QuantSpec -----------------------------------------------------------------------------------

namespace {

// A CUDA span reached a quantizer whose kernels this build does not link: a clear error, never a
// silent CPU fallback.
[[noreturn]] void no_cuda_kernels(const QuantSpec& spec) { QT_FAIL_NO_CUDA("{}: a CUDA span was given", spec.str()); }

const QuantParamDef& param_of(QuantMethod method, std::string_view key) {
  const QuantParamDef* p = find_param(method_info(method), key);
  QT_CHECK(p != nullptr, "{} has no parameter '{}'", quant_method_name(method), key);
  return *p;
}

std::string format_number(const QuantParamDef& p, double v) {
  return p.kind == QuantParamDef::Kind::real ? fmt::format("{:g}", v) : fmt::format("{}", static_cast<int64_t>(v));
}

}  // namespace

QuantSpec QuantSpec::defaults(QuantMethod method) {
  QuantSpec s;
  s.method = method;
  s.error_feedback = default_error_feedback(method);
  return s;
}

double QuantSpec::number(std::string_view key) const {
  const QuantParamDef& p = param_of(method, key);
  for (const auto& [k, v] : params_)
    if (k == key) return v;
  return p.fallback;
}

const std::string& QuantSpec::choice(std::string_view key) const {
  const QuantParamDef& p = param_of(method, key);
  QT_CHECK(p.kind == QuantParamDef::Kind::name, "{}: parameter '{}' is a number, not a named choice",
           quant_method_name(method), key);
  const auto i = static_cast<size_t>(number(key));
  QT_CHECK(i < p.choices.size(), "{}: parameter '{}' holds choice {} of {}", quant_method_name(method), key, i,
           p.choices.size());
  return p.choices[i];
}

QuantSpec& QuantSpec::set(std::string_view key, double value) {
  param_of(method, key);
  for (auto& [k, v] : params_)
    if (k == key) {
      v = value;
      return *this;
    }
  params_.emplace_back(std::string(key), value);
  return *this;
}

QuantSpec& QuantSpec::set(std::string_view key, const char* choice_name) {
  const QuantParamDef& p = param_of(method, key);
  for (size_t i = 0; i < p.choices.size(); ++i)
    if (p.choices[i] == choice_name) return set(key, static_cast<double>(i));
  QT_FAIL("{}: '{}' is not a choice of parameter '{}'", quant_method_name(method), choice_name, key);
  return *this;
}

bool QuantSpec::operator==(const QuantSpec& other) const {
  if (method != other.method || error_feedback != other.error_feedback) return false;
  for (const QuantParamDef& p : method_info(method).params)
    if (number(p.key) != other.number(p.key)) return false;
  return true;
}

void QuantSpec::validate() const {
  const QuantMethodInfo* info = nullptr;
  for (const QuantMethodInfo* m : quant_methods())
    if (m->id == method) info = m;
  if (!info) input_error("quantization method id {} is unknown", static_cast<int>(method));
  const char* name = info->name.c_str();
  if (error_feedback && !info->error_feedback_allowed)
    input_error("{} {}: error_feedback does not apply", name, info->no_error_feedback_because);
  for (const auto& [key, v] : params_) {
    const QuantParamDef& p = param_of(method, key);
    if (v == p.fallback) continue;
    const std::string got = format_number(p, v);
    if (!p.choices.empty()) {
      bool known = false;
      for (size_t i = 0; i < p.choices.size(); ++i)
        known |= p.kind == QuantParamDef::Kind::name ? v == static_cast<double>(i) : got == p.choices[i];
      if (!known) input_error("{}: {} must be one of {}, got {}", name, key, fmt::join(p.choices, ", "), got);
      continue;
    }
    const bool whole = p.kind != QuantParamDef::Kind::integer || v == static_cast<double>(static_cast<int64_t>(v));
    if (!whole || !(p.min_exclusive ? v > p.min : v >= p.min) || !(v <= p.max))
      input_error("{}: {} must be in {}{}, {}], got {}", name, key, p.min_exclusive ? "(" : "[",
                  format_number(p, p.min), format_number(p, p.max), got);
  }
  if (auto problem = info->check(*this)) input_error("{}: {} {}", name, problem->first, problem->second);
}

std::string QuantSpec::str() const {
  const QuantMethodInfo& info = method_info(method);
  QuantSpec resolved = *this;
  info.resolve(resolved);
  std::vector<std::string> parts;
  for (const QuantParamDef& p : info.params) {
    if (p.applies && !p.applies(resolved)) continue;
    const double v = resolved.number(p.key);
    if (!p.shown_at_default && v == p.fallback) continue;
    parts.push_back(fmt::format("{}={}", p.key,
                                p.kind == QuantParamDef::Kind::name ? resolved.choice(p.key) : format_number(p, v)));
  }
  if (error_feedback != info.error_feedback)
    parts.push_back(fmt::format("error_feedback={}", error_feedback ? "true" : "false"));
  return parts.empty() ? info.name : fmt::format("{}({})", info.name, fmt::join(parts, ", "));
}

// ---- QuantState ----------------------------------------------------------------------------------

void QuantState::reset() {
  if (residual_.defined()) residual_.zero_();
  if (momentum_.defined()) momentum_.zero_();
}

std::vector<std::pair<std::string, Tensor>> QuantState::state() {
  std::vector<std::pair<std::string, Tensor>> out;
  if (residual_.defined()) out.emplace_back("residual", residual_);
  if (momentum_.defined()) out.emplace_back("momentum", momentum_);
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
  auto fresh = [&](Tensor& t) {
    if (!t.defined() || t.numel() != n || t.device() != device) t = Tensor::zeros({n}, DType::f32, device);
  };
  if (spec_.error_feedback) fresh(state.residual_);
  if (keeps_momentum()) fresh(state.momentum_);
}

size_t Quantizer::encode(Context& ctx, std::span<const float> in, int64_t column, QuantState& state,
                         std::span<uint8_t> out) const {
  return encode_into(ctx, in, column, state, out, /*slot=*/false);
}

size_t Quantizer::encode_slot(Context& ctx, std::span<const float> in, int64_t column, QuantState& state,
                              std::span<uint8_t> out) const {
  encode_into(ctx, in, column, state, out, /*slot=*/true);
  return max_encoded_bytes(static_cast<int64_t>(in.size()), column);
}

size_t Quantizer::encode_into(Context& ctx, std::span<const float> in, int64_t column, QuantState& state,
                              std::span<uint8_t> out, bool slot) const {
  const int64_t n = static_cast<int64_t>(in.size());
  const size_t need = max_encoded_bytes(n, column);
  QT_CHECK(!method_info(spec_.method).columnar(spec_) || n % column == 0,
           "{}: the column length {} must divide the span's {} values", spec_.str(), column, n);
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
  args.shared_key = state.shared_rng_key(ctx.step());
  args.state = &state;
  args.slot = slot;
  if (keeps_momentum()) {
    if (!state.momentum_.defined()) init_state(state, n, ctx.device());
    QT_CHECK(state.momentum_.numel() == n && state.momentum_.device() == ctx.device(),
             "{}: this QuantState's momentum has {} values on {}, the span {} values on {} (one state per tensor)",
             spec_.str(), state.momentum_.numel(), state.momentum_.device().str(), n, ctx.device().str());
    args.momentum = state.momentum_.data<float>();
  }
  if (spec_.error_feedback) {
    if (!state.residual_.defined()) init_state(state, n, ctx.device());
    QT_CHECK(state.residual_.numel() == n && state.residual_.device() == ctx.device(),
             "{}: this QuantState's residual has {} values on {}, the span {} values on {} (one state per tensor)",
             spec_.str(), state.residual_.numel(), state.residual_.device().str(), n, ctx.device().str());
    args.residual = state.residual_.data<float>();
  }
  size_t body = 0;
  if (ctx.device().is_cpu()) {
    // An empty span's data() may be null, which memcpy and memset may not receive even for 0 bytes
    // (C's rule; UBSan reports it): the CPU bodies get valid pointers for every n.
    float empty_span = 0;
    if (args.in == nullptr) args.in = &empty_span;
    if (spec_.error_feedback && args.residual == nullptr) args.residual = &empty_span;
    body = encode_cpu(args);
    std::memset(out.data() + body, 0, wire::pad8(body) - body);
  } else {
    body = encode_cuda(ctx, args);
    if (body == kSizeOnDevice) {
      QT_CHECK(slot && !fixed_size(), "{}: the encoder left its size on the device, but the caller needs it",
               spec_.str());
      return need;
    }
#if QTRAIN_QUANT_CUDA
    quant_detail::cuda_zero_bytes(ctx, out.data() + body, wire::pad8(body) - body);
#endif
  }
  QT_CHECK(wire::pad8(body) <= need, "{}: wrote {} bytes, more than the bound {}", spec_.str(), wire::pad8(body), need);
  QT_CHECK(!fixed_size() || wire::pad8(body) == need, "{}: wrote {} bytes, but its size is fixed at {}", spec_.str(),
           wire::pad8(body), need);
  return wire::pad8(body);
}

size_t Quantizer::encode_cuda(Context&, const EncodeArgs&) const { no_cuda_kernels(spec_); }

void Quantizer::decode_cuda(Context&, const WireHeader&, std::span<const uint8_t>, float*, bool) const {
  no_cuda_kernels(spec_);
}

std::optional<WireHeader> Quantizer::shape_header(int64_t, int64_t) const { return std::nullopt; }

void Quantizer::decode(Context& ctx, std::span<const uint8_t> in, int64_t n, std::span<float> out,
                       int64_t column) const {
  decode_into(ctx, in, n, out, false, column);
}

void Quantizer::decode_add(Context& ctx, std::span<const uint8_t> in, int64_t n, std::span<float> acc,
                           int64_t column) const {
  decode_into(ctx, in, n, acc, true, column);
}

void Quantizer::decode_into(Context& ctx, std::span<const uint8_t> in, int64_t n, std::span<float> out, bool add,
                            int64_t column) const {
  QT_CHECK(n >= 0 && n <= wire::kMaxValues, "{}: spans of 0..{} values are supported, got {}", spec_.str(),
           wire::kMaxValues, n);
  QT_CHECK(static_cast<int64_t>(out.size()) == n, "{}: decoding {} values into a span of {}", spec_.str(), n,
           out.size());
  QT_CHECK(reinterpret_cast<uintptr_t>(in.data()) % 4 == 0, "{}: payload buffer must be 4-byte aligned", spec_.str());
#if QTRAIN_QUANT_CUDA
  // Under deferred checks, a header that the receiver can predict is compared on the device: no copy
  // back, no wait. The length it states is then the predicted one, checked against `in` here.
  DeferredChecks* deferred = ctx.device().is_cuda() ? DeferredChecks::active(ctx) : nullptr;
  if (const std::optional<WireHeader> expected =
          deferred != nullptr && column > 0 ? shape_header(n, column) : std::nullopt) {
    // A size that varies (adaptive) is the payload's own, which its decoder checks against `in` on the
    // device: here `in` must hold a header at least.
    const size_t least = fixed_size() ? expected->total : wire::kHeaderBytes;
    if (least > in.size())
      wire::bad_payload(spec_.method, fmt::format("truncated: a payload of {} values {} {} bytes, the buffer holds {}",
                                                  n, fixed_size() ? "is" : "takes at least", least, in.size()));
    HeaderCheck header;
    header.payload = in.data();
    wire::write_header(header.expected, *expected);
    header.from_data = (header_b_from_data() ? kHeaderFieldBBytes : 0u) |
                       (header_c_from_data() ? kHeaderFieldCBytes : 0u) | (fixed_size() ? 0u : kHeaderTotalBytes);
    header.slot = deferred->take_slot();
    deferred->defer(header.slot, [method = spec_.method, n](const EncodeStatus& s) {
      if (s.bad)
        wire::bad_payload(method, fmt::format("the header differs from the one this rank's quantizer writes for {} "
                                              "values (a damaged payload, or ranks configured differently)",
                                              n));
    });
    // The method's decode kernel makes the check on its way where its launcher takes it; else a
    // kernel of its own does (either way before settle() reads the slot).
    deferred->offer_header_check(header);
    try {
      decode_cuda(ctx, *expected, fixed_size() ? in.first(expected->total) : in, out.data(), add);
    } catch (...) {
      (void)deferred->take_header_check();  // no later decode may take this payload's check
      throw;
    }
    quant_detail::cuda_check_header(ctx, deferred->take_header_check());
    return;
  }
#else
  (void)column;
#endif
  // The header is checked on the host; on a GPU its 32 bytes come back first.
  uint8_t head[wire::kHeaderBytes] = {};
  const size_t head_bytes = in.size() < wire::kHeaderBytes ? in.size() : wire::kHeaderBytes;
  if (ctx.device().is_cpu()) {
    if (head_bytes > 0) std::memcpy(head, in.data(), head_bytes);
  } else if (head_bytes > 0) {
#if QTRAIN_QUANT_CUDA
    quant_detail::cuda_copy_to_host(ctx, head, in.data(), head_bytes);
#else
    no_cuda_kernels(spec_);
#endif
  }
  const WireHeader h = wire::check_header(std::span<const uint8_t>(head, head_bytes), in.size(), spec_.method, n);
  const std::span<const uint8_t> payload = in.first(h.total);
  float empty_span = 0;  // for an empty span, whose data() may be null (see encode)
  if (ctx.device().is_cpu())
    decode_cpu(h, payload, out.empty() ? &empty_span : out.data(), add);
  else
    decode_cuda(ctx, h, payload, out.data(), add);
}

std::unique_ptr<Quantizer> make_quantizer(const QuantSpec& spec_in) {
  spec_in.validate();
  QuantSpec spec = spec_in;
  const QuantMethodInfo& info = method_info(spec.method);
  if (!info.payload)
    input_error("{} is not a payload quantizer: the gradient exchange runs it as its own algorithm ({})", info.name,
                info.algorithm);
  info.resolve(spec);
  return info.make(spec);
}

}  // namespace qtrain
