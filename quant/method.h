// A quantization method's descriptor: everything the rest of qtrain needs to know about a method, in
// one row that the method's own .cpp file defines. The config parser, QuantSpec's defaults, checks and
// text, the gradient exchange's choices (algorithm, column striping, 16-bit packing), the tests' and
// benchmarks' method lists and the round-trip error bound all read the row; no code outside the
// method's files switches on QuantMethod. quant/methods.def lists the rows (one line per method).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "quant/quantizer.h"

namespace qtrain {

// One parameter of a method, as the config spells it (`bits: 4`) and QuantSpec stores it.
struct QuantParamDef {
  enum class Kind : uint8_t {
    integer,  // a whole number in [min, max], or one of `choices` when they are given ("2", "4", ...)
    real,     // a number in [min, max] (or (min, max] with min_exclusive)
    name,     // one of `choices`, stored as its index (which the methods use as the wire value)
  };
  std::string key;
  Kind kind = Kind::integer;
  double fallback = 0;  // the default; always valid (0 may mean "derived", see QuantMethodInfo::resolve)
  double min = 0, max = 0;
  bool min_exclusive = false;
  std::vector<std::string> choices;
  // Whether the key applies to this spec (onebit's bucket only in bucket mode); when it does not, a
  // config that sets it is refused with `why_not`, and str() leaves it out.
  std::function<bool(const QuantSpec&)> applies;
  std::string why_not;
  bool shown_at_default = true;  // str() prints it even when it has its default value
};

// What a round-trip bound may depend on: the value, its decoded value, the span's largest magnitude
// and the payload (for the scales a method stores).
struct RoundTripValue {
  double x = 0, y = 0, max_abs = 0;
  size_t index = 0;
  std::span<const uint8_t> payload;
};

// How the gradient exchange finishes the sum of the ranks' decoded values (allgather: every rank's
// sum; reduce-scatter + allgather: the owner's sum of its stripe, before it re-encodes it).
enum class QuantCombine : uint8_t {
  // The sum times the reduction's factor (communication.reduce: mean divides by the world size).
  sum,
  // The majority vote (signSGD, Bernstein et al. 2018): +1 where the sum of the decoded signs is >= 0,
  // -1 elsewhere. A tie (an even number of ranks split evenly) votes +1, the bit a zero value sends
  // too, so the vote is one bit again and the owner's re-encoding of it is exact. The sums are of
  // small integers, exact in f32 in every order, so every rank computes the same vote. The mean's
  // 1/P is not applied: the update is lr * vote, whatever the world size.
  vote,
};

struct QuantMethodInfo {
  QuantMethod id = QuantMethod::fp32;  // the wire id (header byte 2)
  std::string name;
  std::vector<QuantParamDef> params;
  bool error_feedback = false;  // whether a residual is kept unless the config says otherwise
  bool error_feedback_allowed = true;
  // Why error feedback does not apply, when it is not allowed (the config error says it).
  std::string no_error_feedback_because = "sends values exactly";
  // The gradient exchange that suits the payload unless the config chooses: "allreduce" (the payload
  // is the values, which MPI and NCCL can sum), "allgather" (decode every rank's payload) or
  // "reduce_scatter_allgather" (decode, sum and re-encode a stripe each); for a method without a
  // payload, the exchange algorithm that runs it ("powersgd"), whatever the config chooses.
  // "allreduce_compact": the payload body is values at positions that every rank chooses alike
  // (`summable_body`), so the bodies are summed natively and decoded once.
  std::string algorithm = "allgather";
  // Whether the method is a payload quantizer (a Quantizer from `make`, encode/decode of one span).
  // A method without a payload (powersgd: two all-reduces between compression and decompression) is
  // run by the gradient exchange as its own algorithm: it has no `make` and no `within_bound`, and
  // the quantizer property tests and bench-quant leave it out.
  bool payload = true;
  // Whether the body (after the 32-byte header, padding included) is f32 values whose positions
  // depend only on what the header says, and the header is the same on every rank for the same
  // tensor, step and span (randomk: k values at indices from the shared random stream). Such bodies
  // sum elementwise with a native allreduce; decoding the summed payload gives the sum of the decodes.
  bool summable_body = false;
  QuantCombine combine = QuantCombine::sum;
  // The spec the owner of a stripe re-encodes its combined values with (reduce-scatter + allgather):
  // the method's own by default; signsgd drops its momentum, as the vote is not a gradient to smooth.
  std::function<QuantSpec(const QuantSpec&)> owner_spec = [](const QuantSpec& s) { return s; };
  int cast_bits = 0;         // 32 or 16 when the payload is the values in a float format; else 0
  bool brain_float = false;  // the 16-bit cast is bf16 (else fp16)
  // Whether encode groups values by the tensor's columns (the span's column length must divide its
  // size); the exchange then cuts stripes at column boundaries.
  std::function<bool(const QuantSpec&)> columnar = [](const QuantSpec&) { return false; };
  // Fills parameters whose default is derived from others (qsgd's bucket from its bits).
  std::function<void(QuantSpec&)> resolve = [](QuantSpec&) {};
  // Rules between parameters or special values a range cannot say: the key and what is wrong.
  std::function<std::optional<std::pair<std::string, std::string>>(const QuantSpec&)> check = [](const QuantSpec&) {
    return std::nullopt;
  };
  // Whether one decoded value is within what the method allows (quantizers.md part A: a rounding
  // bound, a sign rule, topk's "dropped or exact"); tests and bench-quant check every method with it.
  std::function<bool(const QuantSpec&, const RoundTripValue&)> within_bound;
  // The variants that tests, bench-quant and bench-allreduce sweep, as `--methods` entries
  // ("qsgd:bits=2"); the first is the method with its defaults, or with what a benchmark needs to
  // measure it (powersgd starts compressing at step 0).
  std::vector<std::string> variants;
  // Makes the quantizer for a validated, resolved spec (payload methods only).
  std::function<std::unique_ptr<Quantizer>(const QuantSpec&)> make;
};

// The descriptor of a method (every QuantMethod value has one).
const QuantMethodInfo& method_info(QuantMethod method);
// All methods, in wire-id order.
std::span<const QuantMethodInfo* const> quant_methods();
// "fp32, fp16, ..." for messages.
std::string quant_method_names();

// The descriptor's parameter `key`, or null when the method has none of that name.
const QuantParamDef* find_param(const QuantMethodInfo& info, std::string_view key);

}  // namespace qtrain
