// Method lists on the command line -> QuantizationConfig, through the config parser (same checks).
#include "tools/qtrain/method_list.h"

#include "framework/config_node.h"

namespace qtrain::cli {

std::vector<MethodChoice> parse_method_list(const std::string& list) {
  std::vector<MethodChoice> out;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t comma = list.find(',', start);
    const std::string item = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    start = comma == std::string::npos ? list.size() + 1 : comma + 1;
    if (item.empty()) continue;
    YAML::Node node(YAML::NodeType::Map);
    size_t at = 0;
    bool first = true;
    while (at <= item.size()) {
      const size_t colon = item.find(':', at);
      const std::string part = item.substr(at, colon == std::string::npos ? std::string::npos : colon - at);
      at = colon == std::string::npos ? item.size() + 1 : colon + 1;
      if (first) {
        node["method"] = part;
        first = false;
        continue;
      }
      const size_t eq = part.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == part.size())
        input_error("--methods {}: expected key=value after the method name, got '{}'", item, part);
      const std::string key = part.substr(0, eq);
      // A second value would silently replace the first (and the label would show both).
      if (node[key]) input_error("--methods {}: '{}' is given twice", item, key);
      try {
        node[key] = load_yaml(part.substr(eq + 1));
      } catch (const YAML::Exception& e) {
        input_error("--methods {}: the value of '{}' is not valid YAML: {}", item, key, e.msg);
      }
    }
    node["min_numel"] = 0;
    auto source = std::make_shared<ConfigSource>();
    source->file = "--methods " + item;
    source->positions = false;  // each value was parsed on its own: every one would be at 1:1
    ConfigNode section(node, "quantization", source);
    out.push_back({item, QuantizationConfig::parse(section)});
  }
  if (out.empty()) input_error("--methods: the list is empty");
  return out;
}

}  // namespace qtrain::cli
