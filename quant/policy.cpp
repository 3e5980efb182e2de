// Parsing of the `quantization:` section and per-tensor resolution of the method. Keys are read
// through ConfigNode so that every error names the file, line and key and lists the allowed values;
// keys belonging to another method are left for finish() to report as unknown.
#include "quant/policy.h"

#include <fnmatch.h>

#include "quant/methods.h"
#include "quant/wire.h"

namespace qtrain {
namespace {

const char* variant_name(Dettmers8Variant v) { return v == Dettmers8Variant::linear ? "linear" : "dynamic_tree"; }
const char* mode_name(OnebitMode m) { return m == OnebitMode::bucket ? "bucket" : "column"; }
const char* norm_name(QsgdNorm n) { return n == QsgdNorm::l2 ? "l2" : "max"; }

bool glob_match(const std::string& pattern, const std::string& text) {
  return pattern.empty() || fnmatch(pattern.c_str(), text.c_str(), 0) == 0;
}

}  // namespace

QuantSpec parse_quant_spec(ConfigNode& node, const QuantSpec& inherit) {
  const std::string name =
      node.get_choice("method", quant_method_name(inherit.method),
                      {"fp32", "fp16", "bf16", "dettmers8", "onebit", "qsgd", "adaptive", "topk"});
  const QuantMethod method = quant_method_from_name(name);
  const QuantSpec start = method == inherit.method ? inherit : QuantSpec::defaults(method);
  QuantSpec s = start;
  s.method = method;
  s.error_feedback = node.get<bool>("error_feedback", start.error_feedback);
  switch (method) {
    case QuantMethod::fp32:
    case QuantMethod::fp16:
    case QuantMethod::bf16: break;
    case QuantMethod::dettmers8:
      s.variant = node.get_choice("variant", variant_name(start.variant), {"dynamic_tree", "linear"}) == "linear"
                      ? Dettmers8Variant::linear
                      : Dettmers8Variant::dynamic_tree;
      break;
    case QuantMethod::onebit:
      s.mode = node.get_choice("mode", mode_name(start.mode), {"column", "bucket"}) == "bucket" ? OnebitMode::bucket
                                                                                            : OnebitMode::column;
      if (s.mode == OnebitMode::column && node.has("bucket"))
        node.fail("bucket", "applies to onebit mode: bucket only (mode: column uses the tensor's columns)");
      if (s.mode == OnebitMode::bucket && node.has("bucket")) s.bucket = node.get_int("bucket", 0, 1, wire::kMaxValues);
      break;
    case QuantMethod::qsgd:
      s.bits = std::stoi(node.get_choice("bits", std::to_string(start.bits), {"2", "4", "8", "16"}));
      // bucket 0 means "the default for these bits", so an override that changes bits gets the new
      // default unless a bucket was given explicitly.
      if (node.has("bucket")) s.bucket = node.get_int("bucket", 0, 1, wire::kMaxValues);
      s.norm = node.get_choice("norm", norm_name(start.norm), {"max", "l2"}) == "l2" ? QsgdNorm::l2 : QsgdNorm::max;
      break;
    case QuantMethod::adaptive:
      s.proportion = node.get_double("proportion", start.proportion, 0.0, 1.0, true);
      s.sample = node.get_int("sample", start.sample, 0, int64_t{1} << 24);
      if (s.sample != 0 && s.sample < 64) node.fail("sample", fmt::format("must be 0 (exact) or >= 64, got {}", s.sample));
      break;
    case QuantMethod::topk: s.fraction = node.get_double("fraction", start.fraction, 0.0, 1.0, true); break;
  }
  // The checks validate() repeats for specs built in code, reported at the key that caused them.
  if (method == QuantMethod::fp32 && s.error_feedback)
    node.fail("error_feedback", "does not apply to fp32, which sends values exactly");
  try {
    s.validate();
  } catch (const InputError& e) {
    node.fail("", e.what());
  }
  return s;
}

bool QuantOverride::matches(const std::string& layer_name, const std::string& layer_type) const {
  return glob_match(name_pattern, layer_name) && glob_match(type_pattern, layer_type);
}

QuantizationConfig QuantizationConfig::parse(ConfigNode& section) {
  QuantizationConfig c;
  c.base = parse_quant_spec(section, QuantSpec::defaults(QuantMethod::fp32));
  c.min_numel = section.get_int("min_numel", c.min_numel, 0, int64_t{1} << 40);
  for (ConfigNode& item : section.items("overrides")) {
    QuantOverride o;
    o.where = item.location();
    ConfigNode match = item.child("match");
    o.name_pattern = match.get<std::string>("name", "");
    o.type_pattern = match.get<std::string>("type", "");
    match.finish();
    if (o.name_pattern.empty() && o.type_pattern.empty())
      item.fail("match", "needs `name:` (a layer name, glob) or `type:` (a layer type, glob)");
    o.spec = parse_quant_spec(item, c.base);
    o.min_numel = item.get_int("min_numel", c.min_numel, 0, int64_t{1} << 40);
    item.finish();
    c.overrides.push_back(std::move(o));
  }
  section.finish();
  return c;
}

QuantSpec QuantizationConfig::resolve(const std::string& layer_name, const std::string& layer_type,
                                      int64_t numel) const {
  const QuantSpec* spec = &base;
  int64_t threshold = min_numel;
  for (const QuantOverride& o : overrides) {
    if (o.matches(layer_name, layer_type)) {
      spec = &o.spec;
      threshold = o.min_numel;
      break;
    }
  }
  if (numel < threshold) return QuantSpec::defaults(QuantMethod::fp32);
  return *spec;
}

}  // namespace qtrain
