// The quantizer contract (docs/quantizers.md; the specification is quantizers.md part A): a
// Quantizer turns one contiguous fp32 span into a self-describing, versioned payload and back. It
// knows nothing about transport. Per-tensor, per-replica state (the error-feedback residual and the
// identity behind the random key) lives in a QuantState the caller owns and checkpoints.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "framework/core/check.h"
#include "framework/core/context.h"
#include "framework/core/philox.h"
#include "framework/core/tensor.h"

namespace qtrain {

// The methods of quant/methods.def; their values are the wire ids (header byte 2).
enum class QuantMethod : uint8_t {
#define QTRAIN_QUANT_METHOD(name, id) name = id,
#include "quant/methods.def"
#undef QTRAIN_QUANT_METHOD
};

const char* quant_method_name(QuantMethod method);
// Throws InputError listing the known names.
QuantMethod quant_method_from_name(const std::string& name);

// One method with its parameters. The parameters are the method's own (its descriptor, quant/method.h,
// lists them with their defaults and ranges); one that was never set has its default. Defaults are the
// papers' settings (quantizers.md part A); validate() checks ranges.
struct QuantSpec {
  QuantMethod method = QuantMethod::fp32;
  bool error_feedback = false;  // v = g + e, send Q(v), keep e = v - decode(Q(v)); see default_error_feedback()

  // The spec with the method's defaults (error feedback and every parameter).
  static QuantSpec defaults(QuantMethod method);

  // Parameter `key` of the method (a bug if the method has no such parameter): its number, or for a
  // named choice its index (the value the wire format stores) and name.
  double number(std::string_view key) const;
  int64_t integer(std::string_view key) const { return static_cast<int64_t>(number(key)); }
  const std::string& choice(std::string_view key) const;
  // Sets parameter `key` (a number, or a named choice by its name); a bug if the method has no such
  // parameter or the name is not one of its choices. Ranges are checked by validate().
  QuantSpec& set(std::string_view key, double value);
  QuantSpec& set(std::string_view key, const char* choice_name);

  // Throws InputError naming the bad field.
  void validate() const;
  // "qsgd(bits=4, bucket=512, norm=max)"
  std::string str() const;
  // Same method, error feedback and parameter values (defaults included).
  bool operator==(const QuantSpec& other) const;

 private:
  std::vector<std::pair<std::string, double>> params_;  // the parameters that were set
};

// Whether the method keeps a residual unless the config says otherwise: onebit, adaptive, topk, efsign,
// randomk.
bool default_error_feedback(QuantMethod method);

// Raised by encode when its input holds NaN or Inf (all methods but fp32/fp16/bf16, which pass them
// through): the trainer's NaN guard catches it and names the tensor.
class NonFiniteInputError : public InputError {
 public:
  using InputError::InputError;
};

// Per replica, per tensor: the residual (when the method uses error feedback) and the identity of
// the random stream. The random key of one encode is derive_philox_key(seed, ctx.step(), rank,
// tensor_id); elements index the counter, so no generator state exists. A re-quantization that needs
// an independent stream (the owner's second quantization in reduce-scatter + allgather) uses a
// second QuantState with another tensor_id. Not thread-safe: one encode at a time per state.
class QuantState {
 public:
  QuantState() = default;
  QuantState(uint64_t seed, int rank, uint64_t tensor_id) : seed_(seed), rank_(rank), tensor_id_(tensor_id) {}

  uint64_t seed() const { return seed_; }
  int rank() const { return rank_; }
  uint64_t tensor_id() const { return tensor_id_; }
  PhiloxKey rng_key(uint64_t step) const {
    return derive_philox_key(seed_, step, static_cast<uint64_t>(rank_), tensor_id_);
  }
  // The key every rank shares for this tensor and step: the seed, step and tensor id without the rank
  // (randomk draws the same indices on every rank from it). kSharedStream stands where rank_key puts
  // the rank; no rank (an int) converts to it.
  static constexpr uint64_t kSharedStream = ~uint64_t{0};
  PhiloxKey shared_rng_key(uint64_t step) const { return derive_philox_key(seed_, step, kSharedStream, tensor_id_); }

