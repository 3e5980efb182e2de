// Method lists on the command line -> QuantizationConfig, through the config parser (same checks).
#include "tools/qtrain/method_list.h"

namespace qtrain::cli {

std::vector<MethodChoice> parse_method_list(const std::string& list) {
  std::vector<MethodChoice> out;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t comma = list.find(',', start);
    const std::string item = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    start = comma == std::string::npos ? list.size() + 1 : comma + 1;
    if (item.empty()) continue;
    QuantizationConfig config;
    config.base = parse_method_entry(item);
    config.min_numel = 0;
    out.push_back({item, config});
  }
  if (out.empty()) input_error("--methods: the list is empty");
  return out;
}

}  // namespace qtrain::cli
