// Parsing of the `quantization:` section and per-tensor resolution of the method. Keys are read
// through ConfigNode so that every error names the file, line and key and lists the allowed values;
// keys belonging to another method are left for finish() to report as unknown.
#include "quant/policy.h"

#include <fnmatch.h>

#include "quant/method.h"
#include "quant/wire.h"

namespace qtrain {
namespace {

bool glob_match(const std::string& pattern, const std::string& text) {
  return pattern.empty() || fnmatch(pattern.c_str(), text.c_str(), 0) == 0;
}

std::vector<std::string> method_names() {
  std::vector<std::string> names;
  for (const QuantMethodInfo* m : quant_methods()) names.push_back(m->name);
  return names;
}

// Reads one parameter of the method into s (absent: s keeps its value). Every key is read, present or
// not, so that an unknown key's error lists the method's keys.
void parse_param(ConfigNode& node, const QuantParamDef& p, QuantSpec& s) {
  if (!node.has(p.key)) {
    (void)node.get<double>(p.key, 0);  // known, with the value s has
    return;
  }
  if (p.applies && !p.applies(s)) node.fail(p.key, p.why_not);
  using Kind = QuantParamDef::Kind;
  const double current = s.number(p.key);
  if (p.kind == Kind::name) {
    s.set(p.key, node.get_choice(p.key, s.choice(p.key), p.choices).c_str());
  } else if (!p.choices.empty()) {
    s.set(p.key, static_cast<double>(std::stoll(node.get_choice(p.key, fmt::format("{}", current), p.choices))));
  } else if (p.kind == Kind::integer) {
    s.set(p.key, static_cast<double>(node.get_int(p.key, static_cast<int64_t>(current), static_cast<int64_t>(p.min),
                                                  static_cast<int64_t>(p.max))));
  } else {
    s.set(p.key, node.get_double(p.key, current, p.min, p.max, p.min_exclusive));
  }
}

}  // namespace

QuantSpec parse_quant_spec(ConfigNode& node, const QuantSpec& inherit) {
  const std::string name = node.get_choice("method", quant_method_name(inherit.method), method_names());
  const QuantMethod method = quant_method_from_name(name);
  const QuantMethodInfo& info = method_info(method);
  QuantSpec s = method == inherit.method ? inherit : QuantSpec::defaults(method);
  s.error_feedback = node.get<bool>("error_feedback", s.error_feedback);
  for (const QuantParamDef& p : info.params) parse_param(node, p, s);
  // The checks validate() repeats for specs built in code, reported at the key that caused them.
  if (s.error_feedback && !info.error_feedback_allowed)
    node.fail("error_feedback", fmt::format("does not apply to {}, which {}", name, info.no_error_feedback_because));
  if (auto problem = info.check(s)) node.fail(problem->first, problem->second);
  try {
    s.validate();
  } catch (const InputError& e) {
    node.fail("", e.what());
  }
  return s;
}

YAML::Node method_entry_section(const std::string& entry, const std::string& origin) {
  YAML::Node node(YAML::NodeType::Map);
  size_t at = 0;
  bool first = true;
  while (at <= entry.size()) {
    const size_t colon = entry.find(':', at);
    const std::string part = entry.substr(at, colon == std::string::npos ? std::string::npos : colon - at);
    at = colon == std::string::npos ? entry.size() + 1 : colon + 1;
    if (first) {
      node["method"] = part;
      first = false;
      continue;
    }
    const size_t eq = part.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == part.size())
      input_error("{} {}: expected key=value after the method name, got '{}'", origin, entry, part);
    const std::string key = part.substr(0, eq);
    // A second value would silently replace the first (and the label would show both).
    if (node[key]) input_error("{} {}: '{}' is given twice", origin, entry, key);
    try {
      node[key] = load_yaml(part.substr(eq + 1));
    } catch (const YAML::Exception& e) {
      input_error("{} {}: the value of '{}' is not valid YAML: {}", origin, entry, key, e.msg);
    }
  }
  return node;
}

QuantSpec parse_method_entry(const std::string& entry) {
  const YAML::Node node = method_entry_section(entry, "--methods");
  auto source = std::make_shared<ConfigSource>();
  source->file = "--methods " + entry;
  source->positions = false;  // each value was parsed on its own: every one would be at 1:1
  ConfigNode section(node, "quantization", source);
  QuantSpec spec = parse_quant_spec(section, QuantSpec::defaults(QuantMethod::fp32));
  section.finish();
  return spec;
}

std::string method_variant_list() {
  std::string list;
  for (const QuantMethodInfo* m : quant_methods())
    for (const std::string& v : m->variants) list += (list.empty() ? "" : ",") + v;
  return list;
}

std::vector<QuantSpec> all_method_variants() {
  std::vector<QuantSpec> specs;
  for (const QuantMethodInfo* m : quant_methods())
    for (const std::string& v : m->variants) specs.push_back(parse_method_entry(v));
  return specs;
}

std::vector<QuantSpec> payload_method_variants() {
  std::vector<QuantSpec> specs;
  for (const QuantSpec& s : all_method_variants())
    if (method_info(s.method).payload) specs.push_back(s);
  return specs;
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