  // The error-feedback residual e (f32, n values, on the encode device); undefined until the first
  // encode with error feedback or Quantizer::init_state().
  bool has_residual() const { return residual_.defined(); }
  Tensor& residual() { return residual_; }
  const Tensor& residual() const { return residual_; }
  // The momentum buffer m (f32, n values, on the encode device) of the methods that smooth what they
  // send (signsgd with momentum > 0: m = beta m + (1 - beta) g); undefined for the others.
  bool has_momentum() const { return momentum_.defined(); }
  Tensor& momentum() { return momentum_; }
  const Tensor& momentum() const { return momentum_; }
  // Sets the residual and the momentum to zero (a fresh start; keeps the allocations).
  void reset();

  // Named state for checkpoints: {"residual", e} and {"momentum", m} for those that exist. The tensors
  // are the live buffers: copying into them restores the state (call Quantizer::init_state() first so
  // they exist).
  std::vector<std::pair<std::string, Tensor>> state();

  // Scratch space of encode (selection candidates, CUDA reduction partials) on `device`: grown on
  // demand and kept, so steady-state encodes do not allocate; never saved.
  void* workspace(Device device, size_t bytes);

 private:
  friend class Quantizer;

  uint64_t seed_ = 0;
  int rank_ = 0;
  uint64_t tensor_id_ = 0;
  Tensor residual_;
  Tensor momentum_;
  Tensor workspace_;
};

// Arguments of one encode after the entry checks; what the method implementations see.
struct EncodeArgs {
  const float* in = nullptr;  // n values
  int64_t n = 0;
  int64_t column = 1;           // the tensor's innermost dimension (divides n for column methods)
  float* residual = nullptr;    // n values when error feedback is on, else null
  uint8_t* out = nullptr;       // at least max_encoded_bytes(n, column) bytes, 8-byte aligned
  float* momentum = nullptr;    // n values when the method keeps a momentum buffer, else null
  PhiloxKey key{0, 0};          // this rank's stream (QuantState::rng_key)
  PhiloxKey shared_key{0, 0};   // the stream every rank shares (QuantState::shared_rng_key)
  QuantState* state = nullptr;  // for workspace()
  // Quantizer::encode_slot: the caller needs no size. A CUDA encoder whose size depends on the data
  // (adaptive) may then leave it on the device: it writes its padding itself and returns
  // kSizeOnDevice.
  bool slot = false;
};
constexpr size_t kSizeOnDevice = ~size_t{0};

// A payload's header, read back (quant/wire.h has the layout).
struct WireHeader;

class Quantizer {
 public:
  virtual ~Quantizer() = default;
  Quantizer(const Quantizer&) = delete;
  Quantizer& operator=(const Quantizer&) = delete;

  const QuantSpec& spec() const { return spec_; }
  QuantMethod method() const { return spec_.method; }
  bool error_feedback() const { return spec_.error_feedback; }

  // An upper bound on encode's result for n values whose innermost dimension is `column` (column
  // matters for onebit column mode and adaptive; other methods ignore it). A multiple of 8.
  size_t max_encoded_bytes(int64_t n, int64_t column) const;
  // Whether encode's result is always exactly max_encoded_bytes (every method but adaptive, whose
  // size is its count of values sent; checked at every encode): receivers then know the sizes
  // without asking.
  virtual bool fixed_size() const { return true; }

  // Encodes `in` (n = in.size() values; the step comes from ctx.step()) into `out`, which must hold
  // max_encoded_bytes(n, column) bytes and be 8-byte aligned; returns the payload size (a multiple of
  // 8). With error feedback, reads and updates state.residual() (allocated on first use).
  // Spans are in ctx.device()'s memory. On CUDA the payload is complete in ctx's stream order (its
  // padding is zeroed by a last asynchronous operation): use it on that stream or synchronize first.
  // The methods that compute scales wait for their kernels' status before returning (the NaN and
  // range checks come back to the host), unless a DeferredChecks scope is active for ctx on this
  // thread (quant/deferred_checks.h: the checks then raise at its settle()); the casts return
  // without waiting. Throws
  // NonFiniteInputError on NaN/Inf input for the methods that compute scales, and on finite input
  // whose scale or mean overflows float; `out` and the residual are then unspecified.
  size_t encode(Context& ctx, std::span<const float> in, int64_t column, QuantState& state,
                std::span<uint8_t> out) const;
  // encode() for a caller that moves the whole slot of max_encoded_bytes(n, column) bytes rather than
  // the payload (the exchange's device collectives: every size is then known from the plan): the
  // same payload, its size stated by its header only; returns the slot's size. The slot's bytes after
  // the payload are unspecified (decoders never read them). For the fixed-size methods the payload
  // fills the slot and this is encode(); adaptive on CUDA leaves its count on the device, so that
  // under DeferredChecks nothing is read back and nothing waits.
  size_t encode_slot(Context& ctx, std::span<const float> in, int64_t column, QuantState& state,
                     std::span<uint8_t> out) const;

