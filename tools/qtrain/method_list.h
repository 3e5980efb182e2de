// Parsing of method lists given on the command line, e.g.
//   --methods fp32,fp16,dettmers8,onebit,qsgd:bits=4,qsgd:bits=8:bucket=512,adaptive:proportion=0.05
// Each entry is a method name with optional key=value parameters separated by ':'; the keys are those
// of the config's `quantization:` section and are validated the same way.
#pragma once

#include <string>
#include <vector>

#include "quant/policy.h"

namespace qtrain::cli {

struct MethodChoice {
  std::string label;          // as given, e.g. "qsgd:bits=4"
  QuantizationConfig config;  // min_numel 0: the whole tensor is quantized
};

std::vector<MethodChoice> parse_method_list(const std::string& list);

// The parts of `text` between the separators, empty ones included ("a,,b" -> "a", "", "b"; "" -> "").
std::vector<std::string> split_on(const std::string& text, char separator);

}  // namespace qtrain::cli
