// Method lists on the command line -> QuantizationConfig, through the config parser (same checks).
#include "tools/qtrain/method_list.h"

namespace qtrain::cli {

std::vector<MethodChoice> parse_method_list(const std::string& list) {
  std::vector<MethodChoice> out;
  for (const std::string& item : split_on(list, ',')) {
    if (item.empty()) continue;
    QuantizationConfig config;
    config.base = parse_method_entry(item);
    config.min_numel = 0;
    out.push_back({item, config});
  }
  if (out.empty()) input_error("--methods: the list is empty");
  return out;
}

std::vector<std::string> split_on(const std::string& text, char separator) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t at = text.find(separator); at != std::string::npos; at = text.find(separator, start)) {
    parts.push_back(text.substr(start, at - start));
    start = at + 1;
  }
  parts.push_back(text.substr(start));
  return parts;
}

}  // namespace qtrain::cli