  // Decodes a payload of this method holding exactly n values into out (n values; overwritten) or
  // adds it into acc. `in` may be longer than the payload (a fixed-size receive slot, encode_slot):
  // the header's length says where the payload ends. Every header field, length and index is validated against
  // `in` and n first; a malformed payload throws InputError and leaves out/acc untouched. Payloads
  // are self-describing: a qsgd decoder reads any bits/bucket/norm the header states.
  //
  // `column`, when the caller knows it (> 0), is the innermost dimension the sender encoded with, and
  // says that the sender's spec is this quantizer's: on CUDA under DeferredChecks
  // (quant/deferred_checks.h) the header is then compared with shape_header() on the device instead of
  // being read back, and the errors surface at DeferredChecks::settle(). Where the size varies
  // (adaptive), the decoder reads it from the header on the device and checks it against `in`.
  void decode(Context& ctx, std::span<const uint8_t> in, int64_t n, std::span<float> out, int64_t column = 0) const;
  void decode_add(Context& ctx, std::span<const uint8_t> in, int64_t n, std::span<float> acc, int64_t column = 0) const;

  // The header encode writes for n values of innermost dimension `column` when it depends on them
  // alone (the casts, qsgd, terngrad, onebit, mx, signsgd, topk), or on them and fields the data
  // decides (header_b_from_data(), header_c_from_data(): the scales of fp8, nvfp4, dettmers8 and
  // efsign, randomk's key, adaptive's count); where the size varies (!fixed_size(): adaptive), the
  // header of the largest payload, whose length field is the data's too. nullopt: no such header.
  virtual std::optional<WireHeader> shape_header(int64_t n, int64_t column) const;
  // True where field b is a scale (or a key) the encoder derives from the data (shape_header() writes
  // 0 there): the device then compares the other fields, and the CUDA decoder reads b from the payload
  // and checks it itself, so that the exchange never reads a header back to learn a scale.
  virtual bool header_b_from_data() const { return false; }
  // The same for field c (randomk's key's high word, adaptive's count).
  virtual bool header_c_from_data() const { return false; }

  // Allocates what encode will need for a tensor of n values on `device` (the zeroed residual when
  // error feedback is on, the zeroed momentum when the method keeps one), so that checkpoint restore
  // can copy into state.state() before the first step.
  void init_state(QuantState& state, int64_t n, Device device) const;

 protected:
  explicit Quantizer(QuantSpec spec);

  virtual size_t max_body_bytes(int64_t n, int64_t column) const = 0;
  // Whether encode reads and updates a momentum buffer (QuantState::momentum(), EncodeArgs::momentum).
  virtual bool keeps_momentum() const { return false; }
  // Writes header and body; returns the unpadded payload size (the base pads to 8 with zeros).
  virtual size_t encode_cpu(const EncodeArgs& args) const = 0;
  // The CUDA paths: a method overrides them where its .cu file is linked (QTRAIN_QUANT_CUDA,
  // quant/kernels.h); otherwise these refuse the CUDA span, naming the method.
  virtual size_t encode_cuda(Context& ctx, const EncodeArgs& args) const;
  // `in` is the payload only (header.total bytes, header already validated by the base); where the
  // size varies and the header is shape_header()'s (the largest payload's, under DeferredChecks),
  // `in` is the caller's whole buffer, and the decoder reads the size on the device.
  virtual void decode_cpu(const WireHeader& header, std::span<const uint8_t> in, float* out, bool add) const = 0;
  virtual void decode_cuda(Context& ctx, const WireHeader& header, std::span<const uint8_t> in, float* out,
                           bool add) const;

 private:
  size_t encode_into(Context& ctx, std::span<const float> in, int64_t column, QuantState& state, std::span<uint8_t> out,
                     bool slot) const;
  void decode_into(Context& ctx, std::span<const uint8_t> in, int64_t n, std::span<float> out, bool add,
                   int64_t column) const;
  QuantSpec spec_;
};

// A quantizer for a validated spec (validate() is called here too).
std::unique_ptr<Quantizer> make_quantizer(const QuantSpec& spec);

// The innermost dimension of a tensor as stored ("column" in quantizers.md part A); 1 for scalars.
inline int64_t column_length(const Tensor& t) { return t.ndim() == 0 ? 1 : t.dim(-1); }

}  // namespace qtrain
