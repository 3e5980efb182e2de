// A layer created from one `model.layers` entry written as YAML (e.g. "{type: dense, units: 3}"),
// through the registry exactly as Net creates it; errors name "model.yaml" and "model.layers.0".
#pragma once

#include <memory>
#include <string>

#include "framework/core/layer.h"
#include "framework/core/registry.h"
#include "layers/registry.h"
#include "tests/support/config_text.h"

namespace qtrain::testing {

inline std::unique_ptr<Layer> layer_from_yaml(const std::string& yaml) {
  LayerRegistry registry("layer type");
  register_layers(registry);
  ConfigNode cfg = config_from_text(yaml, "model.layers.0", "model.yaml");
  const std::string type = cfg.require<std::string>("type");
  cfg.accept("name");  // read by Net, as type is
  return registry.create(type, cfg);
}

}  // namespace qtrain::testing
