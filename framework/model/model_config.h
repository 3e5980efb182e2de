// ModelConfig: the `model` section of a run config (input shape, layer blocks, loss), all that Net
// needs from the config; the rest of the run config (train/run_config.h) stays above the model.
#pragma once

#include <string>
#include <vector>

#include "framework/core/config_node.h"
#include "framework/core/tensor.h"

namespace qtrain {

struct ModelConfig {
  Shape input;                     // per-sample input shape, e.g. [1, 28, 28]
  std::vector<ConfigNode> layers;  // each parsed by its layer's factory (Net)
  ConfigNode loss_section;         // `loss: {type: softmax_cross_entropy}` or the short form below
  std::string loss = "softmax_cross_entropy";
};

// Parses a `model` section (input shape, layer blocks, loss); the layer blocks themselves are
// validated by their factories when the Net is built. Also used by `qtrain bench-model`.
ModelConfig parse_model_config(ConfigNode section);

}  // namespace qtrain
