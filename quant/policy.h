// The `quantization:` config section: one method with its parameters, the small-tensor rule
// (min_numel) and per-layer overrides by layer name or type. Parsed and validated once at startup
// (every error names the file, line and key and lists the allowed values); resolve() then gives each
// tensor its QuantSpec, and make_quantizer() turns a spec into a Quantizer.
//
//   quantization:
//     method: qsgd          # a method of quant/methods.def
//     bits: 4               # the method's own keys (docs/quantizers.md lists them)
//     min_numel: 10000      # smaller tensors are sent in fp32
//     overrides:            # the first matching entry wins
//       - {match: {type: conv*}, bits: 8}
//       - {match: {name: dense3}, method: fp16}
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "framework/core/config_node.h"
#include "quant/quantizer.h"

namespace qtrain {

// Reads `method` and that method's keys from `node` (other keys are left for finish() to reject).
// Keys absent from node come from `inherit` when it has the same method, else from the method's
// defaults; `method` itself defaults to inherit.method.
QuantSpec parse_quant_spec(ConfigNode& node, const QuantSpec& inherit);

// A spec from a `--methods` entry: "qsgd", "qsgd:bits=2", "onebit:mode=bucket:bucket=64" (the keys of
// the `quantization:` section, checked the same way). Throws InputError naming the entry.
QuantSpec parse_method_entry(const std::string& entry);
// The section such an entry stands for ("qsgd:bits=2": {method: qsgd, bits: 2}), for callers that add
// keys of their own (min_numel) before parsing it; `origin` says where the entry came from in its
// errors ("--methods", "qtrain.torch.hook").
YAML::Node method_entry_section(const std::string& entry, const std::string& origin);

// Every method's variants (QuantMethodInfo::variants), as the tests and benchmarks sweep them.
std::vector<QuantSpec> all_method_variants();
// The variants of the payload methods only: those a Quantizer encodes (not powersgd, which the
// gradient exchange runs as an algorithm of its own; QuantMethodInfo::payload).
std::vector<QuantSpec> payload_method_variants();
// The same as a `--methods` list: "fp32,fp16,...,qsgd:bits=2,...".
std::string method_variant_list();

struct QuantOverride {
  std::string name_pattern;  // glob (fnmatch) on the layer name; empty = any name
  std::string type_pattern;  // glob on the layer type; empty = any type
  QuantSpec spec;
  int64_t min_numel = 10000;
  std::string where;  // config location, for logs
  bool matches(const std::string& layer_name, const std::string& layer_type) const;
};

struct QuantizationConfig {
  QuantSpec base;             // default: fp32
  int64_t min_numel = 10000;  // quantizers.md part A (QSGD section 5)
  std::vector<QuantOverride> overrides;

  // Parses the section (an absent or empty section means fp32 everywhere) and calls finish() on it.
  static QuantizationConfig parse(ConfigNode& section);

  // The spec for one tensor of `numel` values in layer `layer_name` of type `layer_type`: the first
  // matching override, else the base; fp32 when numel < the applicable min_numel.
  QuantSpec resolve(const std::string& layer_name, const std::string& layer_type, int64_t numel) const;
};

}  // namespace qtrain
